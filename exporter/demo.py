"""``make demo``: watch specwatch catch a broken drafter, live, with no GPU.

A simulated SGLang server (``specwatch simulate --real-time``, the ``recovery`` scenario by
default: incident 1 for a minute, then a restart with a working drafter) writes its log; the
exporter tails it; when Prometheus and Alertmanager are installed they run on loopback with the
project's alert rules and a small webhook receiver prints their notifications. Everything is a
child process in its own process group, so Ctrl-C or ``DEMO_SECONDS`` ends all of it.

Environment: ``DEMO_SECONDS`` (stop after this many seconds), ``DEMO_SCENARIO`` (another
simulator scenario).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.simulate import SCENARIOS

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "alerts" / "specwatch-rules.yaml"
EXPECTED_ACCEPT_LENGTH = 3.0
COLLAPSED_AT = 1.05  # accept length at or below this: no draft token is being accepted
DEMO_FOR = "10s"  # the shipped rules wait minutes before firing; the demo cannot
POLL_SECONDS = 3.0
QUIET_SECONDS = 8.0  # longer than any scenario's decode interval: the server went quiet
INFO = "specwatch_speculative_info"
PROMETHEUS_JOB = "specwatch"  # the job name the shipped rules select
STOP_GRACE_SECONDS = 5.0

_print_lock = threading.Lock()


def say(text: str) -> None:
    """One line to the user; the webhook thread prints too, so lines must not interleave."""
    with _print_lock:
        try:
            print(text, flush=True)
        except BrokenPipeError:
            # The reader went away (`make demo | head`): keep running quietly, stop cleanly.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def pick_ports(preferred: tuple[int, ...]) -> list[int]:
    """The well-known ports where free, else free ones: never collide with another run.

    All sockets stay bound until every port is chosen, so no two choices can coincide.
    """
    held: list[socket.socket] = []
    try:
        for port in preferred:
            held.append(_bind(port))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _bind(preferred: int) -> socket.socket:
    for port in (preferred, 0):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        return sock
    raise OSError("no free loopback port")


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Processes:
    """The demo's children, each in its own session so one signal reaches its whole group."""

    workdir: Path
    children: list[Child] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str]) -> Child:
        log = self.workdir / f"{name}.out"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        child = Child(name, proc, log)
        self.children.append(child)
        say(f"  started {name} (pid {proc.pid})")
        return child

    def stop(self) -> None:
        """Terminate every group, give them a moment, then kill what is left."""
        for child in self.children:
            _signal_group(child.proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in self.children:
            try:
                child.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait()
        self.children.clear()

    def dead(self) -> Child | None:
        return next((c for c in self.children if c.proc.poll() is not None), None)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group already exited
        os.killpg(proc.pid, signum)


def _fetch(url: str, timeout: float = 2.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


class WebhookHandler(BaseHTTPRequestHandler):
    """Alertmanager's webhook receiver: print each notification as the on-call would get it."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()
        try:
            payload = json.loads(body)
        except ValueError:
            return
        for alert in payload.get("alerts", []):
            labels = alert.get("labels", {})
            summary = alert.get("annotations", {}).get("summary", "")
            state = "RESOLVED" if alert.get("status") == "resolved" else "FIRING"
            say(
                f"  NOTIFY  Alertmanager webhook: {state} {labels.get('alertname')} "
                f"({labels.get('severity', '?')}): {summary}"
            )

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request access log; the notification line says it all."""


def alerting_tools() -> tuple[str, str] | None:
    prometheus = shutil.which("prometheus")
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if prometheus and alertmanager:
        return prometheus, alertmanager
    return None


def demo_rules(target: Path) -> None:
    """The project's rules with every ``for``/``keep_firing_for`` shortened to ``DEMO_FOR``."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = DEMO_FOR
    target.write_text(yaml.safe_dump(rules, sort_keys=False))


@dataclass(frozen=True)
class Ports:
    exporter: int
    prometheus: int
    alertmanager: int
    webhook: int

    @classmethod
    def choose(cls) -> Ports:
        return cls(*pick_ports((9477, 9090, 9093, 9099)))


class Demo:
    def __init__(self, workdir: Path, scenario: str) -> None:
        self.workdir = workdir
        self.scenario = SCENARIOS[scenario]
        self.ports = Ports.choose()
        self.processes = Processes(workdir)
        self.webhook: ThreadingHTTPServer | None = None
        self.prometheus_url: str | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.exporter}/metrics"

    def start(self) -> bool:
        """Exporter first (so it reads the new log from its first byte), then the server."""
        log = self.workdir / "sglang-server.log"
        say(f"specwatch demo: scenario '{self.scenario.name}' ({self.scenario.summary})")
        say(f"  simulated SGLang log: {log}")
        exporter = self.processes.spawn("exporter", self._exporter_argv(log))
        up = wait_until(
            lambda: exporter.proc.poll() is not None or _fetch(self.metrics_url) is not None, 20
        )
        if not up or exporter.proc.poll() is not None:
            return False
        say(f"  specwatch /metrics: {self.metrics_url}")
        self._start_alerting()
        self.processes.spawn("simulator", self._simulator_argv(log))
        return True

    def _exporter_argv(self, log: Path) -> list[str]:
        return [
            sys.executable, "-m", "exporter", "run",
            "--log-file", str(log),
            "--target", "demo",
            "--listen", f"127.0.0.1:{self.ports.exporter}",
            "--baseline-curve", self.scenario.baseline_flag(),
            "--expected-accept-length", f"{EXPECTED_ACCEPT_LENGTH:g}",
        ]  # fmt: skip

    def _simulator_argv(self, log: Path) -> list[str]:
        return [
            sys.executable, "-m", "exporter", "simulate",
            "--scenario", self.scenario.name, "--real-time", "--out", str(log),
        ]  # fmt: skip

    def _start_alerting(self) -> None:
        tools = alerting_tools()
        if tools is None:
            say(
                "  Prometheus/Alertmanager not installed: alerts are skipped "
                "(make system-deps installs them); metrics and findings still show."
            )
            return
        if not RULES.exists():
            say(f"  alert rules not found next to the package ({RULES.name}): alerts skipped")
            return
        self._start_webhook()
        prometheus, alertmanager = tools
        self.processes.spawn("alertmanager", self._alertmanager_argv(alertmanager))
        self.processes.spawn("prometheus", self._prometheus_argv(prometheus))
        self.prometheus_url = f"http://127.0.0.1:{self.ports.prometheus}"
        say(f"  Prometheus: {self.prometheus_url}/alerts (rules' for: shortened to {DEMO_FOR})")
        say(f"  Alertmanager: http://127.0.0.1:{self.ports.alertmanager}")
        say("  waiting for Prometheus's first scrape of specwatch (about 5 s)...")
        if not wait_until(lambda: prometheus_settled(self.prometheus_url or ""), 20):
            say("  Prometheus has not scraped specwatch yet: alerts may show late")

    def _start_webhook(self) -> None:
        self.webhook = ThreadingHTTPServer(("127.0.0.1", self.ports.webhook), WebhookHandler)
        threading.Thread(target=self.webhook.serve_forever, daemon=True).start()

    def _alertmanager_argv(self, binary: str) -> list[str]:
        config = {
            "route": {
                "receiver": "demo",
                "group_by": ["alertname", "target"],
                "group_wait": "1s",
                "group_interval": "2s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "demo",
                    "webhook_configs": [
                        {"url": f"http://127.0.0.1:{self.ports.webhook}/", "send_resolved": True}
                    ],
                }
            ],
        }
        return [
            binary,
            f"--config.file={self._config_file('alertmanager.yml', config)}",
            f"--storage.path={self.workdir / 'alertmanager-data'}",
            f"--web.listen-address=127.0.0.1:{self.ports.alertmanager}",
            "--cluster.listen-address=",
        ]

    def _prometheus_argv(self, binary: str) -> list[str]:
        rules = self.workdir / "specwatch-rules.yaml"
        demo_rules(rules)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {
                "alertmanagers": [
                    {"static_configs": [{"targets": [f"127.0.0.1:{self.ports.alertmanager}"]}]}
                ]
            },
            "scrape_configs": [
                {
                    "job_name": PROMETHEUS_JOB,
                    "static_configs": [{"targets": [f"127.0.0.1:{self.ports.exporter}"]}],
                }
            ],
        }
        return [
            binary,
            f"--config.file={self._config_file('prometheus.yml', config)}",
            f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{self.ports.prometheus}",
            "--rules.alert.resend-delay=2s",
        ]

    def _config_file(self, name: str, config: dict[str, Any]) -> Path:
        path = self.workdir / name
        path.write_text(yaml.safe_dump(config))
        return path

    def stop(self) -> None:
        self.processes.stop()
        if self.webhook is not None:
            self.webhook.shutdown()
            self.webhook.server_close()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def read_metrics(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str) -> float | None:
    return next((v for (n, _), v in samples.items() if n == name), None)


def findings(samples: Samples) -> set[tuple[str, str]]:
    active = set()
    for (name, labels), sample in samples.items():
        if name == "specwatch_finding" and sample == 1:
            label = dict(labels)
            active.add((label.get("code", "?"), label.get("severity", "?")))
    return active


@dataclass
class Narrator:
    """Turns successive scrapes into the lines a newcomer should read, reporting only changes."""

    started: float = field(default_factory=time.monotonic)
    collapsed: bool = False
    waiting_said: bool = False
    server: tuple[str, str, str] | None = None  # algorithm, draft model, draft tokens
    architecture: str | None = None
    findings: set[tuple[str, str]] = field(default_factory=set)
    alerts: dict[str, str] = field(default_factory=dict)

    def stamp(self) -> str:
        return f"+{time.monotonic() - self.started:4.0f}s"

    def metrics(self, samples: Samples) -> None:
        self._server(samples)  # first: a restart explains the findings that clear with it
        accept = value(samples, "specwatch_accept_length")
        if accept is not None:
            say(f"{self.stamp()}  {status_line(samples, accept)}")
            self._collapse(accept, samples)
        elif not self.waiting_said:
            self.waiting_said = True
            say(f"{self.stamp()}  waiting for the server's first decode window...")
        self._findings(findings(samples))

    def _server(self, samples: Samples) -> None:
        """Announce the speculative setup when it changes (a restart with a new drafter).

        The draft's architecture is logged seconds after the server's arguments, when the
        draft weights are loaded, so it is announced on its own when it comes later.
        """
        info = next((dict(labels) for (name, labels) in samples if name == INFO), None)
        if info is None or not info.get("algorithm"):
            return  # nothing read from the server's startup yet
        setup = (
            info["algorithm"],
            info.get("draft_model") or "unknown",
            info.get("num_draft_tokens") or "?",
        )
        architecture = info.get("draft_architecture") or None
        if setup != self.server:
            started = "restarted:" if self.server is not None else "started:  "
            self.server, self.architecture = setup, architecture
            loaded = f" ({architecture})" if architecture else ""
            say(
                f"{self.stamp()}  SERVER    {started} {setup[0]} with draft {setup[1]}{loaded}, "
                f"{setup[2]} draft tokens"
            )
        elif architecture and architecture != self.architecture:
            self.architecture = architecture
            say(f"{self.stamp()}  SERVER    draft loaded: {architecture}")

    def _collapse(self, accept: float, samples: Samples) -> None:
        speedup = value(samples, "specwatch_speedup_ratio")
        speed = "" if speedup is None else f", {speedup:.2f}x the baseline"
        if accept <= COLLAPSED_AT and not self.collapsed:
            self.collapsed = True
            say(
                f"{self.stamp()}  DETECTED  speculative decoding collapsed: accept length "
                f"{accept:.2f} (no draft token accepted){speed}"
            )
        elif accept > COLLAPSED_AT and self.collapsed:
            self.collapsed = False
            say(f"{self.stamp()}  RECOVERED accept length {accept:.2f}{speed}")

    def _findings(self, active: set[tuple[str, str]]) -> None:
        for code, severity in sorted(active - self.findings):
            say(f"{self.stamp()}  FINDING   {code} ({severity}) is active")
        for code, _ in sorted(self.findings - active):
            say(f"{self.stamp()}  FINDING   {code} cleared")
        self.findings = active

    def prometheus_alerts(self, states: dict[str, str]) -> None:
        for name, state in sorted(states.items()):
            if self.alerts.get(name) != state:
                say(f"{self.stamp()}  ALERT     {name} is {state} in Prometheus")
        for name in sorted(set(self.alerts) - set(states)):
            say(f"{self.stamp()}  ALERT     {name} resolved in Prometheus")
        self.alerts = states


# What the status line shows after the accept length, in order: metric and how to print it.
STATUS_PARTS: tuple[tuple[str, Callable[[float], str]], ...] = (
    ("specwatch_accept_rate", lambda v: f"accept rate {v:.2f}"),
    ("specwatch_speedup_ratio", lambda v: f"speedup {v:.2f}x"),
    ("specwatch_cuda_graph", lambda v: f"cuda graph {'on' if v else 'OFF'}"),
    ("specwatch_gen_throughput_tokens_per_second", lambda v: f"{v:.0f} tok/s"),
    ("specwatch_running_requests", lambda v: f"{v:.0f} running"),
)


def status_line(samples: Samples, accept: float) -> str:
    parts = [f"accept length {accept:.2f}"]
    for name, show in STATUS_PARTS:
        found = value(samples, name)
        if found is not None:
            parts.append(show(found))
    newest = value(samples, "specwatch_last_decode_timestamp_seconds")
    if newest and time.time() - newest > QUIET_SECONDS:
        parts.append(f"no new window for {time.time() - newest:.0f}s")
    return " | ".join(parts)


def alert_states(prometheus_url: str) -> dict[str, str] | None:
    body = _fetch(f"{prometheus_url}/api/v1/alerts")
    if body is None:
        return None
    alerts = json.loads(body).get("data", {}).get("alerts", [])
    return {alert["labels"]["alertname"]: alert["state"] for alert in alerts}


def prometheus_settled(prometheus_url: str) -> bool:
    """Prometheus has scraped the exporter, and no rule still holds the time before that.

    A rule evaluated before the first scrape sees no ``up`` series and puts SpecwatchAbsent
    in pending: a false alarm nobody watching the demo should have to puzzle over.
    """
    query = urllib.parse.quote(f'up{{job="{PROMETHEUS_JOB}"}}')
    body = _fetch(f"{prometheus_url}/api/v1/query?query={query}")
    if body is None:
        return False
    results = json.loads(body).get("data", {}).get("result", [])
    if not any(result["value"][1] == "1" for result in results):
        return False
    states = alert_states(prometheus_url)
    return states is not None and "SpecwatchAbsent" not in states


def watch(demo: Demo, deadline: float | None) -> int:
    """Print what specwatch sees until the deadline; a child that dies ends the demo."""
    if deadline is None:
        say("  Ctrl-C stops the demo and everything it started")
    else:
        say(f"  stopping by itself in {_left(deadline):.0f} s (DEMO_SECONDS); Ctrl-C: sooner")
    narrator = Narrator()
    while deadline is None or time.monotonic() < deadline:
        dead = demo.processes.dead()
        if dead is not None:
            say(f"{dead.name} exited with status {dead.proc.returncode}; its output:")
            say(dead.log.read_text(errors="replace")[-2000:])
            return 1
        text = _fetch(demo.metrics_url)
        if text is not None:
            narrator.metrics(read_metrics(text))
        if demo.prometheus_url:
            states = alert_states(demo.prometheus_url)
            if states is not None:
                narrator.prometheus_alerts(states)
        time.sleep(POLL_SECONDS if deadline is None else min(POLL_SECONDS, _left(deadline)))
    return 0


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _deadline() -> float | None:
    raw = os.environ.get("DEMO_SECONDS")
    if not raw:
        return None
    seconds = float(raw)
    if seconds <= 0:
        raise ValueError(raw)
    return time.monotonic() + seconds


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    try:
        deadline = _deadline()
    except ValueError:
        print("demo: DEMO_SECONDS must be a positive number of seconds", file=sys.stderr)
        return 2
    scenario = os.environ.get("DEMO_SCENARIO", "recovery")
    if scenario not in SCENARIOS:
        print(f"demo: DEMO_SCENARIO must be one of {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    with tempfile.TemporaryDirectory(prefix="specwatch-demo-") as workdir:
        demo = Demo(Path(workdir), scenario)
        try:
            status = watch(demo, deadline) if demo.start() else _failed(demo)
        except KeyboardInterrupt:
            say("interrupted")
            status = 0
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan
            demo.stop()
        say("demo stopped; every process it started has exited")
    return status


def _failed(demo: Demo) -> int:
    say("the exporter did not come up; its output:")
    for child in demo.processes.children:
        say(child.log.read_text(errors="replace")[-2000:])
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
