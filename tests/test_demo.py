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
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from exporter.demo.configs import demo_rules
from exporter.demo.loopback import PREFERRED, bound, fetch
from exporter.demo.narrator import Narrator, read_metrics, status_line
from exporter.demo.stack import Demo
from exporter.demo.webhook import start_webhook, stop_webhook
from exporter.engines.record import StatsRecord
from exporter.engines.sglang import classify
from exporter.simulate import SCENARIOS, events
from exporter.simulate.realtime import schedule
from tests.support.tools import REPO, free_port, require_tool
from tests.support.waiting import PROCESS_TIMEOUT

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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_demo_names_the_drafter_once_and_waits_quietly(demo_run: DemoRun) -> None:
    server = [line for line in demo_run.output.splitlines() if "SERVER" in line]
    assert len(server) == 1, demo_run.output
    assert re.search(
        r"started: +EAGLE3 with draft \S+ \(LlamaForCausalLMEagle3\), 4 draft", server[0]
    )
    assert demo_run.output.count("waiting for the server's first decode window") <= 1


@pytest.mark.e2e
def test_demo_shows_the_capped_running_requests_finding(demo_run: DemoRun) -> None:
    """The collapsed drafter runs at the EAGLE cap of 48 with 32 requests waiting."""
    assert "FINDING   running_requests_capped (warning) is active" in demo_run.output


@pytest.mark.e2e
def test_demo_leaves_no_process_behind(demo_run: DemoRun) -> None:
    assert len(demo_run.pids) >= 2, demo_run.output
    assert not [pid for pid in demo_run.pids if alive(pid)]
    assert running_with(str(demo_run.workdir)) == []
    assert not demo_run.workdir.exists()


@pytest.mark.e2e
def test_demo_alert_fires_in_prometheus_and_reaches_alertmanager(demo_run: DemoRun) -> None:
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    assert "SpecDecodeAcceptLengthCollapsed is firing in Prometheus" in demo_run.output
    # Prometheus is given its first scrape before the story starts: no false alarm.
    assert "SpecwatchAbsent" not in demo_run.output
    # Routed by the shipped Alertmanager example: the collapse pages, and is the page alone;
    # its low accept length and its slowdown are the collapse, not tickets of their own.
    assert "NOTIFY  pager: FIRING SpecDecodeAcceptLengthCollapsed (critical)" in demo_run.output
    assert "FIRING SpecDecodeSlowerThanBaseline" not in demo_run.output
    assert "FIRING SpecDecodeAcceptLengthLow" not in demo_run.output


@pytest.mark.e2e
def test_ctrl_c_stops_the_demo_and_every_child() -> None:
    proc = subprocess.Popen(
        demo_command(), cwd=REPO, env=demo_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while time.monotonic() < deadline:  # until the story has started: the server's is narrated
        line = proc.stdout.readline()
        lines.append(line)
        if "started:" in line or not line:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=PROCESS_TIMEOUT)
    run = DemoRun(proc.returncode, "".join(lines) + rest)
    assert run.returncode == 0, run.output
    assert "demo stopped" in run.output
    assert not [pid for pid in run.pids if alive(pid)]
    assert running_with(str(run.workdir)) == []


