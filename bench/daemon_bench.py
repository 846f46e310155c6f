"""The daemon's own costs: /metrics latency under 10 scrapers, idle CPU, memory, series.

Runs the real ``specwatch run`` on a live simulated log (``specwatch simulate``), then measures
from outside the process, as an operator would. Each scraper is a process of its own (as each
Prometheus server is) that requests ``/metrics`` back to back on a new connection each time.

    .venv/bin/python bench/daemon_bench.py [--scrapers 10] [--requests 300] [--idle-seconds 30]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import statistics
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from benchlib import cpu_seconds, daemon, fetch, memory_kib, percentile, running
from prometheus_client.parser import text_string_to_metric_families


def series_per_target(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            target = sample.labels.get("target")
            if target is not None:
                counts[target] = counts.get(target, 0) + 1
    return counts


def scraper(port: int, requests: int, go: Event, out: multiprocessing.Queue[list[float]]) -> None:
    """One scraper process: ``requests`` scrapes back to back, each timed to its last byte."""
    go.wait()
    latencies = []
    for _ in range(requests):
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        conn.getresponse().read()
        conn.close()
        latencies.append(time.perf_counter() - start)
    out.put(latencies)


def scrape_latencies(port: int, scrapers: int, requests: int) -> list[float]:
    go = multiprocessing.Event()
    out: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=scraper, args=(port, requests, go, out))
        for _ in range(scrapers)
    ]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # every scraper is up before the first request
    go.set()
    latencies = [value for _ in procs for value in out.get()]
    for proc in procs:
        proc.join()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapers", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300, help="per scraper")
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--scenario", default="undertrained")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        simulate = ["simulate", "--scenario", args.scenario, "--out", str(log), "--rate", "5"]
        flags = ["--baseline-curve", "1:90,48:1500,128:2370", "--expected-accept-length", "3.0"]
        with running(simulate) as sim, daemon(log, *flags) as (proc, port):
            url = f"http://127.0.0.1:{port}/metrics"
            time.sleep(10)  # startup lines and a few windows
            series = series_per_target(fetch(url).decode())
            lat = scrape_latencies(port, args.scrapers, args.requests)
            sim.terminate()
            sim.wait(timeout=10)
            time.sleep(2)
            before, t0 = cpu_seconds(proc.pid), time.monotonic()
            end = t0 + args.idle_seconds
            while time.monotonic() < end:  # idle, but scraped every 15 s like in production
                fetch(url)
                time.sleep(min(15, max(0, end - time.monotonic())))
            idle = (cpu_seconds(proc.pid) - before) / (time.monotonic() - t0)
            rss, hwm = memory_kib(proc.pid, "VmRSS"), memory_kib(proc.pid, "VmHWM")

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
