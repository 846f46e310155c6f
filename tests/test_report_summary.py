"""The report's folding of records: exact quantiles, bands, baseline and bounded series."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.analysis.baseline import Baseline
from exporter.engines.batch import FIELDS, KindColumns, StatsBatch
from exporter.engines.record import DraftCounts, LogLine, StatsRecord, logged_seconds
from exporter.engines.server_config import ServerConfig
from exporter.report import run as run_module
from exporter.report.builder import ReportBuilder
from exporter.report.series import Downsampler
from exporter.report.summary import Report, ratio
from exporter.state.evidence import Evidence


def decode(
    accept_length: float | None,
    running: int = 8,
    tput: float = 100.0,
    graph: bool = True,
    second: int = 0,
) -> StatsRecord:
    return StatsRecord(
        kind="decode",
        time=f"2026-02-23T10:{second // 60:02d}:{second % 60:02d}",
        running_requests=running,
        queued_requests=0,
        accept_length=accept_length,
        cuda_graph=graph,
        gen_throughput=tput,
    )


def fold(records: list[StatsRecord], baseline: Baseline | None = None) -> Report:
    builder = ReportBuilder(baseline)
    for record in records:
        builder.on_record(record)
    return builder.finish(("test.log",))


def test_accept_length_quantiles_are_nearest_rank_over_all_windows() -> None:
    # Ten windows 1.00, 1.10, ..., 1.90: median is the 5th value (1.40), p90 the 9th (1.80).
    result = fold([decode(1 + i / 10, second=i) for i in range(10)])
    accept = result.accept
    assert accept is not None
    assert (accept.minimum, accept.median, accept.p90) == (1.0, 1.4, 1.8)
    assert accept.mean == pytest.approx(1.45)
    # 1.00 is the only window at or below 1.05.
    assert accept.collapsed_share == pytest.approx(0.1)


@given(st.lists(st.integers(100, 800), min_size=1, max_size=200))
def test_median_matches_sorting_every_value(hundredths: list[int]) -> None:
    result = fold([decode(h / 100, second=i % 3600) for i, h in enumerate(hundredths)])
    ordered = sorted(hundredths)
    assert result.accept is not None
    assert result.accept.median == ordered[(len(ordered) + 1) // 2 - 1] / 100


def test_windows_fall_into_concurrency_bands_with_baseline_at_their_load() -> None:
    baseline = Baseline.from_curve("1:100,64:1000")
    records = [
        decode(2.0, running=1, tput=150, second=0),
        decode(2.0, running=5, tput=300, second=10),
        decode(2.0, running=7, tput=340, second=20),
        decode(2.0, running=100, tput=900, second=30),
        decode(2.0, running=0, tput=0, second=40),  # idle: in no band
    ]
    result = fold(records, baseline)
    bands = {b.label: b for b in result.bands}
    assert set(bands) == {"1", "2-7", "64+"}
    assert bands["2-7"].windows == 2
    assert bands["2-7"].mean_throughput == 320
    # Baseline at 5 and 7 running: 100 + 900 * 4/63 and 100 + 900 * 6/63.
    expected = (100 + 900 * 4 / 63 + 100 + 900 * 6 / 63) / 2
    assert bands["2-7"].mean_baseline == pytest.approx(expected)
    assert bands["64+"].speedup == pytest.approx(0.9)  # clamped at the curve's end
    assert result.decode_windows == 5


def test_cuda_graph_share_counts_only_windows_that_say() -> None:
    records = [decode(2.0, graph=True), decode(2.0, graph=False), decode(2.0, graph=False)]
    assert fold(records).cuda_graph_share == pytest.approx(1 / 3)


def test_downsampler_keeps_at_most_max_points_of_consecutive_means() -> None:
    series = Downsampler(("value",), max_points=100)
    for i in range(10_000):
        series.add(float(i), (float(i),))
    points = series.points()
    assert len(points) <= 100
    # After halving to 128 windows per point, point k averages windows k*128 .. k*128+127.
    assert points[0].time == 0.0
    assert points[1].time == 128.0
    assert points[1].values["value"] == pytest.approx(128 + 63.5)


def test_downsampler_leaves_missing_values_out_of_the_mean() -> None:
    series = Downsampler(("a", "b"), max_points=2)
    for value in (1.0, 3.0, None, 5.0):
        series.add(0.0, (value, None))
    means = [p.values for p in series.points()]
    assert means == [{"a": 2.0, "b": None}, {"a": 5.0, "b": None}]


def test_downsampler_breaks_after_an_idle_gap() -> None:
    series = Downsampler(("value",), max_points=100, idle_gap=60.0)
    for at in (0.0, 30.0, 60.0, 121.0, 150.0):  # 61 s without a window between 60 and 121
        series.add(at, (1.0,))
    assert [(p.time, p.after_break) for p in series.points()] == [
        (0.0, False),
        (30.0, False),
        (60.0, False),
        (121.0, True),
        (150.0, False),
    ]


def test_downsampler_breaks_and_marks_a_restart_after_windows_only() -> None:
    series = Downsampler(("value",), max_points=100)
    series.restart(0.0)  # the log's first server start: no earlier run to set apart
    series.add(5.0, (1.0,))
    series.restart(7.0)  # restarted quicker than any idle gap
    series.add(9.0, (2.0,))
    assert [(p.time, p.after_break) for p in series.points()] == [(5.0, True), (9.0, True)]
    assert list(series.restarts) == [7.0]


def test_downsampler_never_averages_across_a_break_while_merging() -> None:
    series = Downsampler(("value",), max_points=8, idle_gap=60.0)
    for i in range(100):
        series.add(float(i), (1.0,))
    for i in range(100):
        series.add(1000.0 + i, (5.0,))
    points = series.points()
    assert len(points) <= 8
    assert {p.values["value"] for p in points if p.time < 1000} == {1.0}
    assert {p.values["value"] for p in points if p.time >= 1000} == {5.0}
    after = [p for p in points if p.after_break]
    assert [(p.time, p.values["value"]) for p in after] == [(1000.0, 5.0)]
    assert all(p.end < 1000 or p.time >= 1000 for p in points)  # no point spans the gap


def test_downsampler_stays_bounded_when_breaks_crowd_it() -> None:
    series = Downsampler(("value",), max_points=10, idle_gap=60.0)
    for i in range(1000):  # an idle gap after every window
        series.add(100.0 * i, (float(i),))
    points = series.points()
    assert len(points) <= 10
    assert (points[0].time, points[-1].end) == (0.0, 99_900.0)  # every window still plotted


def _record(**fields: Any) -> StatsRecord:
    return StatsRecord(
        **fields
    )  # only these fields: the others stay unset, as most logs leave them


_RECORD = st.builds(
    _record,
    kind=st.sampled_from(["decode", "decode", "prefill"]),
    time=st.one_of(
        st.none(),
        st.just("garbled"),
        st.integers(0, 90).map(lambda s: f"2026-02-23T10:00:{s % 60:02d}"),
    ),
    dp_rank=st.one_of(st.none(), st.integers(0, 2)),
    running_requests=st.integers(0, 10**6),  # tells one window from another
    new_tokens=st.one_of(st.none(), st.integers(0, 3)),  # 0 and 1: health probes
    accept_length=st.one_of(st.none(), st.just(2.5)),
    draft_counts=st.one_of(
        st.none(),
        st.none(),
        st.none(),
        st.integers(1, 4).map(lambda k: DraftCounts(k, k, 1, (0.5,) * k)),
    ),
)
# Long streams too: the evidence keeps 20 decode windows, batches run to 48 records.
_RECORDS = st.integers(0, 150).flatmap(lambda n: st.lists(_RECORD, min_size=n, max_size=n))


def reads(records: list[StatsRecord], sizes: list[int]) -> list[list[StatsRecord]]:
    """``records`` cut into consecutive reads of ``sizes`` records, the rest in a last one."""
    cut, start = [], 0
    for size in sizes:
        cut.append(records[start : start + size])
        start += size
    return [read for read in [*cut, records[start:]] if read]


@given(_RECORDS, st.sampled_from([1, 5, 24, 32, 48]), st.lists(st.integers(1, 60), max_size=4))
def test_report_evidence_is_what_a_record_by_record_feed_gives(
    records: list[StatsRecord], batch: int, sizes: list[int]
) -> None:
    # The builder hands its evidence only the records that can still matter, a batch at a time;
    # it counts the lines itself, so the evidence's counts of outcomes are no part of this.
    reference = Evidence()
    for record in records:
        at = logged_seconds(record.time)
        reference.add_record(record, at if at is not None else 0.0)
    builder = ReportBuilder()
    config = ServerConfig()
    with patch.object(run_module, "EVIDENCE_BATCH", batch):
        for read in reads(records, sizes):
            builder.on_lines(len(read))
            builder.on_records(read)
        stats_lines = builder.observations(config).stats_lines  # folds the last read too
    now = builder.last_time or 0.0
    seen = builder._run.evidence.observations(config, now)
    expected = reference.observations(config, now)
    # DP ranks are judged over the whole run by the builder itself, not from its evidence.
    assert replace(seen, stats_lines=0, ranks=()) == replace(expected, stats_lines=0, ranks=())
    assert stats_lines == len(records)


def _stamp(second: int) -> str:
    return f"2026-02-23T10:{second // 60:02d}:{second % 60:02d}"


# Every field the fold reads, each sometimes missing; times out of order and a minute apart
# now and then (idle gaps in the chart, ranks gone stale in a node's moment).
_FOLDED = st.builds(
    _record,
    kind=st.sampled_from(["decode", "decode", "prefill"]),
    time=st.one_of(st.none(), st.just("garbled"), st.integers(0, 200).map(_stamp)),
    dp_rank=st.one_of(st.none(), st.integers(0, 3)),
    tp_rank=st.one_of(st.none(), st.integers(0, 1)),
    running_requests=st.one_of(st.none(), st.integers(0, 80)),
    queued_requests=st.one_of(st.none(), st.integers(0, 5)),
    accept_length=st.one_of(st.none(), st.integers(0, 900).map(lambda h: h / 100)),
    cuda_graph=st.one_of(st.none(), st.booleans()),
    gen_throughput=st.one_of(st.none(), st.floats(0.0, 5000.0)),
    new_tokens=st.one_of(st.none(), st.integers(0, 3)),
    draft_counts=st.one_of(
        st.none(), st.integers(1, 4).map(lambda k: DraftCounts(k, k, 1, (0.5,) * k))
    ),
)
_RESTART = LogLine(
    _stamp(100), None, None, "server_args=ServerArgs(speculative_algorithm='EAGLE3')", "sglang"
)
_CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("records"), st.lists(_FOLDED, max_size=40)),
        st.tuples(st.just("event"), st.just(_RESTART)),
        st.tuples(st.just("unrecognized"), st.just("drift")),
        st.tuples(st.just("skipped"), st.just("too_long")),
    ),
    max_size=12,
)
_BASELINE = Baseline(((1.0, 50.0), (64.0, 900.0)), "test")


def _folded(
    calls: list[tuple[str, Any]], baseline: Baseline | None, deliver: Callable[..., None]
) -> str:
    """What a report and its findings show of ``calls``, each run of records handed over by
    ``deliver(builder, records)`` (``repr``: 1 and 1.0 stay apart)."""
    builder = ReportBuilder(baseline)
    for call, value in calls:
        if call == "records":
            deliver(builder, value)
        else:
            getattr(builder, f"on_{call}")(value)
    observations = builder.observations(builder.config)
    report = builder.finish(("test.log",))
    return repr((observations, report, report.series))


def _one_by_one(builder: ReportBuilder, records: list[StatsRecord]) -> None:
    for record in records:  # each line a read of its own
        builder.on_lines(1)
        builder.on_record(record)


@given(
    calls=_CALLS,
    sizes=st.lists(st.integers(1, 30), max_size=3),
    in_one_call=st.booleans(),
    baseline=st.sampled_from([None, _BASELINE]),
    evidence_batch=st.sampled_from([1, 7, 4096]),
    sample=st.sampled_from([1, 3, 2000]),
)
def test_records_folded_a_read_at_a_time_report_exactly_as_one_by_one(
    calls: list[tuple[str, Any]],
    sizes: list[int],
    in_one_call: bool,
    baseline: Baseline | None,
    evidence_batch: int,
    sample: int,
) -> None:
    """Reads mix kinds, ranks, times and missing values; restarts, drift and skips fall
    between them. A small sample and evidence batch, so that both turn over within a read."""

    def by_reads(builder: ReportBuilder, records: list[StatsRecord]) -> None:
        for read in reads(records, sizes):
            builder.on_lines(len(read))
            if in_one_call:
                builder.on_records(read)
            else:  # the line-by-line reader's way: held until the next call of another kind
                for record in read:
                    builder.on_record(record)

    with (
        patch.object(run_module, "EVIDENCE_BATCH", evidence_batch),
        patch.object(run_module, "FINDINGS_SAMPLE", sample),
    ):
        assert _folded(calls, baseline, by_reads) == _folded(calls, baseline, _one_by_one)


def batch_of(records: list[StatsRecord]) -> StatsBatch:
    """``records`` as the chunk reader hands a read over: each kind's rows by column, a field
    whose rows all hold the one same object as that value."""
    kinds = {record.kind for record in records}
    order = b"".join(b"D" if r.kind == "decode" else b"P" for r in records)
    return StatsBatch(
        order if len(kinds) > 1 else b"",
        _kind_columns("decode", [r for r in records if r.kind == "decode"]),
        _kind_columns("prefill", [r for r in records if r.kind == "prefill"]),
    )


def _kind_columns(kind: str, rows: list[StatsRecord]) -> KindColumns:
    if not rows:
        return KindColumns(0, (None,) * len(FIELDS), (kind,) + (None,) * (len(FIELDS) - 1))
    columns = list(zip(*rows, strict=True))
    same = [all(value is column[0] for value in column) for column in columns]
    return KindColumns(
        len(rows),
        tuple(None if one else list(column) for one, column in zip(same, columns, strict=True)),
        tuple(column[0] for column in columns),
    )


# Reads of a DP-attention node: every decode line names its rank and counts nothing itself,
# so a chunk reader's read of them is folded from its columns.
_DP_FOLDED = _FOLDED.map(lambda r: r._replace(dp_rank=r.dp_rank or 0, draft_counts=None))
_DP_CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("records"), st.lists(_DP_FOLDED, max_size=40)),
        st.tuples(st.just("records"), st.lists(_FOLDED, max_size=40)),
        st.tuples(st.just("event"), st.just(_RESTART)),
        st.tuples(st.just("unrecognized"), st.just("drift")),
    ),
    max_size=12,
)


@given(
    calls=_DP_CALLS,
    baseline=st.sampled_from([None, _BASELINE]),
    evidence_batch=st.sampled_from([1, 7, 4096]),
    sample=st.sampled_from([1, 3, 2000]),
)
def test_a_chunk_readers_batch_folded_from_its_columns_reports_exactly_as_one_by_one(
    calls: list[tuple[str, Any]], baseline: Baseline | None, evidence_batch: int, sample: int
) -> None:
    """A read handed over as the chunk reader's batch is folded from its columns where its
    decode lines allow, else as records: either way as its records one by one."""

    def as_batch(builder: ReportBuilder, records: list[StatsRecord]) -> None:
        builder.on_lines(len(records))
        builder.on_records(batch_of(records))

    with (
        patch.object(run_module, "EVIDENCE_BATCH", evidence_batch),
        patch.object(run_module, "FINDINGS_SAMPLE", sample),
    ):
        assert _folded(calls, baseline, as_batch) == _folded(calls, baseline, _one_by_one)


@given(st.lists(_FOLDED, max_size=60), st.integers(0, 70), st.integers(-70, 70))
def test_a_batch_reads_as_the_list_of_its_records(
    records: list[StatsRecord], start: int, index: int
) -> None:
    """Each record, slice and column of a batch, built alone, is its records' own."""
    batch = batch_of(records)
    assert len(batch) == len(records)
    if -len(records) <= index < len(records):
        assert batch[index] == records[index]
        assert batch.value(FIELDS.index("time"), index) == records[index].time
    else:
        with pytest.raises(IndexError):
            batch[index]
        with pytest.raises(IndexError):
            batch.value(FIELDS.index("time"), index)
    assert batch[start:] == records[start:]
    assert batch[start : start + 3] == records[start : start + 3]
    for field in range(len(FIELDS)):
        assert batch.column(field, start) == [record[field] for record in records[start:]]
    decodes = [at for at, record in enumerate(records) if record.kind == "decode"]
    assert batch.recent_start(3) == (decodes[-3] if len(decodes) >= 3 else 0)
    assert list(batch) == records