@pytest.mark.e2e
def test_bad_demo_seconds_is_refused_by_name() -> None:
    result = subprocess.run(
        demo_command(), env=demo_env(DEMO_SECONDS="soon"), capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "DEMO_SECONDS" in result.stderr


def test_two_demos_starting_at_once_each_get_a_port_of_their_own() -> None:
    """Two demos' webhooks started in the same moment, both preferring one free port: one gets
    it, the other one the kernel picks, and each is its own server. A choice that probed the
    port and let it go before the service bound it gave both demos that port, and the second
    to bind it failed."""
    preferred = free_port()
    together = threading.Barrier(2)
    servers: list[ThreadingHTTPServer] = []

    def start(port: int) -> int | None:
        if port == preferred:
            together.wait(timeout=PROCESS_TIMEOUT)
        server = start_webhook(port)
        if server is None:
            return None
        servers.append(server)
        return server.server_port

    with ThreadPoolExecutor(2) as pool:
        ports = list(pool.map(lambda _: bound(start, preferred), range(2)))
    try:
        assert None not in ports and len(set(ports)) == 2 and preferred in ports
        assert len(servers) == 2
    finally:
        for server in servers:
            stop_webhook(server)


@pytest.mark.e2e
def test_two_demos_started_together_run_each_its_own_exporter(tmp_path: Path) -> None:
    """Two demos in the same second, preferring one free port for their exporters: each
    exporter comes up, on a port of its own, read back from what it says."""
    preferred = replace(PREFERRED, exporter=free_port())
    demos = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        demos.append(Demo(tmp_path / name, "collapsed", preferred=preferred))
    try:
        with ThreadPoolExecutor(2) as pool:
            started = list(pool.map(lambda d: d.start_exporter(d.workdir / "server.log"), demos))
        assert started == [True, True], [c.tail() for d in demos for c in d.processes.ended]
        ports = {demo.ports.exporter for demo in demos}
        assert len(ports) == 2 and preferred.exporter in ports
        for demo in demos:
            assert demo.processes.dead() is None
            assert "specwatch_" in (fetch(demo.metrics_url) or "")
    finally:
        for demo in demos:
            demo.stop()


def exposition(accept: float | None, draft: str, architecture: str = "") -> str:
    """What the exporter shows; accept None: no fresh decode window. An EAGLE-3 drafter's
    accept length is judged: its floor is exported."""
    lines = [
        f'specwatch_speculative_info{{algorithm="EAGLE3",draft_model="{draft}",'
        f'draft_architecture="{architecture}",num_draft_tokens="4"}} 1',
        "specwatch_accept_length_floor 1.8",
    ]
    if accept is not None:
        lines += [f"specwatch_accept_length {accept}", "specwatch_speedup 0.4"]
    return "\n".join(lines) + "\n"


def test_narrator_tells_collapse_restart_and_recovery_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    narrator = Narrator()
    steps = [
        exposition(None, "drafts/broken", "LlamaForCausalLMEagle3"),
        exposition(None, "drafts/broken", "LlamaForCausalLMEagle3"),
        exposition(1.0, "drafts/broken", "LlamaForCausalLMEagle3"),
        exposition(1.0, "drafts/broken", "LlamaForCausalLMEagle3"),
        exposition(1.0, "drafts/good"),  # restarted: arguments logged, draft not loaded yet
        exposition(1.0, "drafts/good", "LlamaForCausalLMEagle3"),
        exposition(3.2, "drafts/good", "LlamaForCausalLMEagle3"),
    ]
    for text in steps:
        narrator.metrics(read_metrics(text))
    events = [
        re.sub(r"^\+ *\d+s  ", "", line)
        for line in capsys.readouterr().out.splitlines()
        if "accept length 1.00 |" not in line and "accept length 3.20 |" not in line
    ]
    assert events == [
        "SERVER    started:   EAGLE3 with draft drafts/broken (LlamaForCausalLMEagle3), "
        "4 draft tokens",
        "waiting for the server's first decode window...",
        "DETECTED  speculative decoding collapsed: accept length 1.00 (no draft token "
        "accepted), 0.40x the baseline",
        "SERVER    restarted: EAGLE3 with draft drafts/good, 4 draft tokens",
        "SERVER    draft loaded: LlamaForCausalLMEagle3",
        "RECOVERED accept length 3.20, 0.40x the baseline",
    ]


def test_live_recovery_scenario_recovers_well_within_two_minutes() -> None:
    """The demo's promise: the collapse from its first seconds, the recovery before 2 minutes."""
    decode_windows: list[tuple[float, float | None]] = []
    live = schedule(events(SCENARIOS["recovery"], duration=300), origin=0.0, speed=1.0)
    for when, event in live:
        record = classify(event.render(datetime(2026, 5, 20, 9, 0)))
        if isinstance(record, StatsRecord) and record.kind == "decode":
            decode_windows.append((when, record.accept_length))
    collapsed = [when for when, accept in decode_windows if accept == 1.0]
    healthy = [when for when, accept in decode_windows if accept is not None and accept > 2.5]
    assert collapsed and healthy
    assert 0 <= collapsed[0] < 10
    assert max(collapsed) < min(healthy) < 100


def test_the_status_line_shows_the_share_of_requests_without_benefit() -> None:
    """Beside a healthy-looking window, the share its requests' own figures show."""
    text = exposition(2.4, "drafts/good", "LlamaForCausalLMEagle3") + "\n".join(
        [
            "# TYPE specwatch_request_accept_length histogram",
            'specwatch_request_accept_length_bucket{target="a",le="1.0"} 0',
            'specwatch_request_accept_length_bucket{target="a",le="1.05"} 15',
            'specwatch_request_accept_length_bucket{target="a",le="+Inf"} 100',
            'specwatch_request_accept_length_count{target="a"} 100',
            'specwatch_request_accept_length_sum{target="a"} 235.0',
        ]
    )

    line = status_line(read_metrics(text + "\n"), 2.4)

    assert line.startswith("accept length 2.40 | ")
    assert line.endswith(" | 15% of requests at <= 1.05")


def test_the_status_line_says_nothing_of_requests_a_server_does_not_log() -> None:
    line = status_line(read_metrics(exposition(2.4, "drafts/good", "LlamaForCausalLMEagle3")), 2.4)

    assert "requests" not in line


def test_narrator_calls_adaptive_drafting_off_by_its_name_and_probes_no_collapse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Drafting off (steps 0, no accept length) is a status line of its own; a probe at 1.02
    while specwatch withholds the floor is no collapse, as for the alert."""
    narrator = Narrator()
    info = (
        'specwatch_speculative_info{algorithm="EAGLE3",draft_model="drafts/d",'
        'draft_architecture="",num_draft_tokens="4"} 1\n'
    )
    off = info + "specwatch_speculative_steps 0\nspecwatch_gen_throughput_tokens_per_second 2080\n"
    probe = info + "specwatch_speculative_steps 1\nspecwatch_accept_length 1.02\n"
    for text in (off, probe, off):
        narrator.metrics(read_metrics(text))
    out = capsys.readouterr().out
    assert out.count("speculation off (adaptive) | 2080 tok/s") == 2
    assert "DETECTED" not in out


def test_demo_holds_the_collapse_page_until_its_warning_twin_has_resolved(
    tmp_path: Path,
) -> None:
    """The inhibition of the low-accept alert lasts while the collapse page fires; its
    ``keep_firing_for`` must outlast the low alert's recency window, or the demo shows a
    recovery ticket that the shipped rules (5 minutes) never send."""
    demo_rules(tmp_path / "rules.yaml")
    rules = {
        rule.get("alert") or rule["record"]: rule
        for group in yaml.safe_load((tmp_path / "rules.yaml").read_text())["groups"]
        for rule in group["rules"]
    }
    window = re.search(r"\[(\d+)m\]", rules["target:specwatch_accept_length:avg2m"]["expr"])
    assert window is not None
    held = rules["SpecDecodeAcceptLengthCollapsed"]["keep_firing_for"]
    assert held.endswith("s") and int(held[:-1]) > 60 * int(window.group(1))
    assert "target:specwatch_accept_length:avg2m" in rules["SpecDecodeAcceptLengthLow"]["expr"]
