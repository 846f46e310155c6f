"""The demo's stack: exporter, simulator and, when installed, Prometheus with Alertmanager.

Started in the order that keeps the story true (nothing the reader sees happens before the
exporter and Prometheus are watching), stopped together.
"""

from __future__ import annotations

import shutil
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path

from exporter.demo.configs import DEMO_FOR, RULE_FILES, alertmanager_argv, prometheus_argv
from exporter.demo.console import say
from exporter.demo.loopback import Ports, fetch, wait_until
from exporter.demo.processes import Processes
from exporter.demo.prometheus import prometheus_settled
from exporter.demo.webhook import start_webhook, stop_webhook
from exporter.engines import registry
from exporter.simulate import DEFAULT_ENGINE, SCENARIOS


def alerting_tools() -> tuple[str, str] | None:
    """Prometheus and Alertmanager (Debian names the latter prometheus-alertmanager)."""
    prometheus = shutil.which("prometheus")
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if prometheus and alertmanager:
        return prometheus, alertmanager
    return None


class Demo:
    def __init__(self, workdir: Path, scenario: str, engine: str = DEFAULT_ENGINE) -> None:
        self.workdir = workdir
        self.scenario = SCENARIOS[scenario]
        self.engine = engine
        self.ports = Ports.choose()
        self.processes = Processes(workdir)
        self.webhook: ThreadingHTTPServer | None = None
        self.prometheus_url: str | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.exporter}/metrics"

    def start(self) -> bool:
        """Exporter first (so it reads the new log from its first byte), then the server."""
        log = self.workdir / f"{self.engine}-server.log"
        say(f"specwatch demo: scenario '{self.scenario.name}' ({self.scenario.summary})")
        say(f"  simulated {registry.engine(self.engine).title} log: {log}")
        exporter = self.processes.spawn("exporter", self._exporter_argv(log))
        up = wait_until(
            lambda: exporter.proc.poll() is not None or fetch(self.metrics_url) is not None, 20
        )
        if not up or exporter.proc.poll() is not None:
            return False
        say(f"  specwatch /metrics: {self.metrics_url}")
        self._start_alerting()
        self.processes.spawn("simulator", self._simulator_argv(log))
        return True

    def _exporter_argv(self, log: Path) -> list[str]:
        expected = self.scenario.expected_accept_length
        return [
            sys.executable, "-m", "exporter", "run",
            "--log-file", str(log),
            "--target", "demo",
            "--listen", f"127.0.0.1:{self.ports.exporter}",
            "--baseline-curve", self.scenario.baseline_flag(),
            *(("--expected-accept-length", f"{expected:g}") if expected is not None else ()),
        ]  # fmt: skip

    def _simulator_argv(self, log: Path) -> list[str]:
        return [
            sys.executable, "-m", "exporter", "simulate",
            "--scenario", self.scenario.name, "--engine", self.engine,
            "--real-time", "--out", str(log),
        ]  # fmt: skip

    def _start_alerting(self) -> None:
        tools = alerting_tools()
        if tools is None:
            say(
                "  Prometheus/Alertmanager not installed: alerts are skipped "
                "(make system-deps installs them); metrics and findings still show."
            )
            return
        missing = [path.name for path in RULE_FILES if not path.exists()]
        if missing:
            say(f"  alert rules not found next to the package ({missing[0]}): alerts skipped")
            return
        self.webhook = start_webhook(self.ports.webhook)
        prometheus, alertmanager = tools
        self.processes.spawn(
            "alertmanager", alertmanager_argv(alertmanager, self.workdir, self.ports)
        )
        self.processes.spawn("prometheus", prometheus_argv(prometheus, self.workdir, self.ports))
        self.prometheus_url = f"http://127.0.0.1:{self.ports.prometheus}"
        say(f"  Prometheus: {self.prometheus_url}/alerts (rules' for: shortened to {DEMO_FOR})")
        say(f"  Alertmanager: http://127.0.0.1:{self.ports.alertmanager}")
        say("  waiting for Prometheus's first scrape of specwatch (about 5 s)...")
        if not wait_until(lambda: prometheus_settled(self.prometheus_url or ""), 20):
            say("  Prometheus has not scraped specwatch yet: alerts may show late")

    def stop(self) -> None:
        self.processes.stop()
        if self.webhook is not None:
            stop_webhook(self.webhook)
