"""An EAGLE-3 draft served with --speculative-algorithm EAGLE, named by the real daemon over
HTTP, from the log and from /server_info.

The headline requirement: ``specwatch_finding{code="eagle3_draft_with_eagle_algorithm"}`` as
soon as the startup lines are written, before any request, and equally when only the server's
``/server_info`` is reachable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import run_daemon
from tests.support.fake_sglang import Route, exposition, fake_sglang, server_info
from tests.support.files import append
from tests.support.loglines import startup, undertrained_drafter, wrong_algorithm_flag

pytestmark = pytest.mark.e2e

WRONG_FLAG = {"code": "eagle3_draft_with_eagle_algorithm", "severity": "critical"}


def active(value: float | None) -> bool:
    return value == 1


def test_wrong_flag_from_startup_lines_written_after_start(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    with run_daemon(["--log-file", str(log), "--target", "sglang-0"], port) as d:
        assert d.scrape().value("specwatch_finding", target="sglang-0", **WRONG_FLAG) is None
        append(log, *wrong_algorithm_flag())
        s = d.wait_metric("specwatch_finding", active, target="sglang-0", **WRONG_FLAG)
        info = [x for x in s.samples if x.name == "specwatch_speculative_info"]
        assert [(x.labels["algorithm"], x.labels["draft_architecture"]) for x in info] == [
            ("EAGLE", "LlamaForCausalLMEagle3")
        ]
        assert "sk-live" not in repr(s.samples)


def test_wrong_flag_from_a_log_present_at_start(tmp_path: Path, port: int) -> None:
    """A sidecar restarted after the server still learns the flags from the file's head."""
    log = tmp_path / "server.log"
    append(log, *wrong_algorithm_flag())
    with run_daemon(["--log-file", str(log)], port) as d:
        d.wait_metric("specwatch_finding", active, target="default", **WRONG_FLAG)


def test_restart_with_the_right_flag_clears_the_finding(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    with run_daemon(["--log-file", str(log)], port) as d:
        append(log, *wrong_algorithm_flag())
        d.wait_metric("specwatch_finding", active, **WRONG_FLAG)
        append(log, *startup(algorithm="EAGLE3"))
        d.wait_metric("specwatch_finding", lambda v: v is None, **WRONG_FLAG)


def test_undertrained_drafter_warnings_from_the_log(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    with run_daemon(["--log-file", str(log)], port) as d:
        append(log, *undertrained_drafter())
        for code in ("cuda_graph_disabled", "draft_tokens_excessive"):
            d.wait_metric("specwatch_finding", active, code=code, severity="warning")


def test_wrong_flag_from_server_info_alone(port: int) -> None:
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        server.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
        args = [
            *("--metrics-url", f"{server.url}/metrics"),
            *("--server-info-url", f"{server.url}/server_info"),
        ]
        with run_daemon(args, port) as d:
            s = d.wait_metric("specwatch_finding", active, target="default", **WRONG_FLAG)
            assert s.value("specwatch_upstream_up", endpoint="server_info") == 1
            assert s.value("specwatch_accept_length") is not None  # from /metrics, no log
            assert "sk-live" not in repr(s.samples)
