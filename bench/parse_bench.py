"""Parse throughput of the log pipeline on a realistic mixed SGLang log.

Writes a log of ``--lines`` lines (half decode stats lines, the rest prefill, access, request
and warning lines, as a busy EAGLE-3 server with metrics scraping writes them) to a temporary
directory, reads it back in 1 MiB chunks as the tailer does, and times only
``LineProcessor.process`` with a sink that just counts. Prints lines/s.

    .venv/bin/python bench/parse_bench.py [--lines 1000000] [--per-second 50] [--repeat 3]
                                          [--profile]

``--per-second`` is how many lines share one logged second. Lines of the same second and rank
share their prefix text, which the parser caches, so a sparser log costs more per line.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from exporter.engines.record import LogLine, RequestRecord, StatsRecord
from exporter.parse.pipeline import LineProcessor
from exporter.parse.reader import DEFAULT_MAX_LINE_BYTES
from exporter.sources.tail.lines import CHUNK_BYTES, LineSplitter


class CountingSink:
    """The cheapest possible consumer, so the figure is the pipeline's own cost."""

    def __init__(self) -> None:
        self.lines = self.records = self.unrecognized = self.skipped = self.events = 0
        self.requests = 0

    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self.records += 1

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self.records += len(records)

    def on_unrecognized(self, reason: str) -> None:
        self.unrecognized += 1

    def on_skipped(self, reason: str) -> None:
        self.skipped += 1

    def on_fallback(self, reason: str) -> None:
        pass

    def on_event(self, line: LogLine) -> None:
        self.events += 1

    def on_request(self, record: RequestRecord) -> None:
        self.requests += 1


def _stamp(second: int) -> str:
    return f"2026-02-23 {second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}"


def _decode(rng: random.Random, ts: str) -> str:
    running = rng.randint(1, 48)
    return (
        f"[{ts} TP0] Decode batch, #running-req: {running}, #token: {rng.randint(1000, 90000)}, "
        f"token usage: {rng.random():.2f}, accept len: {rng.uniform(1, 4):.2f}, "
        f"accept rate: {rng.random():.2f}, cuda graph: {rng.random() < 0.9}, "
        f"gen throughput (token/s): {rng.uniform(50, 2500):.2f}, #queue-req: {rng.randint(0, 40)}"
    )


def _other(rng: random.Random, ts: str) -> str:
    pick = rng.random()
    if pick < 0.35:
        return (
            f"[{ts} TP0] Prefill batch, #new-seq: 1, #new-token: {rng.randint(1, 8192)}, "
            f"#cached-token: {rng.randint(0, 4096)}, token usage: {rng.random():.2f}, "
            f"#running-req: {rng.randint(0, 48)}, #queue-req: {rng.randint(0, 40)}, "
            f"input throughput (token/s): {rng.uniform(10, 20000):.2f}, cuda graph: False"
        )
    if pick < 0.85:
        path = rng.choice(["/metrics", "/v1/chat/completions", "/health", "/server_info"])
        verb = "GET" if path != "/v1/chat/completions" else "POST"
        client = f"10.0.0.{rng.randint(2, 250)}:{rng.randint(30000, 60000)}"
        return f'[{ts}] INFO:     {client} - "{verb} {path} HTTP/1.1" 200 OK'
    if pick < 0.95:
        return (
            f"[{ts}] Finish: obj=GenerateReqInput(rid='{rng.getrandbits(64):016x}', "
            f"text='Summarise: Decode batch, accept len: 9.99 ...'), out={{'meta_info': "
            f"{{'spec_verify_ct': {rng.randint(1, 500)}}}}}"
        )
    return (
        f"[{ts} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        f"#new_tokens_gained: {rng.randint(100, 5000)}, #new_token_ratio: 0.4000 -> 0.6500"
    )


def write_log(path: Path, lines: int, per_second: int, seed: int = 7) -> None:
    """Half decode lines, interleaved with the rest, ``per_second`` lines per logged second."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for i in range(lines):
            ts = _stamp(i // per_second)
            out.write((_decode(rng, ts) if i % 2 == 0 else _other(rng, ts)) + "\n")


def load_batches(path: Path) -> list[list[bytes]]:
    """The batches the log reader hands the line processor, split before the clock starts."""
    splitter = LineSplitter(DEFAULT_MAX_LINE_BYTES)
    batches = []
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            batches.append(splitter.feed(chunk).lines)
    return batches


def time_once(batches: list[list[bytes]]) -> tuple[float, CountingSink]:
    sink = CountingSink()
    processor = LineProcessor(sink)
    start = time.perf_counter()
    for batch in batches:
        processor.process(batch)
    return time.perf_counter() - start, sink


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--per-second", type=int, default=50, help="lines per logged second")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "sglang.log"
        write_log(log, args.lines, args.per_second)
        size_mb = log.stat().st_size / 1e6
        batches = load_batches(log)
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(time_once, batches)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(15)
    best = float("inf")
    for _ in range(args.repeat):
        seconds, sink = time_once(batches)
        best = min(best, seconds)
    print(
        f"{sink.lines} lines ({size_mb:.0f} MB), {sink.records} records, "
        f"{sink.unrecognized} unrecognised, {sink.events} events: "
        f"best of {args.repeat}: {best:.2f} s, {sink.lines / best:,.0f} lines/s"
    )


if __name__ == "__main__":
    main()
