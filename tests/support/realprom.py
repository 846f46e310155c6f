"""A real Prometheus, Alertmanager and webhook receiver on loopback, for tests.

Alert rules and dashboard queries are only proven by the server that evaluates them: promtool
unit tests cover the PromQL, but not scraping, staleness handling, rule groups running on their
own clock, or notification routing. Each context manager here starts the pinned binary
(``tools.TOOLS_BIN``: Prometheus 3.5 LTS, a current Alertmanager) with a generated config in
its own directory under ``tmp_path`` (so one test may run several) on a free loopback port,
waits until it is ready, and stops it (and only it) on exit; a missing binary skips the test,
or fails it under ``CI=true``.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.support.metrics import Scrape
from tests.support.tools import free_port, require_tool
from tests.support.waiting import wait_for

T = TypeVar("T")

# Deadlines that bound a wait, not budgets: on a machine at load 40 (20 runnable tasks a core)
# a Prometheus took over 30 s to be ready and over 5 s to answer a scrape of its own metrics.
STARTUP_TIMEOUT = 60.0
REQUEST_TIMEOUT = 15.0


def http_json(url: str, body: Any = None, timeout: float = REQUEST_TIMEOUT) -> Any:
    """GET (or POST ``body`` as JSON to) ``url`` and decode the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class _Process:
    """A server binary whose output goes to a log file that is quoted when it fails to start."""

    def __init__(self, argv: Sequence[str], log_path: Path, ready_url: str) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: self.proc.poll() is not None or _ready(ready_url), STARTUP_TIMEOUT)
        except AssertionError:
            self.stop()
            raise
        if self.proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RunningPrometheus:
    """The HTTP API of a running Prometheus, reduced to what tests assert on."""

    def __init__(self, url: str, process: _Process) -> None:
        self.url = url
        self._process = process

    def _api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        answer = http_json(f"{self.url}/api/v1/{path}{query}")
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query now: the ``result`` list (``metric`` labels and ``value`` pairs)."""
        result: list[dict[str, Any]] = self._api("query", query=expr)["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts, each with ``labels``, ``annotations`` and ``state``."""
        alerts: list[dict[str, Any]] = self._api("alerts")["alerts"]
        return alerts

    def targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self._api("targets")["activeTargets"]
        return targets

    def rule_evaluations(self) -> int:
        """Evaluations so far of the rule group evaluated least often (Prometheus' own count)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=REQUEST_TIMEOUT) as response:
            own = Scrape(response.read().decode())
        counts = own.values("prometheus_rule_group_iterations_total")
        assert counts, "Prometheus evaluates no rule group"
        return int(min(counts))

    def wait_for(self, predicate: Callable[[], T | None], timeout: float) -> T:
        """Poll ``predicate`` until truthy; the failure quotes Prometheus' own log."""
        try:
            return wait_for(predicate, timeout, interval=0.25)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nprometheus log:\n{self._process.log_tail()}") from None


