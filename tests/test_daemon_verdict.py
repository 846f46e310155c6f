"""The daemon says its verdict: ``specwatch_verdict{state}`` with the time the state began,
one log line per change (ERROR or WARNING with cause and fix), and the verdict first on its
landing page, during a collapse, a drift, drafting off and too few drafts.

The target is the daemon's own (``Target.from_config``), fed decode records at the times its
tailer would have read them, and rendered by its collector and landing page at a chosen now.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from exporter import clock
from exporter.config import BaselineConfig, TargetConfig
from exporter.engines.record import DraftCounts, StatsRecord
from exporter.exposition.collector import SpecwatchCollector
from exporter.exposition.insight import inspect_now
from exporter.exposition.landing import landing_page
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.fake_sglang import Route, fake_sglang
from tests.support.loglines import startup
from tests.support.records import decode
from tests.support.sglang_metrics import Rank, SGLangMetrics
from tests.support.upstream_servers import vllm_schema

T0 = 1_800_000_000.0
STALE = 60.0


def target(expected: float | None = None) -> Target:
    config = TargetConfig(
        name="node",
        baseline=BaselineConfig(curve="1:82,16:900,48:1500,96:2040"),
        expected_accept_length=expected,
    )
    return Target.from_config(config)


def feed(node: Target, start: float, end: float, every: float, **fields: object) -> float:
    """One decode record every ``every`` seconds from ``start`` to ``end``, as read then."""
    at = start
    while at < end:
        node.state.add_records([decode(**fields)], observed_at=at)
        at += every
    return at


def verdict_series(node: Target, now: float) -> dict[str, float]:
    families = SpecwatchCollector([node], STALE, clock=lambda: now).collect()
    found = {}
    for family in families:
        for sample in family.samples:
            if sample.name == "specwatch_verdict":
                found[sample.labels["state"]] = sample.value
            if sample.name == "specwatch_verdict_since_timestamp_seconds":
                found["since"] = sample.value
    return found


def holding(series: dict[str, float]) -> list[str]:
    return [state for state, value in series.items() if state != "since" and value == 1]


def lines(records: Iterable[logging.LogRecord]) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in records if r.name == "specwatch.verdict"]


def test_a_collapse_is_exported_logged_as_an_error_once_and_shown_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = target()
    caplog.set_level(logging.INFO, logger="specwatch.verdict")
    at = feed(node, T0, T0 + 600, 5, accept_length=3.0, gen_throughput=2400.0)
    assert holding(verdict_series(node, at)) == ["healthy"]
    collapse = at
    at = feed(node, at, at + 240, 5, accept_length=1.0, gen_throughput=600.0)
    for now in (at, at + 1, at + 2):  # scrapes, the landing page and the daemon's own check
        series = verdict_series(node, now)
    assert holding(series) == ["collapsed"]
    assert series["since"] == pytest.approx(collapse, abs=60)
    assert set(series) - {"since"} == {
        "collapsed",
        "accept_length_low",
        "drifting",
        "slower_than_baseline",
        "drafting_off_below_baseline",
        "baseline_implausible",
        "interleaved",
        "too_few_drafts",
        "no_decode",
        "drafting_off",
        "healthy",
    }
    told = lines(caplog.records)
    errors = [text for level, text in told if level == logging.ERROR]
    assert len(errors) == 1
    [error] = errors
    assert "verdict collapsed (was healthy)" in error
    # Nothing here named the method: judged by what holds for every method, and told so.
    assert "Fix: Nothing read names the speculative method" in error
    page = landing_page([node], STALE, clock=lambda: at).decode()
    assert page.index("Verdict: collapsed") < page.index("Logs:")
    assert "Fix: Nothing read names the speculative method" in page


def test_drafting_off_at_the_baseline_is_its_own_state_not_slower(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = target()
    caplog.set_level(logging.INFO, logger="specwatch.verdict")
    at = feed(
        node,
        T0,
        T0 + 300,
        5,
        running_requests=96,
        accept_length=1.0,
        gen_throughput=1960.0,
        extra={"spec_steps": 0},
    )
    assert holding(verdict_series(node, at)) == ["drafting_off"]
    assert not [level for level, _ in lines(caplog.records) if level >= logging.WARNING]


def test_too_few_drafts_is_a_state_with_its_count_never_a_collapse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM's counts: six windows with 27 drafts in all, one accepted."""
    node = target()
    caplog.set_level(logging.INFO, logger="specwatch.verdict")
    at = T0
    for drafts in (5, 4, 6, 4, 4, 4):
        counts = DraftCounts(
            draft_tokens=2 * drafts, accepted_tokens=1 if drafts == 6 else 0, drafts=drafts
        )
        record: StatsRecord = decode(
            engine="vllm",
            accept_length=1.0,
            draft_counts=counts,
            running_requests=16,
            gen_throughput=1000.0,
        )
        node.state.add_records([record], observed_at=at)
        at += 10
    insight = inspect_now(node, at, STALE)
    assert insight.judgement is not None
    assert insight.judgement.state == "too_few_drafts"
    assert "too few drafts: 27 draft rounds in 6 decode windows" in insight.judgement.notes[0]
    assert not [level for level, _ in lines(caplog.records) if level >= logging.ERROR]


def test_a_drift_over_hours_is_exported_and_logged_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = target()
    caplog.set_level(logging.INFO, logger="specwatch.verdict")
    at = T0
    for hour in range(4):
        at = feed(node, at, at + 3600, 30, accept_length=3.2 - 0.3 * hour, gen_throughput=2400.0)
        inspect_now(node, at, STALE)
    assert holding(verdict_series(node, at)) == ["drifting"]
    [warning] = [text for level, text in lines(caplog.records) if level == logging.WARNING]
    assert "verdict drifting (was healthy)" in warning
    assert "3.20 this run accepted in its first hour" in warning