def _iso_reading(time: str) -> float | None:
    try:
        return datetime.fromisoformat(time).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _part(edges: list[int], low: int, high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


# The parsers' form and its near misses: impossible dates and times, other separators,
# fractions, zones, a digit too many; and any text.
_TIMES = st.one_of(
    st.builds(
        "{:04d}-{:02d}-{:02d}{}{:02d}:{:02d}:{:02d}{}".format,
        _part([1, 2024, 2026, 9999], 1, 9999),
        _part([1, 2, 12, 0, 13], 0, 13),
        _part([1, 28, 29, 30, 31, 0, 32], 0, 32),
        st.sampled_from("TTT _"),
        _part([0, 23, 24], 0, 25),
        _part([0, 59, 60], 0, 61),
        _part([0, 59, 60], 0, 61),
        st.sampled_from(["", "", "", ".5", "+01:00", "Z", "0"]),
    ),
    st.text(max_size=25),
)


@given(st.lists(_TIMES, max_size=20))
def test_a_logged_time_reads_as_fromisoformat_reads_it_in_utc(times: list[str]) -> None:
    assert [logged_seconds(time) for time in times] == [_iso_reading(time) for time in times]


@pytest.mark.parametrize(
    ("speedup", "said"),
    [(1.01, "1.0x"), (0.996, "1.0x"), (2.0, "2.0x"), (0.38, "0.38x"), (1.8, "1.8x"), (12.3, "12x")],
)
def test_a_speedup_reads_with_two_significant_digits_even_at_the_baseline(
    speedup: float, said: str
) -> None:
    """'1% more throughput (1x)' reads as exactly the baseline; '(1.0x)' says two digits."""
    assert ratio(speedup) == said