def prometheus_config(
    scrape_targets: Sequence[str],
    rule_files: Sequence[Path],
    alertmanager_url: str | None,
    job: str,
    interval: str,
) -> dict[str, Any]:
    """A Prometheus config scraping ``scrape_targets`` as ``job`` with short intervals."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "scrape_timeout": interval,
                "static_configs": [{"targets": list(scrape_targets)}],
            }
        ],
    }
    if alertmanager_url is not None:
        host = urllib.parse.urlsplit(alertmanager_url).netloc
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
    return config


@contextmanager
def running_prometheus(
    tmp_path: Path,
    scrape_targets: Sequence[str],
    rule_files: Sequence[Path] = (),
    alertmanager_url: str | None = None,
    job: str = "specwatch",
    interval: str = "1s",
    flags: Sequence[str] = (),
    binary: str | None = None,
    settings: dict[str, Any] | None = None,
) -> Iterator[RunningPrometheus]:
    """Prometheus scraping ``host:port`` targets, evaluating ``rule_files`` every ``interval``;
    ``flags`` are added to its command line, ``settings`` to its scrape job; ``binary`` is
    another Prometheus than the pinned one (the floor's)."""
    config = prometheus_config(scrape_targets, rule_files, alertmanager_url, job, interval)
    config["scrape_configs"][0].update(settings or {})
    # Resend firing alerts quickly so a short test sees Alertmanager updates.
    extra = ["--rules.alert.resend-delay=1s", *flags]
    path = binary or require_tool("prometheus")
    with _server(tmp_path, path, config, "--storage.tsdb.path", extra) as (url, process):
        yield RunningPrometheus(url, process)


@contextmanager
def running_agent(
    tmp_path: Path,
    scrape_targets: Sequence[str],
    remote_write_url: str,
    external_labels: dict[str, str],
    job: str = "specwatch",
    interval: str = "1s",
) -> Iterator[RunningPrometheus]:
    """Prometheus in agent mode: scrapes ``scrape_targets`` and forwards every sample to
    ``remote_write_url`` with ``external_labels``, in batches sent at least every second."""
    config = prometheus_config(scrape_targets, (), None, job, interval)
    del config["rule_files"]  # an agent evaluates no rules
    config["global"]["external_labels"] = external_labels
    queue = {"batch_send_deadline": "1s", "min_backoff": "100ms", "max_backoff": "1s"}
    config["remote_write"] = [{"url": remote_write_url, "queue_config": queue}]
    # Prometheus 3 took agent mode out of the feature flags: `--enable-feature=agent` is refused.
    path = require_tool("prometheus")
    with _server(tmp_path, path, config, "--storage.agent.path", ["--agent"]) as served:
        yield RunningPrometheus(*served)


@contextmanager
def _server(
    tmp_path: Path, binary: str, config: dict[str, Any], storage_flag: str, extra: Sequence[str]
) -> Iterator[tuple[str, _Process]]:
    """The program at ``binary`` with ``config``, its data and log in a fresh directory, on a
    free port.

    Prometheus and Alertmanager share their flag names for the config file and the listen
    address, and are ready when ``/-/ready`` answers.
    """
    name = Path(binary).name
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp_path))
    config_path = home / "config.yml"
    config_path.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{free_port()}"
    argv = [
        binary,
        f"--config.file={config_path}",
        f"{storage_flag}={home / 'data'}",
        f"--web.listen-address={urllib.parse.urlsplit(url).netloc}",
        *extra,
    ]
    process = _Process(argv, home / f"{name}.log", f"{url}/-/ready")
    try:
        yield url, process
    finally:
        process.stop()


def seconds_since(timestamp: str) -> float:
    """Seconds from an RFC 3339 time as the Prometheus and Alertmanager APIs give it to now."""
    whole = re.sub(r"\.\d+", "", timestamp).replace("Z", "+00:00")
    return time.time() - datetime.fromisoformat(whole).timestamp()


class RunningAlertmanager:
    """The v2 API of a running Alertmanager."""

    def __init__(self, url: str) -> None:
        self.url = url

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """Alerts it holds; ``status.inhibitedBy`` lists what silences each one."""
        query = f"?{urllib.parse.urlencode(filters)}" if filters else ""
        alerts: list[dict[str, Any]] = http_json(f"{self.url}/api/v2/alerts{query}")
        return alerts

    def post_alerts(self, alerts: Sequence[dict[str, Any]]) -> None:
        """Send alerts the way Prometheus does (``labels``, ``annotations``, optional times)."""
        http_json(f"{self.url}/api/v2/alerts", body=list(alerts))


@contextmanager
def running_alertmanager(tmp_path: Path, config: dict[str, Any]) -> Iterator[RunningAlertmanager]:
    """Alertmanager with ``config``, clustering off, on a free loopback port."""
    extra = ["--cluster.listen-address="]
    path = require_tool("prometheus-alertmanager")
    with _server(tmp_path, path, config, "--storage.path", extra) as served:
        yield RunningAlertmanager(served[0])


class WebhookReceiver:
    """Collects Alertmanager webhook notifications (the JSON payload, one dict per POST)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._notifications: list[dict[str, Any]] = []

    def record(self, notification: dict[str, Any]) -> None:
        with self._lock:
            self._notifications.append(notification)

    @property
    def notifications(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._notifications)

    def alerts(self, status: str = "firing") -> list[dict[str, Any]]:
        """Every notified alert with ``status``, tagged with the receiver that got it."""
        return [
            {**alert, "receiver": note["receiver"]}
            for note in self.notifications
            for alert in note["alerts"]
            if alert["status"] == status
        ]


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """An HTTP server thread on loopback that stores every JSON body POSTed to it."""
    server = _WebhookServer(("127.0.0.1", 0), _WebhookHandler)
    receiver = WebhookReceiver(f"http://127.0.0.1:{server.server_address[1]}/")
    server.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _WebhookServer(ThreadingHTTPServer):
    """The loopback server, holding the receiver its handler threads record into."""

    receiver: WebhookReceiver


class _WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        assert isinstance(self.server, _WebhookServer)
        self.server.receiver.record(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; failures assert on what was received instead."""
