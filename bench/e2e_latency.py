"""Latency from a stats line written to the log to its value on ``/metrics``.

Runs the real ``specwatch run`` on an empty log file, then appends decode lines one at a time,
at random gaps (``--gap`` seconds on average), each with its own ``#running-req``. After each
write, ``/metrics`` is polled every ``--poll`` seconds until it exports that value; the delay
is counted up to the response that showed it, so it includes tailing, parsing, rendering and
HTTP, as a scraper would see it.

    .venv/bin/python bench/e2e_latency.py [--lines 300] [--gap 0.1] [--poll 0.002]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from benchlib import daemon, fetch, percentile

LINE = (
    "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: {}, #token: 6460, "
    "token usage: 0.06, accept len: 2.50, accept rate: 0.50, cuda graph: True, "
    "gen throughput (token/s): 900.00, #queue-req: 0\n"
)


def time_to_visible(log: Path, url: str, running: int, poll: float) -> float:
    """Append one decode line; seconds until ``url`` exports its running requests."""
    expected = f'specwatch_running_requests{{target="default"}} {float(running)}\n'.encode()
    with log.open("a", encoding="utf-8") as out:
        out.write(LINE.format(running))
        out.flush()
        written = time.perf_counter()
    deadline = written + 5.0
    while time.perf_counter() < deadline:
        if expected in fetch(url):
            return time.perf_counter() - written
        time.sleep(poll)
    raise SystemExit(f"value {running} did not reach /metrics within 5 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.1, help="mean seconds between lines")
    parser.add_argument("--poll", type=float, default=0.002, help="seconds between scrapes")
    args = parser.parse_args()
    rng = random.Random(7)
    delays = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        log.touch()
        with daemon(log, "--log-level", "warning") as (_, port):
            url = f"http://127.0.0.1:{port}/metrics"
            time.sleep(1.0)  # the tailer has opened the file
            for running in range(1, args.lines + 1):
                time.sleep(rng.expovariate(1 / args.gap))
                delays.append(time_to_visible(log, url, running, args.poll) * 1000)
    print(
        f"line written -> /metrics, {len(delays)} lines, mean gap {args.gap} s: "
        f"p50 {percentile(delays, 0.50):.1f} ms, p99 {percentile(delays, 0.99):.1f} ms, "
        f"max {max(delays):.1f} ms"
    )


if __name__ == "__main__":
    main()
