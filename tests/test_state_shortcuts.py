"""The daemon's state takes shortcuts so that a record stays cheap when a long log is caught
up, and each leaves everything a scrape or a finding can observe exactly as before.

- A read of the log is one batch (``TargetState.add_records``, through ``StateSink``): it ends
  where taking its records one at a time would have ended, counters, histogram, windows,
  folded ranks and evidence alike. The sink takes a read's records in one call too.
- A target without a baseline keeps no node loads, which only a speedup is measured on.
"""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.analysis.baseline import Baseline
from exporter.analysis.findings import DecodeSample
from exporter.analysis.load_bands import band_of
from exporter.config import BaselineConfig, TargetConfig
from exporter.engines.record import LogLine, StatsRecord
from exporter.engines.server_config import ServerConfig
from exporter.state.evidence import Evidence
from exporter.state.feed import BootstrapSink, LogFeed, StateSink
from exporter.state.target_state import ACCEPT_LENGTH_BUCKETS, TargetState
from exporter.target import Target
from tests.support.loglines import decode_line
from tests.support.metrics import T0
from tests.support.records import draft_counts

BASELINE = Baseline(((1.0, 50.0), (64.0, 900.0)), "test")


def as_record(fields: dict[str, Any]) -> StatsRecord:
    return StatsRecord(**fields)


ACCEPT_LENGTHS = st.one_of(
    st.none(),
    st.sampled_from([*ACCEPT_LENGTH_BUCKETS, math.nan, math.inf, -math.inf, 0.0, 8.01]),
    st.floats(min_value=0.5, max_value=9.0),
)
RECORDS = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["decode", "decode", "prefill"]),
        "engine": st.sampled_from(["sglang", "vllm"]),
        "dp_rank": st.one_of(st.none(), st.integers(0, 6)),
        "tp_rank": st.one_of(st.none(), st.integers(0, 2)),
        "running_requests": st.one_of(st.none(), st.integers(0, 64)),
        "accept_length": ACCEPT_LENGTHS,
        "cuda_graph": st.one_of(st.none(), st.booleans()),
        "gen_throughput": st.one_of(st.none(), st.floats(0.0, 5000.0)),
        "new_tokens": st.one_of(st.none(), st.integers(0, 3)),
        "draft_counts": draft_counts(),
    }
).map(as_record)
# Batches with the time they are applied at: not always increasing, as a window restored from
# a file's mtime can be newer than the lines read after it.
BATCH = st.tuples(st.lists(RECORDS, max_size=12), st.floats(T0 - 5, T0 + 5))
BATCHES = st.lists(BATCH, max_size=8)


def seen(state: TargetState) -> str:
    """Everything a scrape or a finding can observe of ``state`` (``repr``: NaN equals NaN)."""
    return repr((state.snapshot(), evidence_seen(state.evidence)))


def evidence_seen(evidence: Evidence) -> str:
    observations = evidence.observations(ServerConfig(), T0 + 30)
    return repr((observations, evidence.recent_speedup(BASELINE)))


@given(
    batches=BATCHES,
    max_dp_ranks=st.integers(1, 4),
    restored=st.lists(RECORDS, max_size=3),
)
def test_a_batch_leaves_the_state_as_its_records_added_one_by_one(
    batches: list[tuple[list[StatsRecord], float]],
    max_dp_ranks: int,
    restored: list[StatsRecord],
) -> None:
    with mock.patch("exporter.clock.now", return_value=T0):  # when their evidence starts
        batched = TargetState("t", max_dp_ranks)
        single = TargetState("t", max_dp_ranks)
    for state in (batched, single):
        for record in restored:
            state.restore_window(record, T0 + 1)
    for records, at in batches:
        batched.add_records(records, at)
        for record in records:
            single.add_record(record, at)
        assert seen(batched) == seen(single)


@given(
    batches=st.lists(st.tuples(BATCH, st.booleans()), max_size=8),
    max_windows=st.integers(1, 3),
)
def test_evidence_of_a_batch_equals_its_records_added_one_by_one(
    batches: list[tuple[tuple[list[StatsRecord], float], bool]], max_windows: int
) -> None:
    """A small memory, so that windows, loads and outcomes are pushed out mid-batch."""
    batched, single = Evidence(max_windows=max_windows), Evidence(max_windows=max_windows)
    for (records, at), unrecognized in batches:
        batched.add_records(records, at)
        for record in records:
            single.add_record(record, at)
        if unrecognized:
            batched.add_unrecognized()
            single.add_unrecognized()
        assert evidence_seen(batched) == evidence_seen(single)


