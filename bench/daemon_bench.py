"""Daemon figures of spec section 13: /metrics latency under 10 scrapers, idle CPU, memory, series.

Runs the real ``specwatch run`` on a live simulated log (``specwatch simulate --real-time``),
then measures from outside the process, as an operator would:

    .venv/bin/python bench/daemon_bench.py [--scrapers 10] [--requests 300] [--idle-seconds 30]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()


def wait_healthy(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fetch(f"http://127.0.0.1:{port}/healthz")
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("daemon did not become healthy")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def memory_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def series_per_target(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            target = sample.labels.get("target")
            if target is not None:
                counts[target] = counts.get(target, 0) + 1
    return counts


def scrape_latencies(port: int, scrapers: int, requests: int) -> list[float]:
    url = f"http://127.0.0.1:{port}/metrics"
    latencies: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        mine = []
        for _ in range(requests):
            start = time.perf_counter()
            fetch(url)
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(scrapers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(latencies)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapers", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300, help="per scraper")
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--scenario", default="undertrained")
    args = parser.parse_args()

    specwatch = [sys.executable, "-m", "exporter"]
    with tempfile.TemporaryDirectory() as tmp:
        log, port = Path(tmp) / "server.log", free_port()
        sim = subprocess.Popen(
            [*specwatch, "simulate", "--scenario", args.scenario, "--out", str(log), "--rate", "5"]
        )
        daemon = subprocess.Popen(
            [
                *specwatch, "run", "--log-file", str(log), "--listen", f"127.0.0.1:{port}",
                "--baseline-curve", "1:90,48:1500,128:2370", "--expected-accept-length", "3.0",
            ]
        )  # fmt: skip
        try:
            wait_healthy(port)
            time.sleep(10)  # startup lines and a few windows
            text = fetch(f"http://127.0.0.1:{port}/metrics").decode()
            series = series_per_target(text)
            lat = scrape_latencies(port, args.scrapers, args.requests)
            sim.send_signal(signal.SIGTERM)
            sim.wait(timeout=10)
            time.sleep(2)
            before, t0 = cpu_seconds(daemon.pid), time.monotonic()
            end = t0 + args.idle_seconds
            while time.monotonic() < end:  # idle, but scraped every 15 s like in production
                fetch(f"http://127.0.0.1:{port}/metrics")
                time.sleep(min(15, max(0, end - time.monotonic())))
            idle = (cpu_seconds(daemon.pid) - before) / (time.monotonic() - t0)
            rss, hwm = memory_kib(daemon.pid, "VmRSS"), memory_kib(daemon.pid, "VmHWM")
        finally:
            for proc in (sim, daemon):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=10)

    print(f"series per target ({args.scenario}): {series}")
    print(
        f"/metrics with {args.scrapers} concurrent scrapers, {len(lat)} requests: "
        f"p50 {percentile(lat, 0.5) * 1000:.2f} ms, p99 {percentile(lat, 0.99) * 1000:.2f} ms, "
        f"mean {statistics.fmean(lat) * 1000:.2f} ms"
    )
    print(f"idle CPU: {idle * 100:.3f}% of one core over {args.idle_seconds:.0f} s")
    print(f"resident memory: {rss / 1024:.1f} MiB now, {hwm / 1024:.1f} MiB peak")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
