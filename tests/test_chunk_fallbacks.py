"""Every simulated SGLang era and every held log takes the chunk reader, or falls back to the
line reader for a reason that is counted (``specwatch_log_chunk_fallbacks_total``) and
documented: no era loses the fast path silently."""

from __future__ import annotations

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