@given(
    batches=st.lists(st.tuples(BATCH, st.booleans()), max_size=8),
    max_windows=st.integers(1, 5),
)
def test_the_recent_windows_observed_are_those_kept_converted_anew(
    batches: list[tuple[tuple[list[StatsRecord], float], bool]], max_windows: int
) -> None:
    """Observations convert only the windows added since the last ones (``_decode_samples``)
    and see what converting every recent window again sees, observed after any batch or
    only now and then."""
    evidence, decodes = Evidence(max_windows=max_windows), []
    for (records, at), observed in batches:
        evidence.add_records(records, at)
        decodes += [record for record in records if record.kind == "decode"]
        if observed:
            windows = evidence.observations(ServerConfig(), T0 + 30).windows
            recent = decodes[-max_windows:]
            assert repr(windows) == repr(tuple(map(DecodeSample.from_record, recent)))


RESTART = LogLine(
    None, None, None, "server_args=ServerArgs(speculative_algorithm='EAGLE3')", "sglang"
)
CALLS = st.lists(
    st.one_of(
        # A record up to 150 times: enough to push older outcomes out of the evidence, where
        # their order shows.
        st.tuples(st.just("record"), st.tuples(RECORDS, st.integers(1, 150))),
        st.tuples(st.just("lines"), st.integers(1, 50)),
        st.tuples(st.just("unrecognized"), st.just("drift")),
        st.tuples(st.just("skipped"), st.just("invalid_utf8")),
        st.tuples(st.just("event"), st.just(RESTART)),
    ),
    max_size=40,
)


def apply(state: TargetState, call: str, value: Any) -> None:
    """What the sink's ``on_<call>(value)`` comes to, one call at a time."""
    if call == "lines":
        state.add_lines(value)
    elif call == "unrecognized":
        state.add_unrecognized()
    elif call == "skipped":
        state.add_skipped(value)
    else:
        state.add_event(value)


def _decode(engine: str) -> StatsRecord:
    return StatsRecord(kind="decode", engine=engine)


@given(calls=CALLS)
@example(  # two engines' lines taking turns: the sink's watch of the source's streams sees them
    calls=[
        ("record", (_decode(engine), 1))
        for engine in ("sglang", "sglang", "vllm", "sglang", "vllm", "sglang")
    ]
)
def test_the_sink_applies_held_records_before_anything_else_reaches_the_state(
    calls: list[tuple[str, Any]],
) -> None:
    """Drift and restarts land between the records they came between: a restart starts the
    findings evidence afresh, and the last 200 outcomes decide the drift share. The one at a
    time side has its source's watch too, told each line as it comes (without it, a state
    that watches no source saw no two servers where the sink's watch rightly did)."""
    with mock.patch("exporter.clock.now", return_value=T0):
        held, direct = TargetState("t"), TargetState("t")
        sink, watch = StateSink(held), direct.watch_streams()
        for call, value in calls:
            if call == "record":
                record, times = value
                for _ in range(times):
                    sink.on_record(record)
                    watch.add(direct.tracker.stamped((record,)))
                    direct.add_record(record)
            else:
                getattr(sink, f"on_{call}")(value)
                if call == "event":
                    watch.observe(value)
                apply(direct, call, value)
        sink.flush()
        assert seen(held) == seen(direct)


SINK_CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("records"), st.lists(RECORDS, max_size=30)),
        st.tuples(st.just("lines"), st.integers(1, 50)),
        st.tuples(st.just("unrecognized"), st.just("drift")),
        st.tuples(st.just("skipped"), st.just("invalid_utf8")),
        st.tuples(st.just("event"), st.just(RESTART)),
    ),
    max_size=20,
)