def test_a_scraped_vllm_is_judged_on_the_drafts_its_counters_count() -> None:
    """A vLLM only scraped: n-gram drafting a few times between scrapes, none accepted, is too
    few drafts; thousands of rounds with none accepted are a collapse."""
    with fake_sglang() as server:
        node = Target.from_config(TargetConfig(name="v", metrics_url=f"{server.url}/metrics"))
        drafts, accepted, positions = 1000.0, 1500.0, (700.0, 500.0, 300.0)
        assert node.upstream is not None
        for _ in range(4):
            server.routes["/metrics"] = Route(
                body=vllm_schema("vllm:", drafts, accepted, positions)
            )
            node.upstream.scrape_once()
            insight = inspect_now(node, clock.now(), STALE)
            drafts += 7  # seven n-gram drafts, none accepted
        assert insight.judgement is not None
        assert insight.judgement.state == "too_few_drafts"
        assert insight.judgement.drafts == 21
        for _ in range(3):
            drafts += 2000
            server.routes["/metrics"] = Route(
                body=vllm_schema("vllm:", drafts, accepted, positions)
            )
            node.upstream.scrape_once()
            insight = inspect_now(node, clock.now(), STALE)
        assert insight.judgement is not None and insight.judgement.state == "collapsed"


def test_a_scrape_shows_the_judgement_of_the_last_seconds_beside_values_read_now() -> None:
    """The daemon's collector judges a target at most once per ``judge_every``: a scrape
    within it shows the kept judgement and the newest window's values; one past it, or from
    before the judgement (a clock set back), judges afresh."""
    node = target()
    at = feed(node, T0, T0 + 600, 5, accept_length=3.0, gen_throughput=2400.0)
    now = [at]
    collector = SpecwatchCollector([node], STALE, clock=lambda: now[0], judge_every=5.0)
    first = collector.view(node)
    assert first is not None and first.insight.verdict is not None
    assert first.insight.verdict.state == "healthy"
    assert node.state.verdict.observed_at == at

    node.state.add_records([decode(accept_length=1.0, gen_throughput=600.0)], observed_at=at + 1)
    now[0] = at + 4.9
    kept = collector.view(node)
    assert kept is not None and kept.insight.judgement is first.insight.judgement
    assert node.state.verdict.observed_at == at  # not judged again
    assert 'specwatch_accept_length{target="node"} 1.0\n' in collector.exposition("text").decode()

    for later in (at + 6, at - 10):  # past REUSE_SECONDS too, which reuses a whole render
        now[0] = later
        assert collector.view(node) is not None
        assert node.state.verdict.observed_at == later


def test_without_judge_every_each_render_judges() -> None:
    node = target()
    at = feed(node, T0, T0 + 60, 5, accept_length=3.0, gen_throughput=2400.0)
    now = [at]
    collector = SpecwatchCollector([node], STALE, clock=lambda: now[0])
    for later in (at + 0.5, at + 1, at + 2):
        node.state.add_records([decode(accept_length=3.0)], observed_at=later)
        now[0] = later
        assert collector.view(node) is not None
        assert node.state.verdict.observed_at == later


def test_a_new_setup_is_judged_at_once_whatever_judge_every() -> None:
    """Only the log's new windows of the same setup wait for the next judgement: start-up
    lines that name the server's setup (a restart, the algorithm) are judged at the next
    scrape, as a new scrape of the server or a new baseline are."""
    node = target()
    at = feed(node, T0, T0 + 600, 5, accept_length=3.0, gen_throughput=2400.0)
    now = [at]
    collector = SpecwatchCollector([node], STALE, clock=lambda: now[0], judge_every=5.0)
    first = collector.view(node)
    assert first is not None and first.insight.config.algorithm is None
    LogFeed(node.state).on_lines([line.encode() for line in startup(algorithm="EAGLE")])
    now[0] = at + 2
    view = collector.view(node)
    assert node.state.verdict.observed_at == at + 2
    assert view is not None and view.insight.config.algorithm == "EAGLE"
    assert "eagle3_draft_with_eagle_algorithm" in {f.code for f in view.insight.findings}


def test_a_log_target_s_rescrape_of_the_same_figures_keeps_the_judgement() -> None:
    """A target with a log and a server scraped: a new scrape of ``/metrics`` that says what
    the last said (its busy-ness, graph share, endpoint) leaves the judgement to the next
    round; a server that goes idle is judged at the next scrape."""
    metrics = SGLangMetrics(dp=1)
    metrics.stats(0, Rank(running=30))
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=metrics.body())
        config = TargetConfig(
            name="node", log_files=["server.log"], metrics_url=f"{server.url}/metrics"
        )
        node = Target.from_config(config)
        assert node.upstream is not None
        at = feed(node, T0, T0 + 600, 5, accept_length=3.0, gen_throughput=2400.0)
        now = [at]
        collector = SpecwatchCollector([node], STALE, clock=lambda: now[0], judge_every=5.0)
        node.upstream.scrape_once()
        assert collector.view(node) is not None
        assert node.state.verdict.observed_at == at
        node.upstream.scrape_once()  # the same figures
        now[0] = at + 2
        assert collector.view(node) is not None
        assert node.state.verdict.observed_at == at
        metrics.stats(0, Rank(running=0))
        server.routes["/metrics"] = Route(body=metrics.body())
        node.upstream.scrape_once()
        now[0] = at + 3
        assert collector.view(node) is not None
        assert node.state.verdict.observed_at == at + 3
