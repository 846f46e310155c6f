"""What hostile clients and a hung upstream cost the daemon: `/metrics` latency while each
attack runs, and the CPU that password guessers take.

The tests show that a scrape is answered during each attack and that no attack holds a
thread (``tests/test_web_attacks.py``, ``tests/test_upstream_daemon.py``); how fast, and at
what CPU, is measured here, where a loaded machine shows in the figures instead of failing a
test.

    .venv/bin/python bench/attack_bench.py [--scrapes 20]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import socket
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import bcrypt
from benchlib import cpu_seconds, daemon, percentile, serving

SCRAPE_TIMEOUT = 10.0  # Prometheus's default scrape_timeout


def timed_get(url: str, headers: dict[str, str] | None = None) -> float:
    """Seconds until the whole answer of a GET that must succeed."""
    started = time.perf_counter()
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT) as resp:
        resp.read()
    return time.perf_counter() - started


def latencies(url: str, count: int, headers: dict[str, str] | None = None) -> str:
    taken = [timed_get(url, headers) for _ in range(count)]
    return f"p50 {percentile(taken, 0.5) * 1000:.1f} ms, max {max(taken) * 1000:.1f} ms"


@contextlib.contextmanager
def connections(port: int, count: int, send: bytes = b"") -> Iterator[None]:
    """``count`` connections, each sending ``send`` (a head that never ends) or nothing."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
    try:
        for sock in socks:
            if send:
                sock.send(send)
        yield
    finally:
        for sock in socks:
            sock.close()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def guessers_cpu(url: str, pid: int, seconds: float, scrapes: int) -> tuple[float, str]:
    """The daemon's CPU, in cores, while 8 clients guess passwords for ``seconds``; and the
    latency of the right password's scrapes meanwhile."""
    stop = threading.Event()

    def guess(worker: int) -> None:
        for i in range(100_000):
            if stop.is_set():
                return
            with contextlib.suppress(OSError):  # 401, or a guess that waited past our timeout
                timed_get(url, basic("prometheus", f"w{worker}-{i}"))

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(8)]
    before, started = cpu_seconds(pid), time.monotonic()
    for thread in threads:
        thread.start()
    try:
        time.sleep(seconds / 2)
        answered = latencies(url, scrapes, basic("prometheus", "s3cret"))
        time.sleep(seconds / 2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=SCRAPE_TIMEOUT)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started), answered


@contextlib.contextmanager
def hung_upstream() -> Iterator[str]:
    """A server whose /metrics never answers until the block ends."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            release.wait()

    with serving(Handler) as url:
        try:
            yield url
        finally:
            release.set()  # a handler still waiting lets the server shut down


def measure(name: str, run: Callable[[], str]) -> None:
    print(f"{name}: {run()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=20, help="timed scrapes per attack")
    parser.add_argument("--guess-seconds", type=float, default=4.0)
    args = parser.parse_args()
    n = args.scrapes

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        log.touch()
        with daemon(log) as (_, port):
            url = f"http://127.0.0.1:{port}/metrics"
            measure("/metrics, quiet", lambda: latencies(url, n))
            with connections(port, 1000):
                measure("/metrics beside 1000 idle connections", lambda: latencies(url, n))
            with connections(port, 200, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"):
                measure("/metrics beside 200 trickling heads", lambda: latencies(url, n))

        web = Path(tmp) / "web.yml"
        hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
        web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
        with daemon(log, "--web-config", str(web)) as (proc, port):
            url = f"http://127.0.0.1:{port}/metrics"
            timed_get(url, basic("prometheus", "s3cret"))  # the right password, checked once
            cores, answered = guessers_cpu(url, proc.pid, args.guess_seconds, n)
            print(f"8 password guessers: {cores:.2f} cores of CPU; the right password {answered}")

        with hung_upstream() as upstream:
            config = Path(tmp) / "specwatch.yaml"
            config.write_text(
                f"targets:\n  - name: sglang-0\n    metrics_url: {upstream}/metrics\n"
                "    scrape_interval: 10\n"
            )
            with daemon(log, "--config", str(config)) as (_, port):
                url = f"http://127.0.0.1:{port}/metrics"
                measure("/metrics while the upstream hangs", lambda: latencies(url, n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
