"""What a scrape shows for a given state: fresh windows, staleness, counters, baseline."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.analysis.baseline import Baseline
from exporter.config import TargetConfig
from exporter.engines.draft_config import with_local_draft
from exporter.engines.record import StatsRecord
from exporter.engines.server_config import ServerConfig
from exporter.exposition.collector import SpecwatchCollector
from exporter.exposition.families import LABEL_VALUE_MAX, bounded
from exporter.state.target_state import TargetSnapshot, TargetState
from exporter.target import Target
from tests.support.metrics import T0, Clock, render
from tests.support.records import decode
from tests.support.tools import require_tool


def make_target(name: str = "node-a", baseline: Baseline | None = None) -> Target:
    return Target(TargetConfig(name=name), TargetState(name), baseline)


def test_fresh_window_is_exported_with_target_label() -> None:
    clock, target = Clock(), make_target()
    target.state.add_record(decode(), observed_at=T0)
    s = render([target], clock)
    assert s.value("specwatch_accept_length", target="node-a") == 1.0
    assert s.value("specwatch_running_requests", target="node-a") == 48
    assert s.value("specwatch_queued_requests", target="node-a") == 32
    assert s.value("specwatch_token_usage_ratio", target="node-a") == 0.06
    assert s.value("specwatch_cuda_graph", target="node-a") == 1
    assert s.value("specwatch_gen_throughput_tokens_per_second", target="node-a") == 600
    assert s.value("specwatch_last_decode_timestamp_seconds", target="node-a") == T0


def test_draft_config_errors_sum_each_targets_own(tmp_path: Path) -> None:
    """A path a target's server names is read and counted by that target alone; the family
    (no target label) sums them."""
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("[]")  # not a JSON object
    named = ServerConfig(draft_model_path=str(draft))
    one, two, quiet = make_target("one"), make_target("two"), make_target("quiet")
    for target in (one, one, two):
        with_local_draft(named, target.drafts)
    scrape = render([one, two, quiet], Clock())
    assert scrape.value("specwatch_draft_config_errors_total", reason="invalid") == 2
    assert scrape.value("specwatch_draft_config_errors_total", reason="permission") == 0
    assert (
        render([quiet], Clock()).value("specwatch_draft_config_errors_total", reason="invalid") == 0
    )


def test_window_vanishes_after_stale_after_but_counters_stay() -> None:
    clock, target = Clock(), make_target()
    target.state.add_record(decode(), observed_at=T0)
    clock.now = T0 + 59.9
    assert render([target], clock).value("specwatch_accept_length") == 1.0
    clock.now = T0 + 60
    s = render([target], clock)
    assert s.value("specwatch_accept_length") is None
    assert s.value("specwatch_gen_throughput_tokens_per_second") is None
    assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 1
    assert s.value("specwatch_last_decode_timestamp_seconds") == T0


def test_missing_fields_are_absent_not_zero() -> None:
    clock, target = Clock(), make_target()
    target.state.add_record(decode(accept_length=None, cuda_graph=None), observed_at=T0)
    s = render([target], clock)
    assert s.value("specwatch_accept_length") is None
    assert s.value("specwatch_cuda_graph") is None
    assert s.value("specwatch_running_requests") == 48


def test_histogram_buckets_follow_the_readme_bounds() -> None:
    clock, target = Clock(), make_target()
    for value in (1.0, 1.0, 1.04, 2.6, 9.0):
        target.state.add_record(decode(accept_length=value), observed_at=T0)
    s = render([target], clock)
    bucket = "specwatch_accept_length_windows_bucket"
    assert s.value(bucket, le="1.0") == 2
    assert s.value(bucket, le="1.05") == 3
    assert s.value(bucket, le="2.5") == 3
    assert s.value(bucket, le="3.0") == 4
    assert s.value(bucket, le="8.0") == 4
    assert s.value(bucket, le="+Inf") == 5
    assert s.value("specwatch_accept_length_windows_count") == 5
    assert s.value("specwatch_accept_length_windows_sum") == pytest.approx(14.64, abs=1e-9)


@pytest.mark.e2e
def test_a_scrape_with_every_kind_of_family_passes_promtool_lint() -> None:
    """Counters named ``_total``, histogram series complete, one HELP and TYPE per family."""
    clock = Clock()
    plain, ranked = make_target("node-a"), make_target("node-b", Baseline.from_tok_s(500))
    plain.state.add_record(decode(accept_length=2.6), observed_at=T0)
    for rank in (0, 1):
        ranked.state.add_record(decode(dp_rank=rank, cuda_graph=False), observed_at=T0)
    plain.state.add_skipped("too_long")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector([plain, ranked], 60, clock))
    text = generate_latest(registry).decode()
    result = subprocess.run(
        [require_tool("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), text
    assert text.count("# TYPE specwatch_accept_length_windows histogram\n") == 1
    assert 'specwatch_accept_length_windows_count{target="node-b"} 2.0\n' in text
    assert 'specwatch_decode_windows_total{cuda_graph="false",target="node-b"} 2.0\n' in text
    assert 'specwatch_log_skipped_lines_total{reason="too_long",target="node-a"} 1.0\n' in text


def test_decode_windows_counted_by_cuda_graph_state() -> None:
    clock, target = Clock(), make_target()
    for graph in (True, False, False):
        target.state.add_record(decode(cuda_graph=graph), observed_at=T0)
    target.state.add_record(StatsRecord(kind="prefill", running_requests=1), observed_at=T0)
    s = render([target], clock)
    assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 1
    assert s.value("specwatch_decode_windows_total", cuda_graph="false") == 2
    assert s.value("specwatch_log_stats_lines_total", kind="decode") == 3
    assert s.value("specwatch_log_stats_lines_total", kind="prefill") == 1


def test_speedup_against_curve_at_current_running_requests() -> None:
    clock = Clock()
    target = make_target(baseline=Baseline.from_curve("1:82,48:1500,128:2370"))
    target.state.add_record(decode(running_requests=48, gen_throughput=600.0), observed_at=T0)
    s = render([target], clock)
    assert s.value("specwatch_baseline_gen_throughput_tokens_per_second") == 1500
    assert s.value("specwatch_speedup") == pytest.approx(0.4, abs=1e-9)


def test_the_old_speedup_name_is_kept_one_release_and_says_it_is_deprecated() -> None:
    """`specwatch_speedup` is a multiple (1.8x), not the 0-1 share a `_ratio` name promises;
    queries of the old name keep working through the upgrade, told by its HELP to move."""
    clock = Clock()
    target = make_target(baseline=Baseline.from_tok_s(1000))
    target.state.add_record(decode(running_requests=48, gen_throughput=1800.0), observed_at=T0)
    s = render([target], clock)
    assert s.value("specwatch_speedup") == s.value("specwatch_speedup_ratio") == 1.8
    assert (
        "# HELP specwatch_speedup_ratio Deprecated: the same value as specwatch_speedup" in s.text
    )


def test_baseline_stays_but_speedup_goes_when_stale() -> None:
    clock, target = Clock(), make_target(baseline=Baseline.from_tok_s(90))
    target.state.add_record(decode(running_requests=1, gen_throughput=57.0), observed_at=T0)
    clock.now = T0 + 120
    s = render([target], clock)
    assert s.value("specwatch_baseline_gen_throughput_tokens_per_second") == 90
    assert s.value("specwatch_speedup") is None


def test_dp_ranks_get_their_own_series_and_sum_for_speedup() -> None:
    clock, target = Clock(), make_target(baseline=Baseline.from_tok_s(1000))
    for rank in (0, 1):
        rec = decode(gen_throughput=600.0, running_requests=30, dp_rank=rank, tp_rank=rank)
        target.state.add_record(rec, observed_at=T0)
    s = render([target], clock)
    assert s.value("specwatch_gen_throughput_tokens_per_second", dp_rank="0") == 600
    assert s.value("specwatch_gen_throughput_tokens_per_second", dp_rank="1") == 600
    assert s.value("specwatch_speedup") == pytest.approx(1.2, abs=1e-9)


def test_non_zero_tp_rank_without_dp_does_not_replace_tp0() -> None:
    clock, target = Clock(), make_target()
    rec0, rec1 = decode(accept_length=3.0, tp_rank=0), decode(accept_length=1.0, tp_rank=1)
    target.state.add_record(rec0, observed_at=T0)
    target.state.add_record(rec1, observed_at=T0 + 1)
    assert render([target], clock).value("specwatch_accept_length") == 3.0


def test_restored_window_uses_file_time_and_is_not_counted() -> None:
    clock, target = Clock(), make_target()
    target.state.restore_window(decode(), observed_at=T0 - 3600)
    s = render([target], clock)
    assert s.value("specwatch_accept_length") is None
    assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 0
    target.state.restore_window(decode(accept_length=2.5), observed_at=T0 - 5)
    assert render([target], clock).value("specwatch_accept_length") == 2.5


def test_targets_are_kept_apart_and_self_metrics_preinitialised() -> None:
    clock, a, b = Clock(), make_target("a"), make_target("b")
    a.state.add_record(decode(), observed_at=T0)
    b.state.add_skipped("too_long")
    s = render([a, b], clock)
    assert s.value("specwatch_accept_length", target="a") == 1.0
    assert s.value("specwatch_accept_length", target="b") is None
    assert s.value("specwatch_log_skipped_lines_total", target="b", reason="too_long") == 1
    assert s.value("specwatch_log_skipped_lines_total", target="a", reason="too_long") == 0
    assert s.value("specwatch_log_unrecognized_stats_lines_total", target="a") == 0
    assert len(s.values("specwatch_build_info")) == 1


def test_every_configured_target_has_an_info_series_even_when_silent() -> None:
    s = render([make_target("quiet")], Clock())
    assert s.value("specwatch_target_info", target="quiet", engine="unknown") == 1


def test_info_series_names_the_configured_engine_else_the_one_the_log_showed() -> None:
    configured = Target(TargetConfig(name="v", engine="vllm"), TargetState("v"))
    detected = make_target("d")
    detected.state.add_record(decode(), observed_at=T0)
    s = render([configured, detected], Clock())
    assert s.value("specwatch_target_info", target="v", engine="vllm") == 1
    assert s.value("specwatch_target_info", target="d", engine="sglang") == 1


def test_expected_accept_length_only_when_configured() -> None:
    configured = Target(TargetConfig(name="a", expected_accept_length=3.2), TargetState("a"))
    s = render([configured, make_target("b")], Clock())
    assert s.value("specwatch_expected_accept_length", target="a") == 3.2
    assert s.value("specwatch_expected_accept_length", target="b") is None


class BrokenState(TargetState):
    """A state whose snapshot has a bug: what a scrape must survive."""

    def snapshot(self) -> TargetSnapshot:
        raise RuntimeError("state bug")


class BrokenBaseline(Baseline):
    """Fails half-way through a render, after the target's window series were added."""

    def at(self, running_requests: float) -> float:
        raise ZeroDivisionError("baseline bug")


