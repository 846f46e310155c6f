"""A server logging its requests (prompts, outputs, ids, headers) through specwatch: none of
that text appears in what specwatch serves, prints or logs, at any request-log level."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemon import run_daemon, specwatch_cmd
from tests.support.loglines import decode_line
from tests.support.requests import OUTPUT, PROMPT, RID, finish_line
from tests.support.tools import free_port

pytestmark = pytest.mark.e2e

SECRETS = (PROMPT, OUTPUT, RID, "Lake Bled", "4111-1111", "SECRET-OUTPUT", "opaque-token-123")
HEADERS = {"x-smg-routing-key": "tenant-a", "x-api-token": "opaque-token-123"}


def request_log(path: Path) -> Path:
    """Stats windows and requests at every level and in both forms, one over the line cap."""
    lines = [decode_line(2.4, time_text=f"2026-02-23 00:14:{s:02d}") for s in range(30)]
    for i in range(120):
        lines.append(
            finish_line(
                1.0 + 1 / 40 if i % 5 == 0 else 2.6,
                40,
                level=i % 4,
                json_format=i % 2 == 1,
                headers=HEADERS,
                time_text=f"2026-02-23 00:15:{i % 60:02d}",
            )
        )
    lines.append(finish_line(1.0, 64, level=3, prompt=PROMPT * 40_000, headers=HEADERS))
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _assert_clean(text: str, what: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{what} shows {secret!r}"


@pytest.mark.parametrize("command", [["doctor", "--log-file"], ["report"], ["report", "--json"]])
def test_doctor_and_report_print_the_distribution_and_no_request_text(
    tmp_path: Path, command: list[str]
) -> None:
    log = request_log(tmp_path / "server.log")
    html = tmp_path / "report.html"
    extra = ["--html", str(html)] if command == ["report"] else []
    result = subprocess.run(
        specwatch_cmd(*command, str(log), *extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode in (0, 1), result.stderr
    _assert_clean(result.stdout + result.stderr, " ".join(command))
    if "--json" in command:
        requests = json.loads(result.stdout)["requests"]
        assert (requests["finished"], requests["clipped"]) == (121, 1)
        assert requests["accept_length_buckets"]["1.05"] == 25
    else:
        assert "121 finished, 121 with speculation" in result.stdout
        assert "requests_without_benefit" in result.stdout or "get nothing" in result.stdout
    if extra:
        _assert_clean(html.read_text(encoding="utf-8"), "the HTML report")


def test_the_daemon_serves_and_logs_no_request_text(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    args = ["--log-file", str(log), "--log-level", "debug", "--request-label-header"]
    with run_daemon([*args, "x-smg-routing-key"], free_port()) as daemon:
        log.write_bytes(request_log(tmp_path / "source.log").read_bytes())
        scrape = daemon.wait_metric("specwatch_requests_finished_total", lambda v: v == 121)
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert daemon.stop() == 0
        own_log = daemon.logged

    assert scrape.value("specwatch_requests_clipped_total", target="default") == 1
    assert (
        scrape.value("specwatch_log_skipped_lines_total", target="default", reason="too_long") == 1
    )
    count = "specwatch_request_accept_length_count"
    assert scrape.value(count, target="default", traffic_class="tenant-a") == 121
    _assert_clean(text, "/metrics")
    _assert_clean(own_log, "specwatch's own log")
