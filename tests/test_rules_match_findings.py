"""What the operator chose is not a fault: a cap set with --max-running-requests is saturation
(information, with the throughput it reached), SGLang's own lowered cap stays a warning; and an idle
node's health-probe prefills are no traffic for the decode-stats finding.

Logs in SGLang's format (``tests/support/loglines.py``); a server started with
``--max-running-requests 128`` logs ``max_running_requests=128`` in its ``server_args`` and no
``Max running requests is reset`` line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from tests.support.files import write_log
from tests.support.loglines import decode, prefill, startup


def explicit_cap_startup(cap: int) -> list[str]:
    lines = startup(max_running=cap)
    lines = [line for line in lines if "Max running requests is reset" not in line]
    return [
        line.replace("max_running_requests=None", f"max_running_requests={cap}") for line in lines
    ]


def saturated(cap: int) -> list[str]:
    """Every window at the cap with a queue, 1.3x the 1,500 tok/s baseline."""
    return [decode(260 + 4 * i, 3.0, 0.67, running=cap, queued=40, tput=1950) for i in range(8)]


def doctor_json(
    capsys: pytest.CaptureFixture[str], log: str, *flags: str
) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--log-file", log, "--json", *flags])
    return code, json.loads(capsys.readouterr().out)


def test_an_explicit_cap_is_saturation_information_not_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, explicit_cap_startup(128) + saturated(128))
    code, report = doctor_json(capsys, log, "--baseline-tok-s", "1500")
    assert code == 0
    [finding] = report["findings"]
    assert (finding["code"], finding["severity"]) == ("running_requests_saturated", "info")
    assert "max_running_requests=128 it was started with" in finding["summary"]
    assert "at 1950 tok/s, 1.30x the baseline" in finding["seen"]
    assert "--max-running-requests" not in finding["fix"].split(";")[0]
    assert main(["report", log, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"]] == ["running_requests_saturated"]


def test_saturation_without_a_baseline_still_reports_the_throughput_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, explicit_cap_startup(128) + saturated(128))
    code, report = doctor_json(capsys, log)
    assert code == 0
    [finding] = report["findings"]
    assert finding["code"] == "running_requests_saturated"
    assert finding["seen"].endswith("with up to 40 queued, at 1950 tok/s.")


def test_sglangs_own_lowered_cap_still_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, startup(max_running=48) + saturated(48))
    code, report = doctor_json(capsys, log)
    assert code == 1
    assert [f["code"] for f in report["findings"]] == ["running_requests_capped"]


def test_sglang_0_5_resolved_cap_is_told_by_the_reset_warning_before_its_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SGLang 0.5 resolves its arguments first: the unprefixed reset warning comes before a
    ``server_args`` that already says 48."""
    lines = startup(max_running=48)
    reset = next(line for line in lines if "Max running requests is reset" in line)
    lines.remove(reset)
    lines = [
        reset,
        *(line.replace("max_running_requests=None", "max_running_requests=48") for line in lines),
    ]
    code, report = doctor_json(capsys, write_log(tmp_path, lines + saturated(48)))
    assert code == 1
    assert [f["code"] for f in report["findings"]] == ["running_requests_capped"]


def test_health_probes_on_an_idle_node_are_not_missing_decode_stats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kubernetes probes /health every few seconds; each writes a one-token prefill line."""
    probes = [prefill(100 + 5 * i, new_tokens=1, running=0) for i in range(120)]
    code, report = doctor_json(capsys, write_log(tmp_path, startup() + probes))
    assert "decode_stats_not_logged" not in [f["code"] for f in report["findings"]]
    users = [prefill(100 + 5 * i) for i in range(120)]
    code, report = doctor_json(capsys, write_log(tmp_path, startup() + users))
    assert code == 1
    assert "decode_stats_not_logged" in [f["code"] for f in report["findings"]]
