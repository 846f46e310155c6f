"""``make demo`` end to end: the real exporter, simulator, Prometheus and Alertmanager.

The demo runs once (``DEMO_SECONDS``) with the default port held busy, the way a second demo or
a developer's exporter would hold it; every test reads that one run's output.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, require_tool

DEMO_SECONDS = 40


@dataclass
class DemoRun:
    returncode: int
    output: str

    @property
    def pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(r"started \S+ \(pid (\d+)\)", self.output)]

    @property
    def workdir(self) -> Path:
        match = re.search(r"simulated SGLang log: (\S+)", self.output)
        assert match, self.output
        return Path(match.group(1)).parent


def demo_command() -> list[str]:
    return [sys.executable, "-m", "exporter.demo"]


def demo_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture(scope="module")
def demo_run() -> Iterator[DemoRun]:
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", 9477))
            busy.listen()
        except OSError:
            pass  # already taken by something else: just as good
        result = subprocess.run(
            demo_command(),
            cwd=REPO,
            env=demo_env(DEMO_SECONDS=str(DEMO_SECONDS)),
            capture_output=True,
            text=True,
            timeout=DEMO_SECONDS + 60,
        )
    yield DemoRun(result.returncode, result.stdout + result.stderr)


def running_with(marker: str) -> list[int]:
    """Processes whose command line mentions the demo's working directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_prints_metrics_url_on_a_free_port_and_detects_the_collapse(demo_run: DemoRun) -> None:
    assert demo_run.returncode == 0, demo_run.output
    url = re.search(r"specwatch /metrics: http://127\.0\.0\.1:(\d+)/metrics", demo_run.output)
    assert url and url.group(1) != "9477", demo_run.output
    assert re.search(
        r"DETECTED  speculative decoding collapsed: accept length 1\.00", demo_run.output
    ), demo_run.output
    assert re.search(
        r"accept length 1\.00 \| accept rate 0\.00 \| speedup 0\.\d\dx", demo_run.output
    )


def test_demo_shows_the_capped_running_requests_finding(demo_run: DemoRun) -> None:
    """Incident 1 runs at the EAGLE cap of 48 with 32 requests waiting."""
    assert "FINDING   running_requests_capped (warning) is active" in demo_run.output


def test_demo_leaves_no_process_behind(demo_run: DemoRun) -> None:
    assert len(demo_run.pids) >= 2, demo_run.output
    assert not [pid for pid in demo_run.pids if alive(pid)]
    assert running_with(str(demo_run.workdir)) == []
    assert not demo_run.workdir.exists()


def test_demo_alert_fires_in_prometheus_and_reaches_alertmanager(demo_run: DemoRun) -> None:
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    assert "SpecDecodeAcceptLengthCollapsed is firing in Prometheus" in demo_run.output
    assert (
        "NOTIFY  Alertmanager webhook: FIRING SpecDecodeAcceptLengthCollapsed (critical)"
        in demo_run.output
    ), demo_run.output


def test_ctrl_c_stops_the_demo_and_every_child() -> None:
    proc = subprocess.Popen(
        demo_command(), cwd=REPO, env=demo_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "started simulator" in line or not line:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    run = DemoRun(proc.returncode, "".join(lines) + rest)
    assert run.returncode == 0, run.output
    assert "demo stopped" in run.output
    assert not [pid for pid in run.pids if alive(pid)]
    assert running_with(str(run.workdir)) == []


def test_bad_demo_seconds_is_refused_by_name() -> None:
    result = subprocess.run(
        demo_command(), env=demo_env(DEMO_SECONDS="soon"), capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "DEMO_SECONDS" in result.stderr
