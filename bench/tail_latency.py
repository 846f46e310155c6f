"""Latency of the file tailer: a line written to the log -> that line handed to the consumer.

Writes ``--lines`` log lines at ``--rate`` lines/s (with jitter, one write per line, as a
logging process does) into a temporary log file that a running ``FileTailer`` follows with
the daemon's defaults (0.25 s poll, a tail loop with directory notifications). The consumer
stamps each line when it arrives; the report gives p50/p99/max of the delay.
``--no-notify`` measures pure polling (notifications unavailable). Afterwards the tailer
idles for ``--idle-seconds`` and the CPU time it used meanwhile is reported as a share of one core.

    .venv/bin/python bench/tail_latency.py [--lines 600] [--rate 40] [--no-notify]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

from benchlib import percentile

from exporter.sources.tail import (
    FileTailer,
    ReadErrorReason,
    SkipReason,
    TailEvents,
    TailLoop,
)


class StampingSink(TailEvents):
    """Records when each numbered line arrived; ignores every other event."""

    def __init__(self) -> None:
        self.arrived: dict[int, float] = {}
        self.bootstrapped = threading.Event()

    def on_lines(self, lines: list[bytes]) -> None:
        now = time.perf_counter()
        for line in lines:
            self.arrived[int(line.split(b" ", 1)[0])] = now

    def on_bootstrap(self, lines: list[bytes], mtime: float) -> None:
        self.bootstrapped.set()

    def on_new_file(self) -> None: ...
    def on_rotation(self) -> None: ...
    def on_truncation(self) -> None: ...
    def on_skipped(self, reason: SkipReason) -> None: ...
    def on_read_error(self, reason: ReadErrorReason) -> None: ...


def write_lines(path: Path, count: int, rate: float, rng: random.Random) -> dict[int, float]:
    """Append ``count`` lines at about ``rate`` per second; returns when each was written."""
    written: dict[int, float] = {}
    with open(path, "ab", buffering=0) as log:
        for seq in range(count):
            time.sleep(rng.expovariate(rate))
            line = f"{seq} [2026-02-23 10:00:00 DP0 TP0] Decode batch, #running-req: 12\n"
            written[seq] = time.perf_counter()
            log.write(line.encode())
    return written


def measure(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    loop = TailLoop(notify=not args.no_notify)
    loop.start()
    sink = StampingSink()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "server.log"
        path.touch()
        tailer = FileTailer(str(path), sink, loop=loop)
        tailer.start()
        sink.bootstrapped.wait(5.0)
        written = write_lines(path, args.lines, args.rate, rng)
        deadline = time.monotonic() + 5.0
        while len(sink.arrived) < args.lines and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)  # let the poll interval settle to its idle value
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        time.sleep(args.idle_seconds)
        idle_cpu = (time.process_time() - cpu_before) / (time.perf_counter() - wall_before)
        tailer.stop()
    loop.stop()
    delays_ms = [(sink.arrived[s] - written[s]) * 1000 for s in written if s in sink.arrived]
    mode = "polling only" if args.no_notify else "polling + directory notifications"
    print(f"mode: {mode}; lines: {args.lines} at {args.rate}/s; delivered: {len(delays_ms)}")
    print(
        f"latency ms: p50 {percentile(delays_ms, 0.50):.1f}  p99 {percentile(delays_ms, 0.99):.1f}"
        f"  max {max(delays_ms):.1f}"
    )
    print(f"idle CPU over {args.idle_seconds:.0f} s: {idle_cpu * 100:.2f}% of one core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=600)
    parser.add_argument("--rate", type=float, default=40.0, help="lines per second")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--no-notify", action="store_true", help="pure polling")
    measure(parser.parse_args())


if __name__ == "__main__":
    main()
