"""Every simulated SGLang era and every held log takes the chunk reader, or falls back to the
line reader for a reason that is counted (``specwatch_log_chunk_fallbacks_total``) and
documented: no era loses the fast path silently."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pytest

from exporter.engines import sglang
from exporter.engines.record import LogLine, StatsRecord
from exporter.engines.sglang_chunk import FALLBACKS
from exporter.engines.sglang_sim.eras import ERAS
from exporter.parse.pipeline import LineProcessor, RecordSink
from exporter.simulate import generate
from exporter.state.feed import StateSink
from exporter.state.target_state import TargetState
from tests.support.docs import doc

LOGS = Path(__file__).parent / "data" / "logs"
BATCH = 64  # lines per read: a catch-up's batches are longer, a live tail's shorter


class PathSink(RecordSink):
    """Which way each record came: whole batches (the chunk reader) or line by line."""

    def __init__(self) -> None:
        self.whole = 0
        self.single = 0
        self.fallbacks: Counter[str] = Counter()

    def on_lines(self, count: int) -> None:
        pass

    def on_record(self, record: StatsRecord) -> None:
        self.single += 1

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self.whole += len(records)

    def on_unrecognized(self, reason: str) -> None:
        pass

    def on_skipped(self, reason: str) -> None:
        pass

    def on_event(self, line: LogLine) -> None:
        pass

    def on_fallback(self, reason: str) -> None:
        self.fallbacks[reason] += 1


def read(lines: list[bytes]) -> PathSink:
    sink = PathSink()
    processor = LineProcessor(sink)
    for start in range(0, len(lines), BATCH):
        processor.process(lines[start : start + BATCH])
    return sink


def _era_lines(era: str) -> list[bytes]:
    return list(_simulated_era(era))


@cache
def _simulated_era(era: str) -> tuple[bytes, ...]:
    """Fifteen minutes of the era's healthy log, simulated once for the tests that read it."""
    return tuple(line.encode() for line in generate("healthy", fmt=era, duration=900))


@pytest.mark.parametrize("era", list(ERAS))
def test_each_simulated_era_takes_the_chunk_reader_or_says_why_not(era: str) -> None:
    sink = read(_era_lines(era))
    batches = sum(sink.fallbacks.values())
    assert set(sink.fallbacks) <= set(FALLBACKS)
    if ERAS[era].separator == ",":
        # Today's header: after the first batches learn the layouts, the chunk reader reads.
        assert sink.whole > 0.9 * (sink.whole + sink.single)
        assert batches <= 4
    else:
        # The chunk pattern knows only today's "Decode batch, " header: every batch of an
        # era with another one is read line by line, and each says so.
        assert sink.whole == 0
        assert sink.fallbacks["other_layout"] >= len(_era_lines(era)) // BATCH - 4


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda path: path.name)
def test_each_held_log_takes_the_chunk_reader_once_a_layout_is_learnt(path: Path) -> None:
    sink = read(path.read_bytes().split(b"\n"))
    assert sink.whole > 0
    assert sink.fallbacks == Counter({"unlearnt": 1})


def test_a_layout_keeping_text_sends_its_era_line_by_line_counted_as_layout() -> None:
    line = (
        "[2026-02-23 00:14:{:02d} TP0] Decode batch, #running-req: 4, #token: 900, "
        "token usage: 0.01, accept len: 2.50, cuda graph: True, gen throughput (token/s): "
        "120.00, #queue-req: 0, timestamp: 2026-02-23T00:14:{:02d}.123456"
    )
    sink = read([line.format(s % 60, s % 60).encode() for s in range(4 * BATCH)])
    assert sink.whole == 0 and sink.single == 4 * BATCH
    assert sink.fallbacks == Counter({"unlearnt": 1, "layout": 3})


def test_the_daemon_state_counts_fallbacks_by_reason() -> None:
    state = TargetState("node")
    processor = LineProcessor(StateSink(state))
    lines = _era_lines("2025-10")
    for start in range(0, len(lines), BATCH):
        processor.process(lines[start : start + BATCH])
    counted = state.snapshot().chunk_fallbacks
    assert counted["other_layout"] >= len(lines) // BATCH - 4


def test_every_fallback_reason_is_documented() -> None:
    row = next(
        line
        for line in doc("metrics.md").splitlines()
        if line.startswith("| `specwatch_log_chunk_fallbacks_total`")
    )
    for reason in FALLBACKS:
        assert f"`{reason}`" in row


@pytest.mark.parametrize(
    "column",
    [
        [b"1.5", b"2", b"0"],
        [b"1e308", b"1e308"],  # finite, though their sum is not
        [b"1e308", b"1e308", b"nan"],
        [b"0.5", b"inf"],
        [b"inf", b"-inf"],
        [b"-0"],
        [b"2.5", b"-1"],
        [],
    ],
)
def test_a_column_of_reals_takes_exactly_what_the_line_reader_takes(column: list[bytes]) -> None:
    try:
        expected: list[float] | None = [sglang._real(value) for value in column]
    except ValueError:
        expected = None
    assert sglang.real_column(column) == expected


@pytest.mark.parametrize(
    "column",
    [[b"12", b"0"], [b"3", b"-18"], [b"-0"], [b"1_000"], [b"7", b"many"], []],
)
def test_a_column_of_counts_takes_exactly_what_the_line_reader_takes(column: list[bytes]) -> None:
    try:
        expected: list[int] | None = [sglang._count(value) for value in column]
    except ValueError:
        expected = None
    try:
        got = sglang.count_column(column)
    except ValueError:
        got = None
    assert got == expected


class CountingSink(PathSink):
    """PathSink that keeps each record's running count and each unrecognized line's reason."""

    def __init__(self) -> None:
        super().__init__()
        self.running: list[int | None] = []
        self.unrecognized: Counter[str] = Counter()

    def on_record(self, record: StatsRecord) -> None:
        super().on_record(record)
        self.running.append(record.running_requests)

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        super().on_records(records)
        self.running += [record.running_requests for record in records]

    def on_unrecognized(self, reason: str) -> None:
        self.unrecognized[reason] += 1


def test_a_negative_running_count_in_a_batch_is_drift_not_a_load_band() -> None:
    """A decode line with ``#running-req: -18`` amid lines the chunk reader takes whole: no
    record carries it (a load band, a node moment or a gauge has no place for it; ``report``
    raised on it), it is counted as a bad value, and every other line is read as ever."""
    lines = _era_lines("2026-02")
    decodes = [n for n, line in enumerate(lines) if b"Decode batch" in line]
    bad = decodes[len(decodes) // 2]
    lines[bad] = re.sub(rb"#running-req: \d+", b"#running-req: -18", lines[bad])
    sink = CountingSink()
    processor = LineProcessor(sink)
    for start in range(0, len(lines), BATCH):
        processor.process(lines[start : start + BATCH])
    clean = CountingSink()
    processor = LineProcessor(clean)
    for start in range(0, len(lines), BATCH):
        processor.process(_era_lines("2026-02")[start : start + BATCH])
    assert sink.unrecognized == {"bad_value": 1}
    assert len(sink.running) == len(clean.running) - 1
    assert all(count is None or count >= 0 for count in sink.running)
    assert sink.whole > 0  # the batches around it still went the fast way
