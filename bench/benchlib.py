"""Helpers the bench scripts share: a real ``specwatch run`` daemon, HTTP, /proc, percentiles.

Everything is measured from outside the daemon process, as an operator would see it.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SPECWATCH = [sys.executable, "-m", "exporter"]
CLK_TCK = os.sysconf("SC_CLK_TCK")

# What Prometheus 3.5 sends with every scrape by default (its scrape protocols, compression
# on): a bench that scrapes as it does pays what a node pays, the gzipping included.
PROMETHEUS_HEADERS = {
    "Accept": (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
        "application/openmetrics-text;version=0.0.1;q=0.5,"
        "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
        "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    ),
    "Accept-Encoding": "gzip",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A loopback HTTP server answering with ``handler`` until the block ends; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        body: bytes = resp.read()
        return body


def scrape(url: str, timeout: float = 10) -> float:
    """Seconds until the last byte of ``url``, asked for as Prometheus asks (the body left
    compressed: decompressing is the scraper's cost)."""
    start = time.perf_counter()
    request = urllib.request.Request(url, headers=PROMETHEUS_HEADERS)
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        resp.read()
    return time.perf_counter() - start


def wait_healthy(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fetch(f"http://127.0.0.1:{port}/healthz")
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("daemon did not become healthy")


@contextmanager
def running(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A ``specwatch`` subcommand running for the block, stopped with SIGTERM afterwards."""
    proc = subprocess.Popen([*SPECWATCH, *args])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)


@contextmanager
def daemon(log: Path | None, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``specwatch run`` on ``log`` (or on what ``flags`` say) with a free loopback port,
    healthy when the block starts."""
    port = free_port()
    logs = [] if log is None else ["--log-file", str(log)]
    args = ["run", *logs, "--listen", f"127.0.0.1:{port}", *flags]
    with running(args) as proc:
        wait_healthy(port, timeout=60)
        yield proc, port


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and of its range helpers: those it has waited for, and
    those still running or not yet reaped (a catch-up can end before its helper is)."""
    return _stat_seconds(pid, 15) + sum(_stat_seconds(child, 13) for child in _children(pid))


def _stat_seconds(pid: int, end: int) -> float:
    """utime + stime (+ cutime + cstime when ``end`` is 15) of ``pid``; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return sum(int(field) for field in fields[11:end]) / CLK_TCK


def children_peak_kib(pid: int) -> int:
    """The largest peak RSS among ``pid``'s running children (0 when it has none)."""
    peaks = [0]
    for child in _children(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, KeyError):  # it exited
            peaks.append(memory_kib(child, "VmHWM"))
    return max(peaks)


def _children(pid: int) -> list[int]:
    """``pid``'s children, whichever of its threads started them."""
    listed: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # the thread ended
            listed += map(int, task.read_text().split())
    return listed


def memory_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]
