"""The daemon's own costs: /metrics latency under 10 scrapers, idle CPU, memory, series.

Runs the real ``specwatch run`` on a live simulated log (``specwatch simulate``), then measures
from outside the process, as an operator would. Each scraper is a process of its own (as each
Prometheus server is) that requests ``/metrics`` (or ``/``) back to back on a new connection
each time, ``/metrics`` with the headers Prometheus sends (gzip, OpenMetrics first).

With ``--targets N``, a node of N servers instead (``fleet.py``): N live logs, one decode line
a second each, and with ``--upstream`` each server's ``/metrics`` and ``/server_info`` on
loopback. It then times one scraper alone (the CPU each scrape costs the daemon, beyond what
it spends meanwhile without scrapes), scrapes 2 s apart (every target changed since the one
before, as between two scrapes of a Prometheus; the daemon foresees them and prepares each,
whose CPU counts with the scrape's), 10 scrapers at once, and one scraper beside
10 clients polling the landing page ``/``.

    .venv/bin/python bench/daemon_bench.py [--scrapers 10] [--requests 300] [--idle-seconds 30]
    .venv/bin/python bench/daemon_bench.py --targets 256 --upstream [--requests 40]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import math
import multiprocessing
import statistics
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path

from benchlib import (
    PROMETHEUS_HEADERS,
    cpu_seconds,
    daemon,
    fetch,
    memory_kib,
    percentile,
    running,
)
from fleet import Writers, upstreams
from fleet import config as fleet_config
from prometheus_client.parser import text_string_to_metric_families


def series_per_target(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            target = sample.labels.get("target")
            if target is not None:
                counts[target] = counts.get(target, 0) + 1
    return counts


def get(port: int, path: str) -> bytes:
    """The body of a GET of ``path`` on a new connection, ``/metrics`` asked for as Prometheus
    asks (gzipped)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers=PROMETHEUS_HEADERS if path == "/metrics" else {})
    body = conn.getresponse().read()
    conn.close()
    return body


def timed_get(port: int, path: str) -> float:
    """Seconds until the last byte of a GET of ``path`` on a new connection; infinite for a
    request refused, dropped or not answered in 30 s."""
    start = time.perf_counter()
    try:
        get(port, path)
    except (OSError, http.client.HTTPException):
        return math.inf
    return time.perf_counter() - start


def scraper(
    port: int, requests: int, go: Event, out: multiprocessing.Queue[list[float]], path: str
) -> None:
    """One scraper process: ``requests`` GETs of ``path`` back to back, or until the others
    are done when ``requests`` is 0."""
    go.wait()
    latencies: list[float] = []
    while requests == 0 or len(latencies) < requests:
        latencies.append(timed_get(port, path))
        if requests == 0 and not go.is_set():
            break
    out.put(latencies)


def scrape_latencies(
    port: int, scrapers: int, requests: int, path: str = "/metrics"
) -> list[float]:
    go = multiprocessing.Event()
    out: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=scraper, args=(port, requests, go, out, path))
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


def beside_pollers(port: int, pollers: int, requests: int) -> tuple[list[float], int]:
    """``requests`` scrapes one after another while ``pollers`` clients poll ``/`` back to
    back; and how many pages they got meanwhile."""
    go = multiprocessing.Event()
    out: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=scraper, args=(port, 0, go, out, "/"))
        for _ in range(pollers)
    ]
    for proc in procs:
        proc.start()
    time.sleep(0.5)
    go.set()
    time.sleep(1)  # the pollers are at it
    lat = [timed_get(port, "/metrics") for _ in range(requests)]
    go.clear()
    pages = sum(1 for _ in procs for value in out.get() if value != math.inf)
    for proc in procs:
        proc.join()
    return lat, pages


