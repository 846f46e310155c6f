"""What specwatch understands about a target beyond its newest window, per scrape.

The merged server configuration (log over ``/server_info``, the draft's own config on top),
the active findings, and the upstream gauges that may stand in for the log. Computed from
thread-safe parts (the state's tracker and evidence, the scraper's published snapshot) so a
scrape never waits on a tailer or on the upstream server.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from exporter.analysis.algorithms import config_floor
from exporter.analysis.findings import (
    OFF_SHARE,
    SEVERITY_ORDER,
    Finding,
    Observations,
    drafting_off_below_baseline,
    drafting_off_share,
    evaluate,
)
from exporter.analysis.judge import (
    Case,
    Judgement,
    SpeedBaseline,
    Stretch,
    judge,
    method_of,
    one_stretch,
)
from exporter.analysis.node import node_totals
from exporter.analysis.thresholds import MIN_WINDOWS
from exporter.engines.record import UpstreamValues
from exporter.engines.server_config import ServerConfig
from exporter.exposition.watched import Watched
from exporter.sources.upstream_snapshot import UpstreamSnapshot
from exporter.state.requests import RequestsSnapshot
from exporter.state.target_state import LatestDecode, TargetSnapshot
from exporter.state.verdict import Judged, Verdict


@dataclass(frozen=True, slots=True)
class Insight:
    config: ServerConfig
    findings: list[Finding]
    upstream: UpstreamSnapshot | None
    fallback: UpstreamValues | None  # upstream gauges to export; None while the log is fresh
    baseline_tok_s: float | None = None  # the baseline at the current running requests
    speedup: float | None = None  # current throughput over that baseline
    # The accept length below which the drafter is low, by its algorithm; None: not judged.
    accept_floor: float | None = None
    # Share of recent decode windows adaptive speculation ran with drafting off.
    drafting_off_share: float | None = None
    # The judge's state now (``analysis.judge``), and since when (``state.verdict``).
    judgement: Judgement | None = None
    verdict: Verdict | None = None


def merged_config(target: Watched, upstream: UpstreamSnapshot | None) -> ServerConfig:
    """The log describes the run that wrote it, so it wins over a scrape of ``/server_info``;
    a configured draft ``config.json`` is the most direct word on the draft.

    No file is read here (each source read the draft it names when it learnt the path): a
    path from the server must not be able to stall or bloat a scrape.
    """
    config = _told(target.config.engine)
    if upstream is not None and upstream.config is not None:
        config = config.merged(upstream.config)
    return config.merged(target.state.tracker.config).merged(target.draft)


@functools.lru_cache(maxsize=16)
def _told(engine: str) -> ServerConfig:
    """What the operator's ``engine:`` says, one object per value (merges of it are
    remembered by identity, see ``ServerConfig.merged``)."""
    if engine == "auto":
        return ServerConfig()
    return ServerConfig(engine=engine)  # the operator's word, until a source tells


def inspect(
    target: Watched,
    snap: TargetSnapshot,
    fresh: Mapping[int | None, LatestDecode],
    now: float,
    stale_after: float,
    requests: RequestsSnapshot | None = None,
    reuse: float = 0.0,
) -> Insight:
    """Everything the collector renders beyond the log windows, as of ``now``.

    ``fresh`` are the log windows younger than ``stale_after``, by DP rank; ``requests``,
    the finished requests as of ``now`` when the caller has them already. ``reuse``: the
    target's judgement (its state, findings and the configuration they read) taken less than
    that many seconds before ``now`` is shown as it is; the values around it (upstream,
    throughput against the baseline) are always of ``now``.
    """
    upstream = target.upstream.snapshot() if target.upstream is not None else None
    config = merged_config(target, upstream)
    inputs = {}
    fallback = None
    if upstream is not None and upstream.scraped_at is not None:
        inputs = {
            "metrics_endpoint": upstream.metrics_endpoint,
            "cuda_graph_share": upstream.values.cuda_graph_share if upstream.values else None,
            "upstream_busy": bool(upstream.values and upstream.values.running_requests),
        }
        max_age = max(stale_after, 2 * target.config.scrape_interval)
        if not fresh and now - upstream.scraped_at < max_age:
            fallback = _plain_decoding(upstream.values, config)
    baseline_tok_s, speedup = _speed(target, *_load(snap, fresh, fallback))
    if config.pipelined or any(w.record.pp_rank is not None for w in fresh.values()):
        speedup = None  # one micro-batch's requests: no baseline at that load fits the node
    given = (config, _read_upstream(target, upstream, inputs, fallback), target.baseline)
    judged = target.state.verdict.recent(now, reuse, given) if reuse > 0 else None
    if judged is None:
        judged = _judged(
            target, snap, now, stale_after, given, fallback, speedup, bool(fresh), requests, inputs
        )
    return Insight(
        judged.config,
        judged.findings,
        upstream,
        fallback,
        baseline_tok_s,
        speedup,
        judged.accept_floor,
        judged.drafting_off_share,
        judged.judgement,
        judged.verdict,
    )


def _read_upstream(
    target: Watched,
    upstream: UpstreamSnapshot | None,
    inputs: Mapping[str, Any],
    fallback: UpstreamValues | None,
) -> object:
    """What a judgement reads of the server's ``/metrics``, for ``VerdictTrack.recent``: of
    a target only scraped, every scrape (its counted drafts are folded per scrape); of one
    with a log, the few figures the findings read and the gauges standing in for a silent
    log, so a scrape of the same figures keeps the judgement."""
    if upstream is None:
        return None
    if not target.config.log_files:
        return upstream.scraped_at
    return (*inputs.values(), fallback)


def _judged(
    target: Watched,
    snap: TargetSnapshot,
    now: float,
    stale_after: float,
    given: tuple[ServerConfig, object, object],
    fallback: UpstreamValues | None,
    speedup: float | None,
    fresh: bool,
    requests: RequestsSnapshot | None,
    inputs: Mapping[str, Any],
) -> Judged:
    """The target judged afresh as of ``now`` from ``given`` (its merged configuration, when
    its server was last scraped, its baseline): its findings and state, told to (and kept
    by) its verdict track."""
    config = given[0]
    evidence = target.state.evidence
    # Findings judge the recent windows, throughput included; the current speedup (perhaps
    # from the upstream gauges) stands in only when the log has none.
    recent = evidence.recent_speedup(target.baseline) if fresh else None
    observations = evidence.observations(
        config,
        now,
        speedup=recent if recent is not None else speedup,
        log_watched=bool(target.config.log_files),
        requests=(requests or target.state.requests.snapshot(now)).recent,
        interleaving=snap.interleaving,
        **inputs,
    )
    interleaved = snap.interleaving is not None
    judgement = _judgement(target, observations.config, fallback, now, stale_after, interleaved)
    findings = _findings(observations)
    track = target.state.verdict
    verdict = track.observe(judgement, findings, now)
    off_share = drafting_off_share(observations.windows)
    # Drafting off nearly always: the windows with it on are probes, not the drafter's level.
    probing = observations.config.probes and off_share is not None and off_share >= OFF_SHARE
    judged = Judged(
        now,
        given,
        observations.config,
        findings,
        judgement,
        verdict,
        None if probing else config_floor(observations.config),
        off_share if observations.config.adaptive else None,
    )
    track.keep(judged)
    return judged


def inspect_now(target: Watched, now: float, stale_after: float) -> Insight:
    """``inspect`` of the target's state as of ``now``: the daemon's own check, which logs a
    change of verdict even while nothing scrapes or reads the landing page."""
    snap = target.state.snapshot()
    return inspect(target, snap, snap.fresh_windows(now, stale_after), now, stale_after)


def _judgement(
    target: Watched,
    config: ServerConfig,
    fallback: UpstreamValues | None,
    now: float,
    stale_after: float,
    interleaved: bool = False,
) -> Judgement:
    """The judge's word on the target: its log's stretches; for a target only scraped, the
    scrapes' counted drafts (``VerdictTrack.fold_scrape``); else the upstream gauges that
    stand in for a silent log (their drafts not counted). ``interleaved``: two servers
    write its log (``Case.interleaved``)."""
    evidence = target.state.evidence
    stretches: tuple[Stretch, ...] = evidence.stretches()
    counted = True
    upstream = target.upstream.snapshot() if target.upstream is not None else None
    scraped: tuple[Stretch, ...] = ()
    if upstream is not None and upstream.scraped_at is not None and upstream.values is not None:
        values = upstream.values
        running = values.running_requests
        base = target.baseline.at(running) if target.baseline is not None and running else None
        scraped = target.state.verdict.fold_scrape(upstream.scraped_at, values, base)
    if not target.config.log_files and scraped:
        # Scraped only, its counters counting drafts (vLLM): judged on the rounds they count.
        stretches = scraped
    elif (not stretches or stretches[-1].end < now - stale_after) and fallback is not None:
        running = fallback.running_requests
        base = target.baseline.at(running) if target.baseline is not None and running else None
        off = config.active_steps == 0
        gauge = one_stretch(
            now,
            MIN_WINDOWS,
            None if off else fallback.accept_length,
            None,
            running,
            fallback.gen_throughput,
            base,
            off,
        )
        stretches, counted = (*stretches, gauge), False
    known = target.baseline
    baseline = None if known is None else _speed_baseline(known.kind)
    return judge(
        Case(
            stretches=stretches,
            method=method_of(config, "log" if target.config.log_files else "server"),
            expected_accept_length=target.config.expected_accept_length,
            baseline=baseline,
            pipelined=config.pipelined,
            probes=config.probes,
            counted=counted,
            now=now,
            interleaved=interleaved,
            memo=evidence.memo,
        )
    )


@functools.lru_cache(maxsize=16)
def _speed_baseline(kind: str) -> SpeedBaseline:
    """One object per kind: the run's ``StateMemo`` compares it with the last judgement's at
    every judgement, at once when it is the same object."""
    return SpeedBaseline(kind, "baseline")


def _findings(observations: Observations) -> list[Finding]:
    """The findings, and the speed of a node with drafting off: ``doctor`` and ``report``
    judge that of a run as a verdict, the daemon of its recent windows as this finding."""
    found = evaluate(observations)
    slow = drafting_off_below_baseline(observations)
    if slow is not None:
        found = sorted([*found, slow], key=lambda f: SEVERITY_ORDER[f.severity])
    return found


def _plain_decoding(values: UpstreamValues | None, config: ServerConfig) -> UpstreamValues | None:
    """Adaptive speculation with drafting off (0 steps in force, SGLang's setup gauges): the
    gauges' accept length of 1.00 is plain decoding by design, so, like a log window with
    drafting off, it exports no accept length for the collapse rule to page on."""
    if values is None or config.active_steps != 0:
        return values
    return replace(values, accept_length=None, accept_rate=None, accept_rate_by_position=None)


def _load(
    snap: TargetSnapshot, fresh: Mapping[int | None, LatestDecode], fallback: UpstreamValues | None
) -> tuple[float | None, float | None]:
    """Throughput and running requests now: fresh log windows (summed over DP ranks, each
    logs its own share), else the upstream gauges standing in for them. Without either, the
    newest stale windows still place the baseline, but there is no throughput to compare."""
    tput, running = _totals(fresh.values())
    if tput is None and fallback is not None:
        tput, running = fallback.gen_throughput, fallback.running_requests
    if running is None:
        running = _totals(snap.windows.values())[1]
    return tput, running


def _totals(windows: Iterable[LatestDecode]) -> tuple[float | None, float | None]:
    """Throughput and running requests summed over windows; ``None`` where any lacks it."""
    return node_totals(w.record for w in windows)


def _speed(
    target: Watched, tput: float | None, running: float | None
) -> tuple[float | None, float | None]:
    """The baseline at ``running`` (1 when unknown) and the speedup against it.

    No speedup with nothing running: an idle server's 0 tok/s (SGLang's idle refresh of its
    gauges) says nothing about how fast speculation decodes.
    """
    load = running if running is not None else 1
    if target.baseline is None or not target.baseline.covers(load):
        return None, None  # a learned baseline says nothing of a load it has not seen
    baseline = target.baseline.at(load)
    if tput is None or running == 0 or baseline <= 0:
        return baseline, None
    return baseline, tput / baseline