@pytest.mark.parametrize("broken", ["snapshot", "baseline"])
def test_a_target_that_fails_to_render_is_left_out_whole_and_counted(broken: str) -> None:
    good = make_target("good")
    good.state.add_record(decode(), observed_at=T0)
    if broken == "snapshot":
        bad = Target(TargetConfig(name="bad"), BrokenState("bad"), None)
    else:
        baseline = BrokenBaseline(((1, 100.0),), "test")
        bad = Target(TargetConfig(name="bad"), TargetState("bad"), baseline)
        bad.state.add_record(decode(), observed_at=T0)
    s = render([bad, good], Clock())
    assert s.value("specwatch_accept_length", target="bad") is None
    assert s.value("specwatch_accept_length", target="good") == 1.0
    assert s.values("specwatch_target_info", target="bad") == []
    assert s.value("specwatch_log_lines_total", target="bad") is None
    assert s.value("specwatch_render_errors_total", target="bad") == 1
    assert s.value("specwatch_render_errors_total", target="good") == 0


def test_long_label_values_are_cut_and_stay_distinct() -> None:
    first, second = "a" * 500 + "1", "a" * 500 + "2"
    assert len(bounded(first)) == len(bounded(second)) == LABEL_VALUE_MAX
    assert bounded(first) != bounded(second)
    assert bounded(first).startswith("a" * (LABEL_VALUE_MAX - 9) + "~")
    assert bounded("EAGLE3") == "EAGLE3"
    assert bounded("drafts/é\ud800") == "drafts/é?"  # a lone surrogate cannot be encoded