def pollers_in_turn(port: int, pollers: int, requests: int) -> int:
    """Scrapes alone and beside ``pollers`` clients polling ``/``, in turns of 10 so that the
    machine's load drifts alike under both."""
    alone: list[float] = []
    beside: list[float] = []
    pages = 0
    for _ in range(max(1, requests // 10)):
        alone += [timed_get(port, "/metrics") for _ in range(10)]
        lat, served = beside_pollers(port, pollers, 10)
        beside += lat
        pages += served
    print(f"load average {loadavg()}")
    print(f"/metrics alone, {len(alone)} scrapes: {summary(alone)}")
    print(f"/metrics beside {pollers} clients polling /: {summary(beside)}; {pages} pages")
    return 0


def summary(lat: list[float]) -> str:
    """Percentiles; a request never answered counts as infinitely slow, and is counted."""
    failed = sum(1 for value in lat if value == math.inf)
    return (
        f"p50 {percentile(lat, 0.5) * 1000:.1f} ms, p99 {percentile(lat, 0.99) * 1000:.1f} ms, "
        f"max {max(lat) * 1000:.1f} ms" + (f", {failed} not answered" if failed else "")
    )


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


PREPARED_WITHIN = 0.3  # seconds before a foreseen scrape that cover its preparation


def fleet(args: argparse.Namespace) -> int:
    """A node of ``args.targets`` servers: scrape latency and CPU alone, among 10 scrapers
    and beside 10 clients polling ``/``."""
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(upstreams()) if args.upstream else None
        config = fleet_config(folder, args.targets, url)
        stack.enter_context(Writers(folder, args.targets))
        proc, port = stack.enter_context(
            daemon(None, "--config", str(config), "--log-level", "warning")
        )
        time.sleep(args.warm_seconds)  # every log read, every upstream scraped
        if args.pollers_only:
            return pollers_in_turn(port, args.scrapers, args.requests)
        body = fetch(f"http://127.0.0.1:{port}/metrics")  # plain text, to count its series
        print(f"load average {loadavg()}; {args.targets} targets, upstream {bool(url)}")
        print(
            f"one scrape: {len(body) / 1024:.0f} KiB, "
            f"{len(series_per_target(body.decode()))} targets"
        )
        before, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.quiet_seconds)  # what the daemon spends without scrapes
        quiet = (cpu_seconds(proc.pid) - before) / (time.monotonic() - t0)
        before, t0 = cpu_seconds(proc.pid), time.monotonic()
        alone = [timed_get(port, "/metrics") for _ in range(args.requests)]
        spent = cpu_seconds(proc.pid) - before - quiet * (time.monotonic() - t0)
        print(f"/metrics, one scraper, {len(alone)} scrapes: {summary(alone)}")
        print(
            f"  CPU per scrape {spent / len(alone) * 1000:.1f} ms "
            f"(without scrapes: {quiet * 100:.1f}% of a core)"
        )
        # Every log has written since the scrape before. At a steady 2 s the daemon foresees
        # each scrape from the third on and prepares it just before: the CPU of the last
        # PREPARED_WITHIN seconds before a scrape counts with the scrape's.
        spaced, spent = [], 0.0
        for _ in range(args.spaced):
            time.sleep(2 - PREPARED_WITHIN)
            before, t0 = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(PREPARED_WITHIN)
            spaced.append(timed_get(port, "/metrics"))
            spent += cpu_seconds(proc.pid) - before - quiet * (time.monotonic() - t0)
        print(
            f"/metrics 2 s apart (every target changed), {len(spaced)} scrapes: "
            f"{summary(spaced)}; CPU per scrape, its preparation included, "
            f"{spent / len(spaced) * 1000:.0f} ms"
        )
        crowd = scrape_latencies(port, args.scrapers, max(1, args.requests // args.scrapers))
        print(f"/metrics, {args.scrapers} scrapers at once, {len(crowd)} scrapes: {summary(crowd)}")
        lat, pages = beside_pollers(port, args.scrapers, args.requests)
        print(
            f"/metrics beside {args.scrapers} clients polling /, {len(lat)} scrapes: "
            f"{summary(lat)}; {pages} pages served meanwhile"
        )
        print(f"load average {loadavg()}; resident {memory_kib(proc.pid, 'VmRSS') / 1024:.1f} MiB")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapers", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300, help="per scraper")
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--scenario", default="undertrained")
    parser.add_argument("--targets", type=int, default=0, help="a node of this many servers")
    parser.add_argument("--upstream", action="store_true", help="each with its /metrics")
    parser.add_argument("--warm-seconds", type=float, default=20)
    parser.add_argument("--quiet-seconds", type=float, default=10)
    parser.add_argument("--spaced", type=int, default=10, help="scrapes 2 s apart")
    parser.add_argument("--pollers-only", action="store_true", help="alone and beside / only")
    args = parser.parse_args()
    if args.targets:
        return fleet(args)

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