@given(calls=SINK_CALLS, bootstrap=st.booleans())
def test_a_sink_given_a_read_s_records_in_one_call_ends_as_given_them_one_by_one(
    calls: list[tuple[str, Any]], bootstrap: bool
) -> None:
    """Live and bootstrap sinks alike, records between drift, skips and restarts."""
    with mock.patch("exporter.clock.now", return_value=T0):
        together, apart = TargetState("t"), TargetState("t")
        sinks = [BootstrapSink(s, T0 - 5) if bootstrap else StateSink(s) for s in (together, apart)]
        for call, value in calls:
            if call == "records":
                sinks[0].on_records(value)
                for record in value:
                    sinks[1].on_record(record)
            else:
                for sink in sinks:
                    getattr(sink, f"on_{call}")(value)
        for sink in sinks:
            sink.flush()
        assert seen(together) == seen(apart)


def test_a_feed_makes_the_records_of_a_read_current_when_the_read_is_done() -> None:
    state = TargetState("t")
    LogFeed(state).on_lines([decode_line(accept_len=2.5).encode()] * 3)
    snapshot = state.snapshot()
    assert snapshot.stats_lines["decode"] == 3
    assert snapshot.windows[None].record.accept_length == 2.5


def test_a_read_s_lines_are_counted_once_its_records_are_in_the_state() -> None:
    """A scrape that sees a line counted sees what it said: a test (or an on-call) that waits
    for the line count before reading the counters reads the counters of those lines, even
    when the records' parsing is slow or the read holds a restart."""
    state = TargetState("t")
    sink = StateSink(state)
    sink.on_lines(3)
    sink.on_record(as_record({"kind": "decode", "accept_length": 2.5}))
    sink.on_event(RESTART)  # applies the records before the restart, counts no line yet
    sink.on_record(as_record({"kind": "decode", "accept_length": 1.5}))
    before = state.snapshot()
    assert before.log_lines == 0 and before.stats_lines["decode"] == 1
    sink.flush()
    after = state.snapshot()
    assert after.log_lines == 3 and after.stats_lines["decode"] == 2


def test_a_decode_of_a_tp_rank_past_0_neither_shows_nor_refreshes_the_last_decode() -> None:
    """With every scheduler printing, TP0 speaks for its group; the others only count."""
    state = TargetState("t")
    state.add_record(StatsRecord("decode", accept_length=2.0, tp_rank=0), T0)
    state.add_records([StatsRecord("decode", accept_length=3.0, tp_rank=1)], T0 + 1)
    snapshot = state.snapshot()
    assert snapshot.windows[None].record.accept_length == 2.0
    assert snapshot.last_decode_at == T0
    assert snapshot.stats_lines["decode"] == 2


@given(batches=BATCHES)
def test_without_a_baseline_node_loads_are_skipped_and_nothing_observable_changes(
    batches: list[tuple[list[StatsRecord], float]],
) -> None:
    with mock.patch("exporter.clock.now", return_value=T0):
        full, lean = TargetState("t"), TargetState("t", node_loads=False)
    for records, at in batches:
        full.add_records(records, at)
        lean.add_records(records, at)
    for state in (full, lean):
        assert state.evidence.recent_speedup(None) is None
    assert repr(full.snapshot()) == repr(lean.snapshot())
    assert evidence_seen(lean.evidence).endswith(", None)")  # no speedup, as no loads
    observations = [s.evidence.observations(ServerConfig(), T0 + 30) for s in (full, lean)]
    assert repr(observations[0]) == repr(observations[1])


def test_every_target_keeps_its_node_loads_for_its_speed_by_band() -> None:
    """With a baseline they measure the speedup; without one they still feed the per-band
    throughput a fleet's or a drafting-off baseline is learned from."""
    measured = Target.from_config(TargetConfig(baseline=BaselineConfig(tok_s=500)))
    plain = Target.from_config(TargetConfig())
    ranks = [
        StatsRecord("decode", dp_rank=rank, running_requests=8, gen_throughput=400.0)
        for rank in (0, 1)
    ]
    for target in (measured, plain):
        for _ in range(3):  # a rank logging again closes the node's moment: 16 running, 800 tok/s
            target.state.add_records(ranks, T0)
    assert measured.baseline is not None
    assert measured.state.evidence.recent_speedup(measured.baseline) == 1.6
    assert plain.baseline is None
    assert ("plain", band_of(16), 2, 1600.0) in plain.state.band_sums()
