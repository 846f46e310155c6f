"""The demo's stack: exporter, simulator and, when installed, Prometheus with Alertmanager.

Started in the order that keeps the story true (nothing the reader sees happens before the
exporter and Prometheus are watching), stopped together.
"""

from __future__ import annotations

import functools
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace
from http.server import ThreadingHTTPServer
from pathlib import Path

from exporter.demo.configs import DEMO_FOR, RULE_FILES, alertmanager_argv, prometheus_argv
from exporter.demo.console import say
from exporter.demo.loopback import (
    EXPORTER_LISTENING,
    PREFERRED,
    TOOL_LISTENING,
    Ports,
    bound,
    fetch,
    wait_until,
)
from exporter.demo.processes import Processes
from exporter.demo.prometheus import prometheus_settled
from exporter.demo.webhook import start_webhook, stop_webhook
from exporter.engines import registry
from exporter.simulate import DEFAULT_ENGINE, SCENARIOS

START_SECONDS = 20  # for a service to say it listens, or to answer


def alerting_tools() -> tuple[str, str] | None:
    """Prometheus and Alertmanager (Debian names the latter prometheus-alertmanager)."""
    prometheus = shutil.which("prometheus")
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if prometheus and alertmanager:
        return prometheus, alertmanager
    return None


class Demo:
    def __init__(
        self,
        workdir: Path,
        scenario: str,
        engine: str = DEFAULT_ENGINE,
        preferred: Ports = PREFERRED,
    ) -> None:
        self.workdir = workdir
        self.scenario = SCENARIOS[scenario]
        self.engine = engine
        # The ports each service got, filled in as it starts: its preferred one where free.
        self.ports = preferred
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
        if not self.start_exporter(log):
            return False
        say(f"  specwatch /metrics: {self.metrics_url}")
        self._start_alerting()
        self.processes.spawn("simulator", self._simulator_argv(log))
        return True

    def start_exporter(self, log: Path) -> bool:
        """The exporter on its port, answering ``/metrics``: False when it did not come up."""
        if not self._serve(
            "exporter", EXPORTER_LISTENING, functools.partial(self._exporter_argv, log)
        ):
            return False
        exporter = self.processes.children[-1]
        up = wait_until(
            lambda: exporter.proc.poll() is not None or fetch(self.metrics_url) is not None,
            START_SECONDS,
        )
        return up and exporter.proc.poll() is None

    def _serve(self, name: str, line: re.Pattern[str], argv: Callable[[int], list[str]]) -> bool:
        """Start the service ``name`` (``argv`` for a port) on its port of ``ports``, else on
        one the kernel picks, and keep the port it says it listens on (``line``, read from its
        output); False where it did not come up. A try that did not is dropped."""

        def start(port: int) -> int | None:
            child = self.processes.spawn(name, argv(port))
            listening = child.listening(line, START_SECONDS)
            if listening is None:
                self.processes.drop(child)
                if port:
                    say(f"  {name}: port {port} taken, trying one the system picks")
            return listening

        port = bound(start, getattr(self.ports, name))
        if port is not None:
            self.ports = replace(self.ports, **{name: port})
        return port is not None

    def _exporter_argv(self, log: Path, port: int) -> list[str]:
        expected = self.scenario.expected_accept_length
        return [
            sys.executable, "-m", "exporter", "run",
            "--log-file", str(log),
            "--target", "demo",
            "--listen", f"127.0.0.1:{port}",
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
        if not self._start_receivers(*tools):
            say("  Prometheus or Alertmanager did not come up: alerts are skipped")
            return
        self.prometheus_url = f"http://127.0.0.1:{self.ports.prometheus}"
        say(f"  Prometheus: {self.prometheus_url}/alerts (rules' for: shortened to {DEMO_FOR})")
        say(f"  Alertmanager: http://127.0.0.1:{self.ports.alertmanager}")
        say("  waiting for Prometheus's first scrape of specwatch (about 5 s)...")
        if not wait_until(lambda: prometheus_settled(self.prometheus_url or ""), 20):
            say("  Prometheus has not scraped specwatch yet: alerts may show late")

    def _start_receivers(self, prometheus: str, alertmanager: str) -> bool:
        """The webhook, Alertmanager delivering to it, then Prometheus alerting to that, each
        on the port it got; False where one did not come up."""
        webhook = bound(self._webhook_on, self.ports.webhook)
        if webhook is None:
            return False
        self.ports = replace(self.ports, webhook=webhook)
        return self._serve(
            "alertmanager",
            TOOL_LISTENING,
            lambda port: alertmanager_argv(alertmanager, self.workdir, webhook, port),
        ) and self._serve(
            "prometheus",
            TOOL_LISTENING,
            lambda port: prometheus_argv(
                prometheus, self.workdir, replace(self.ports, prometheus=port)
            ),
        )

    def _webhook_on(self, port: int) -> int | None:
        self.webhook = start_webhook(port)
        return None if self.webhook is None else self.webhook.server_port

    def stop(self) -> None:
        self.processes.stop()
        if self.webhook is not None:
            stop_webhook(self.webhook)
