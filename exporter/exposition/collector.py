"""The one Collector: renders every target's snapshot into docs/metrics.md's metrics per scrape.

Nothing is stored in prometheus_client metric objects: each scrape reads every target's
snapshot, so a value that went stale simply is not rendered (instead of lingering as if
current), and a scrape never waits on a tailer or an upstream. A target whose inputs have not
changed since its last render is not rendered again (see SpecwatchCollector): a node of many
servers pays for the ones that moved.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Concatenate, ParamSpec

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.analysis.findings import drafts_only_accept_rate, window_accept_rate
from exporter.analysis.judge import STATES
from exporter.analysis.load_bands import BAND_LABELS
from exporter.clock import now as clock_now
from exporter.engines.draft_config import DRAFT_CONFIG_REASONS
from exporter.engines.record import StatsRecord, UpstreamValues, drafting_off
from exporter.engines.server_config import ServerConfig
from exporter.exposition.families import FAMILIES, Columns, Families, P, known, labelled
from exporter.exposition.insight import Insight, inspect
from exporter.exposition.text import filled, header, sample_lines, template
from exporter.exposition.watched import Watched
from exporter.sources.upstream_checks import DROP_REASONS
from exporter.sources.upstream_snapshot import ENDPOINTS, REASONS, UpstreamSnapshot
from exporter.state.requests import NO_REQUESTS, REQUEST_BUCKETS, RequestsSnapshot
from exporter.state.target_state import (
    ACCEPT_LENGTH_BUCKETS,
    SPECULATION_COUNTS,
    LatestDecode,
    TargetSnapshot,
)
from exporter.state.verdict import Verdict

SERVED_MODEL_MAX = 128
Params = ParamSpec("Params")

log = logging.getLogger(__name__)


# Per-window gauges from a record's attributes, after accept_length and cuda_graph, and
# from its ``extra``: each series and the attribute or key it renders.
_WINDOW_FIELDS = (
    ("running_requests", "running_requests"),
    ("queued_requests", "queued_requests"),
    ("token_usage_ratio", "token_usage"),
    ("gen_throughput_tokens_per_second", "gen_throughput"),
)
_WINDOW_EXTRA = (("cap_length", "cap_length"), ("block_accept_length", "block_accept_length"))


# How long a target's render is reused while nothing it reads has changed. Its values are
# re-read on every scrape (the key below); only what the judge derives from the passing of
# time alone (a finding's recent windows ageing out) may lag this long, and a window that goes
# stale ends the reuse at that moment.
REUSE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class TargetView:
    """One target as rendered at ``now``: what the landing page shows of it too."""

    snap: TargetSnapshot
    fresh: dict[int | None, LatestDecode]
    insight: Insight
    now: float


@dataclass(frozen=True, slots=True, eq=False)  # equal only to itself: see renders()
class _Render:
    key: tuple[object, ...]  # everything the render read, compared to reuse it
    now: float
    until: float  # reused before this moment only
    view: TargetView | None  # None: the render failed
    families: Families
    lines: dict[str, str]  # family name -> this target's sample lines
    # family name -> its lines' template (each series' name and labels, written), for the
    # families added to (``Families.columns``): the next render fills it with new values
    templates: dict[str, str]


class SpecwatchCollector(Collector):
    """Renders all targets; safe to call from concurrent scrape threads.

    Each target's render is kept with the inputs it read (its state's snapshot, its
    upstream's published snapshot, its custom series, its baseline) and reused by the next
    scrape that finds the same inputs, before REUSE_SECONDS and before any of its windows or
    upstream values would go stale: a node of many servers re-renders only those whose logs
    or upstreams moved. A target is rendered by one thread at a time; no lock spans targets.

    ``judge_every``: a render takes the target's judgement (its verdict, findings and the
    setup they read) as kept from less than that many seconds before, and judges afresh only
    past it (``insight.inspect``); its values are always read anew. The daemon, which judges
    every target on that interval anyway, sets it; 0 judges at every render. ``prepared``: the
    daemon's count of scrapes prepared ahead (``foresight``), exported with the build.
    """

    def __init__(
        self,
        targets: Sequence[Watched],
        stale_after: float,
        clock: Callable[[], float] = clock_now,
        judge_every: float = 0.0,
        prepared: Callable[[], int] | None = None,
    ) -> None:
        self._targets = targets
        self._prepared = prepared
        self._stale_after = stale_after
        self._clock = clock
        self._judge_every = judge_every
        self._render_errors: Counter[str] = Counter()
        self._errors_lock = threading.Lock()
        self._renders: list[_Render | None] = [None] * len(targets)
        self._locks = [threading.Lock() for _ in targets]
        self._index = {id(target): number for number, target in enumerate(targets)}
        # The newest body: its form and process-wide lines, the renders it holds, its bytes.
        self._body: tuple[tuple[str, str], tuple[_Render, ...], bytes] | None = None

    def describe(self) -> Iterable[Metric]:
        return []  # collect() is cheap but has no fixed shape; skip registration-time checks

    def collect(self) -> Iterator[Metric]:
        families = self._top()
        for render in self._current(self._clock()):
            families.merge(render.families)
        yield from families

    def exposition(self, form: str) -> bytes:
        """The specwatch families in ``form`` (``text`` or ``openmetrics``, without its
        ``# EOF``): each target's lines as last rendered, when still current. Scrapes that
        find every target's render unchanged share one body (10 scrapers of 256 targets at
        once no longer build ten bodies of 1.5 MB)."""
        renders = tuple(self._current(self._clock()))
        top = self._top()
        key = (form, sample_lines(s for name in top.names() for s in top.samples(name)))
        last = self._body
        if last is not None and last[0] == key and last[1] == renders:
            return last[2]
        body = _assemble(form, top, renders).encode()
        self._body = (key, renders, body)
        return body

    def renders(self) -> tuple[object, ...]:
        """Each target's current render: the same objects as before while no target's inputs
        changed (what a page built from ``view`` may be reused on)."""
        return tuple(self._current(self._clock()))

    def view(self, target: Watched) -> TargetView | None:
        """``target`` as last rendered, rendered again if that is not current; None when its
        render fails."""
        number = self._index[id(target)]
        return self._current_one(number, target, self._clock()).view

    def _top(self) -> Families:
        """The process-wide series, before any target's."""
        families = Families()
        families.add("build_info", {"version": __version__}, 1)
        failures: Counter[str] = Counter()
        for target in self._targets:
            failures.update(target.drafts.failure_counts())
        for reason in (r for r in DRAFT_CONFIG_REASONS if r != "absent"):  # a hub id
            families.add("draft_config_errors", {"reason": reason}, failures.get(reason, 0))
        if self._prepared is not None:
            families.add("scrapes_prepared", {}, self._prepared())
        return families

    def _current(self, now: float) -> list[_Render]:
        return [self._current_one(n, t, now) for n, t in enumerate(self._targets)]

    def _current_one(self, number: int, target: Watched, now: float) -> _Render:
        """The newest render of ``target``, or a new one when something it read changed."""
        try:
            snap = target.state.snapshot()
            key = self._key(target, snap)
        except Exception:
            with self._locks[number]:
                return self._failed(number, target, now)
        last = self._renders[number]
        if last is not None and last.now <= now < last.until and last.key == key:
            return last
        with self._locks[number]:  # a render at a time per target: the others wait on it
            last = self._renders[number]
            if last is not None and last.now <= now < last.until and last.key == key:
                return last
            return self._render(number, target, snap, key, now)

    def _key(self, target: Watched, snap: TargetSnapshot) -> tuple[object, ...]:
        """What a render reads besides the clock. Everything else a target holds (its
        evidence, tracker, requests, band speeds) changes only with a line read, which
        changes the snapshot's line count."""
        upstream = target.upstream.snapshot() if target.upstream is not None else None
        rules = target.custom_rules
        custom = None
        if rules is not None:
            custom = (rules.samples(self._stale_after), rules.dropped_counts())
        return (snap, upstream, target.baseline, target.draft, custom)

    def _render(
        self,
        number: int,
        target: Watched,
        snap: TargetSnapshot,
        key: tuple[object, ...],
        now: float,
    ) -> _Render:
        """One target's series, or none: a bug there must not cost the other targets theirs,
        nor show half a target as if it were whole."""
        rendered = Families()
        try:
            view = render_target(rendered, target, snap, now, self._stale_after, self._judge_every)
        except Exception:
            return self._failed(number, target, now)
        until = _reusable_until(target, view, self._stale_after)
        return self._kept(number, target, _Render(key, now, until, view, rendered, {}, {}))

    def _failed(self, number: int, target: Watched, now: float) -> _Render:
        """A render that failed: none of the target's series but its count of failures,
        tried again at the next scrape."""
        with self._errors_lock:
            self._render_errors[target.name] += 1
            first = self._render_errors[target.name] == 1
        # The traceback once; a persistent bug must not flood the log at every scrape.
        log.log(
            logging.ERROR if first else logging.DEBUG,
            "rendering target %s failed; left out of this scrape",
            target.name,
            exc_info=True,
        )
        return self._kept(number, target, _Render((), now, now, None, Families(), {}, {}))

    def _kept(self, number: int, target: Watched, render: _Render) -> _Render:
        """``render`` with its count of failures and its text, as the newest."""
        families = render.families
        errors = self._render_errors[target.name]
        families.add("render_errors", _target_labels(target.name), errors)
        _lines(families, self._renders[number], render.lines, render.templates)
        self._renders[number] = render
        return render


DECLARED = frozenset(P + short for short in FAMILIES)


def _lines(
    rendered: Families, last: _Render | None, lines: dict[str, str], written: dict[str, str]
) -> None:
    """Each family's sample lines into ``lines``. A family a group kept has the group's lines
    (``_grouped``). A family added to whose series (its samples' names and labels) are the
    last render's has that render's lines when its values are too (most of a target's
    families, such as its error counters, change far less often than its windows), else
    that render's template filled with the new values (a live target's counters); any other
    is written afresh. The template of each family added to goes into ``written``, for the
    next render. Columns are compared as lists, and most labels are the same dicts from one
    render to the next (``labelled``), so no Sample is made. Families go in as the render
    holds them: ``_assemble`` puts them in the exported order (user-defined ones are all
    added to, in the order first added)."""
    added = rendered.columns
    kept = rendered.kept
    if kept and not kept.keys().isdisjoint(added):
        # A kept family that others joined, written from all its samples (no renderer does).
        for name, samples in rendered.by_family.items():
            lines[name] = sample_lines(samples)
        return
    for name, (_, text) in kept.items():
        lines[name] = text
    if last is None or not last.templates:  # none, or written whole (above): nothing kept
        last_added: Mapping[str, Columns] = {}
        last_lines: dict[str, str] = {}
        last_templates: dict[str, str] = {}
    else:
        last_added, last_lines, last_templates = last.families.columns, last.lines, last.templates
    for name, columns in added.items():
        names, labels, values = columns
        before = last_added.get(name)
        if before is not None and before[1] == labels and before[0] == names:
            known = last_templates[name]
            lines[name] = last_lines[name] if before[2] == values else filled(known, values)
        else:
            known = template(names, labels)
            lines[name] = filled(known, values)
        written[name] = known


def _assemble(form: str, top: Families, renders: Sequence[_Render]) -> str:
    """The process-wide series and every target's, family by family, in ``form``."""
    chunks: dict[str, list[str]] = {name: [sample_lines(top.samples(name))] for name in top.names()}
    kinds: dict[str, tuple[str, str]] = {}
    held = chunks.get
    for render in renders:
        for name, text in render.lines.items():
            chunk = held(name)
            if chunk is None:
                chunk = chunks[name] = []
                kinds[name] = render.families.kind(name)
            chunk.append(text)
    declared = [P + short for short in FAMILIES if P + short in chunks]
    custom = [name for name in chunks if name not in DECLARED]
    out = []
    for name in (*declared, *custom):
        kind, doc = kinds.get(name) or top.kind(name)
        out.append(header(name, kind, doc, form))
        out += chunks[name]
    return "".join(out)


def judged(target: Watched, now: float, stale_after: float) -> TargetView:
    """``target`` as of ``now``, judged afresh."""
    snap = target.state.snapshot()
    fresh = snap.fresh_windows(now, stale_after)
    return TargetView(snap, fresh, inspect(target, snap, fresh, now, stale_after), now)


def _reusable_until(target: Watched, view: TargetView, stale_after: float) -> float:
    """The moment a render of ``view`` stops being current: REUSE_SECONDS on, or sooner when
    one of its windows goes stale or its upstream values stop standing in for the log."""
    until = view.now + REUSE_SECONDS
    for window in view.snap.windows.values():
        expires = window.observed_at + stale_after
        if expires > view.now:
            until = min(until, expires)
    upstream = view.insight.upstream
    if upstream is not None and upstream.scraped_at is not None:
        expires = upstream.scraped_at + max(stale_after, 2 * target.config.scrape_interval)
        if expires > view.now:
            until = min(until, expires)
    return until


def render_target(
    out: Families,
    target: Watched,
    snap: TargetSnapshot,
    now: float,
    stale_after: float,
    judge_every: float = 0.0,
) -> TargetView:
    """``target``'s series into ``out``, and what they were rendered from; its judgement
    reused from less than ``judge_every`` seconds before (see ``SpecwatchCollector``)."""
    base = _target_labels(target.name)
    fresh = snap.fresh_windows(now, stale_after)
    requests = target.state.requests.snapshot(now)
    insight = inspect(target, snap, fresh, now, stale_after, requests, judge_every)
    engine = engine_of(target, snap, insight)
    model = served_model(target, insight)
    _render_windows(out, base, fresh)
    _render_speed(out, target, base, insight)
    _render_bands(out, target, labelled(base, "served_model", model))
    values = (
        engine,
        model,
        insight.config,
        snap.adaptive_step_changes,
        snap.drafting_off_windows,
        insight.drafting_off_share,
        *[(finding.code, finding.severity) for finding in insight.findings],
    )
    slot = ("setup", target.name)
    _grouped(out, slot, values, _render_setup, base, engine, model, insight, snap)
    _render_counters(out, base, snap)
    _render_requests(out, base, requests)
    _render_speculation_counts(out, target, base, snap, insight)
    _render_log_health(out, base, snap)
    _render_insight(out, target, base, fresh, insight, stale_after)
    return TargetView(snap, fresh, insight, now)


@functools.lru_cache(maxsize=4096)
def _target_labels(name: str) -> dict[str, str]:
    """A target's own label, the same dict from one render to the next (never changed: every
    series with more labels copies it), so comparing a render's samples with the last
    render's finds most labels equal by identity."""
    return known({"target": name})


def engine_of(target: Watched, snap: TargetSnapshot, insight: Insight) -> str:
    """The configured engine, else the one the log or ``/metrics`` revealed, else unknown."""
    if target.config.engine != "auto":
        return target.config.engine
    upstream = insight.upstream.values if insight.upstream is not None else None
    return snap.engine or (upstream.engine if upstream is not None else None) or "unknown"


def served_model(target: Watched, insight: Insight) -> str:
    """The configured name, else the server's own (its log or ``/server_info``, then the
    ``model_name`` of its ``/metrics``), bounded: a path keeps its last two components (a hub id
    or model folder, as for the draft), at most ``SERVED_MODEL_MAX`` printable characters."""
    upstream = insight.upstream.values if insight.upstream is not None else None
    name = (
        target.config.served_model
        or insight.config.served_model
        or (upstream.served_model if upstream is not None else None)
        or ""
    )
    if name.startswith("/"):
        name = "/".join(name.rstrip("/").split("/")[-2:])
    if not name.isprintable():
        name = "".join(c for c in name if c.isprintable())
    return name[:SERVED_MODEL_MAX]


def _render_speculation_counts(
    out: Families, target: Watched, base: dict[str, str], snap: TargetSnapshot, insight: Insight
) -> None:
    """The engine's counters from one source for good: ``/metrics`` when configured (absent
    while it is down), else the log's sums; switching would make the counters jump. The
    per-position counts are the engine's alone (a log gives ratios, not counts)."""
    positions: Sequence[float] = ()
    if target.upstream is not None and target.upstream.metrics_url is not None:
        values = insight.upstream.values if insight.upstream is not None else None
        if values is None:
            return
        counts = {
            "drafts": values.drafts_total,
            "draft_tokens": values.draft_tokens_total,
            "accepted_tokens": values.accepted_tokens_total,
        }
        positions = values.accepted_by_position or ()
    else:
        counts = {name: snap.speculation.get(name) for name in SPECULATION_COUNTS}
    for short, value in counts.items():
        if value is not None:
            out.add(short, base, value)
    for position, accepted in enumerate(positions):
        out.add("position_accepted_tokens", labelled(base, "position", str(position)), accepted)


def _render_positions(
    out: Families, labels: dict[str, str], positions: Sequence[float] | None
) -> None:
    for position, rate in enumerate(positions or ()):
        out.add("position_accept_ratio", labelled(labels, "position", str(position)), rate)


def _window_labels(base: dict[str, str], dp_rank: int | None) -> dict[str, str]:
    return base if dp_rank is None else labelled(base, "dp_rank", str(dp_rank))


def _render_windows(
    out: Families, base: dict[str, str], fresh: dict[int | None, LatestDecode]
) -> None:
    windows: Iterable[tuple[int | None, LatestDecode]] = fresh.items()
    if len(fresh) > 1:  # the rankless window first, then by rank
        windows = sorted(windows, key=lambda kv: (kv[0] is not None, kv[0]))
    add = out.add
    for dp_rank, window in windows:
        labels = _window_labels(base, dp_rank)
        record = window.record
        if record.accept_length is not None and not drafting_off(record):
            add("accept_length", labels, record.accept_length)
        if record.cuda_graph is not None:
            add("cuda_graph", labels, float(record.cuda_graph))
        for short, field in _WINDOW_FIELDS:
            value = getattr(record, field)
            if value is not None:
                add(short, labels, value)
        extra = record.extra
        if extra:
            for short, key in _WINDOW_EXTRA:
                value = extra.get(key)
                if value is not None:
                    add(short, labels, value)
        counts = record.draft_counts
        if counts is not None:
            _render_positions(out, labels, counts.accept_rate_by_position)


def _render_speed(out: Families, target: Watched, base: dict[str, str], insight: Insight) -> None:
    expected = target.config.expected_accept_length
    if expected is not None:
        out.add("expected_accept_length", base, expected)
    if insight.accept_floor is not None:
        out.add("accept_length_floor", base, insight.accept_floor)
    if insight.speedup is not None:
        out.add("speedup", base, insight.speedup)
        # The old name, kept one release so that queries of it survive the upgrade.
        out.add("speedup_ratio", base, insight.speedup)
    if target.baseline is not None and insight.baseline_tok_s is not None:
        source = labelled(base, "source", target.baseline.kind)
        out.add("baseline_gen_throughput_tokens_per_second", source, insight.baseline_tok_s)


def _render_bands(out: Families, target: Watched, labels: dict[str, str]) -> None:
    """Throughput by load band and mode, for baselines learned across the fleet."""
    labels = labelled(labels, "hardware", target.config.hardware or "")
    for mode, band, windows, tok_s_sum in target.state.band_sums():
        series = labelled(labels, "band", BAND_LABELS[band], "mode", mode)
        out.add_summary("band_gen_throughput_tokens_per_second", series, windows, tok_s_sum)


def _render_setup(
    out: Families,
    base: dict[str, str],
    engine: str,
    model: str,
    insight: Insight,
    snap: TargetSnapshot,
) -> None:
    """What the target is, the speculative setup in force and how adaptive speculation has
    moved it, and the findings: what changes with the server's setup or its judgement only."""
    out.add("target_info", {**base, "engine": engine, "served_model": model}, 1)
    config = insight.config
    if config.adaptive or snap.adaptive_step_changes or snap.drafting_off_windows:
        out.add("adaptive_step_changes", base, snap.adaptive_step_changes)
        out.add("drafting_off_windows", base, snap.drafting_off_windows)
    _add_known(
        out,
        base,
        (
            ("speculative_steps", config.steps_now),
            ("speculative_draft_tokens", config.draft_tokens_now),
            ("drafting_off_ratio", insight.drafting_off_share),
        ),
    )
    if config.max_running_requests is not None:
        out.add("max_running_requests", base, config.max_running_requests)
    spec_labels = speculative_labels(config)
    if any(spec_labels.values()):  # nothing known yet: no series, rather than one of blanks
        out.add("speculative_info", {**base, **spec_labels}, 1)
    for finding in insight.findings:
        out.add("finding", {**base, "code": finding.code, "severity": finding.severity}, 1)


def _add_known(
    out: Families, base: dict[str, str], values: Iterable[tuple[str, float | None]]
) -> None:
    """One series per known value; an unknown one is absent, never 0."""
    for short, value in values:
        if value is not None:
            out.add(short, base, value)


def _render_counters(out: Families, base: dict[str, str], snap: TargetSnapshot) -> None:
    if snap.last_decode_at is not None:
        out.add("last_decode_timestamp_seconds", base, snap.last_decode_at)
    if snap.ended_at is not None:
        out.add("server_ended_timestamp_seconds", base, snap.ended_at)
    for graph in (True, False):
        labels = labelled(base, "cuda_graph", "true" if graph else "false")
        out.add("decode_windows", labels, snap.decode_windows[graph])
    out.add("generated_tokens", base, snap.generated_tokens)
    for speed, count in (snap.windows_vs_baseline or {}).items():
        out.add("windows_vs_baseline", labelled(base, "speed", speed), count)
    counts = (*snap.accept_length_buckets, snap.accept_length_count)
    out.add_buckets(
        "accept_length_windows", base, _ACCEPT_LENGTH_LE, counts, snap.accept_length_sum
    )


def _render_requests(out: Families, base: dict[str, str], requests: RequestsSnapshot) -> None:
    """The finished requests' distribution, once the log has shown one: most servers do not
    log their requests, and their scrapes carry none of these series."""
    if not requests.finished:
        return
    out.add("requests_finished", base, requests.finished)
    out.add("requests_clipped", base, requests.clipped)
    classes = requests.classes or {None: NO_REQUESTS}
    for name, counts in sorted(classes.items(), key=lambda kv: kv[0] or ""):
        labels = base if name is None else labelled(base, "traffic_class", name)
        out.add("requests_speculative", labels, counts.count)
        out.add("requests_no_draft_accepted", labels, counts.no_draft)
        cumulative = (*counts.buckets, counts.count)
        out.add_buckets("request_accept_length", labels, _REQUEST_LE, cumulative, counts.total)


# Groups of a target's samples that rest on a few plain values only (its setup and findings,
# its verdict, its upstream's health, its log's troubles): the same samples and lines from
# one render to the next while the values hold, which a render neither builds, compares nor
# writes again (``_lines`` takes the group's lines). One slot per group and target, holding
# its newest values only, so what is kept is what the renders show; cleared when full, as
# targets come and go. A family is written by one group alone.
_Group = tuple[tuple[str, Columns, str], ...]  # each family's samples and lines
_GROUPS: dict[tuple[str, str], tuple[tuple[object, ...], _Group]] = {}
_GROUPS_MAX = 4096


def _grouped(
    out: Families,
    slot: tuple[str, str],
    values: tuple[object, ...],
    render: Callable[Concatenate[Families, Params], None],
    *args: Params.args,
    **kwargs: Params.kwargs,
) -> None:
    """What ``render`` adds (given ``args``), kept in ``slot`` (the group and the target's
    name) while ``values`` hold: everything it reads must be in them."""
    kept = _GROUPS.get(slot)
    known: _Group
    if kept is not None and kept[0] == values:
        known = kept[1]
    else:
        group = Families()
        render(group, *args, **kwargs)
        known = tuple(
            (name, columns, filled(template(columns[0], columns[1]), columns[2]))
            for name, columns in group.columns.items()
        )
        if len(_GROUPS) >= _GROUPS_MAX and slot not in _GROUPS:
            _GROUPS.clear()
        _GROUPS[slot] = (values, known)
    out.keep(known)


def _le(bound: float) -> str:
    return repr(float(bound))


# The histograms' ``le`` label values, written once, +Inf last.
_ACCEPT_LENGTH_LE = (*map(_le, ACCEPT_LENGTH_BUCKETS), "+Inf")
_REQUEST_LE = (*map(_le, REQUEST_BUCKETS), "+Inf")


def _render_log_health(out: Families, base: dict[str, str], snap: TargetSnapshot) -> None:
    out.add("log_lines", base, snap.log_lines)
    for kind, count in sorted(snap.stats_lines.items()):
        out.add("log_stats_lines", labelled(base, "kind", kind), count)
    values = (  # the snapshot's dicts are its own copies, and written sorted
        snap.unrecognized,
        snap.rotations,
        snap.truncations,
        snap.skipped,
        snap.chunk_fallbacks,
        snap.read_errors,
        snap.log_sources,
        snap.folded_dp_ranks,
    )
    slot = ("log", base["target"])
    _grouped(out, slot, values, _render_log_troubles, base, snap)


def _render_log_troubles(out: Families, base: dict[str, str], snap: TargetSnapshot) -> None:
    """What a healthy log's reading leaves as it was: its skipped and unreadable lines,
    rotations, the state of each path."""
    out.add("log_unrecognized_stats_lines", base, snap.unrecognized)
    out.add("log_rotations", base, snap.rotations)
    out.add("log_truncations", base, snap.truncations)
    for reason in sorted({"too_long", "invalid_utf8", "partial_discarded", *snap.skipped}):
        labels = {**base, "reason": reason}
        out.add("log_skipped_lines", labels, snap.skipped.get(reason, 0))
    for reason, count in sorted(snap.chunk_fallbacks.items()):
        out.add("log_chunk_fallbacks", {**base, "reason": reason}, count)
    out.add("log_read_errors", base, snap.read_errors)
    for path, reason in sorted(snap.log_sources.items()):
        labels = {**base, "path": path, "reason": reason}
        out.add("log_source_up", labels, 1 if reason == "ok" else 0)
    out.add("folded_dp_ranks", base, snap.folded_dp_ranks)


# Upstream gauges that stand in for the log's window gauges, only while no log window is fresh:
# the two sources never export the same series at once.
UPSTREAM_GAUGES: tuple[tuple[str, Callable[[UpstreamValues], float | None]], ...] = (
    ("accept_length", lambda v: v.accept_length),
    ("running_requests", lambda v: v.running_requests),
    ("queued_requests", lambda v: v.queued_requests),
    ("token_usage_ratio", lambda v: v.token_usage),
    ("gen_throughput_tokens_per_second", lambda v: v.gen_throughput),
)
DRAFT_MODEL_MAX = 64


def _render_insight(
    out: Families,
    target: Watched,
    base: dict[str, str],
    fresh: dict[int | None, LatestDecode],
    insight: Insight,
    stale_after: float,
) -> None:
    """Accept ratios, upstream values and health, the verdict, and custom rule series."""
    tokens = insight.config.draft_tokens_now
    for dp_rank, window in fresh.items():
        if drafting_off(window.record):
            continue
        # A window the log did not stamp with a setup (no start-up lines read) is fresh, so
        # it is the run that /server_info describes now.
        stamped = window.draft_tokens if window.draft_tokens is not None else tokens
        exact = _unrounded(window.record, dp_rank, insight)
        rate = (
            window_accept_rate(window.record, stamped)
            if exact is None
            else drafts_only_accept_rate(exact, stamped)
        )
        if rate is not None:
            out.add("accept_ratio", _window_labels(base, dp_rank), rate)
    if insight.fallback is not None:
        _render_upstream_values(out, base, insight.fallback, tokens)
    verdict = insight.verdict
    if verdict is not None:
        values = (verdict.state, verdict.since)
        slot = ("verdict", base["target"])
        _grouped(out, slot, values, _render_verdict, base, verdict)
    _render_upstream_health(out, base, insight)
    _render_custom(out, base, target, stale_after)


# SGLang's log prints the accept length with two decimals: a gauge within half of the last
# one of it is the same window's value.
_ROUNDING = 0.005 + 1e-9


def _unrounded(record: StatsRecord, dp_rank: int | None, insight: Insight) -> float | None:
    """The server's unrounded accept length of the window ``record`` logged: its ``/metrics``
    gauge for that DP rank (the only rank's, for a log without DP ranks) when it rounds to
    the logged value, else None (the gauge is of another window)."""
    values = insight.upstream.values if insight.upstream is not None else None
    if values is None or record.accept_length is None:
        return None
    gauges = dict(values.accept_length_by_rank)
    if dp_rank is None and len(gauges) == 1:
        gauge: float | None = next(iter(gauges.values()))
    else:
        gauge = gauges.get("" if dp_rank is None else str(dp_rank))
    if gauge is None or abs(gauge - record.accept_length) > _ROUNDING:
        return None
    return gauge


def _render_upstream_values(
    out: Families, base: dict[str, str], values: UpstreamValues, tokens: int | None
) -> None:
    for short, getter in UPSTREAM_GAUGES:
        value = getter(values)
        if value is not None:
            out.add(short, base, value)
    rate = values.accept_rate
    if rate is None:
        rate = drafts_only_accept_rate(values.accept_length, tokens)
    if rate is not None:
        out.add("accept_ratio", base, rate)
    _render_positions(out, base, values.accept_rate_by_position)


def speculative_labels(config: ServerConfig) -> dict[str, str]:
    """Bounded label values: the draft path is cut to its last two components (a hub id or
    model folder), so machine-specific mount points do not become label values."""
    draft = "/".join((config.draft_model_path or "").rstrip("/").split("/")[-2:])

    def text(value: object) -> str:
        return "" if value is None else str(value)

    return {
        "algorithm": text(config.algorithm),
        "draft_model": draft[-DRAFT_MODEL_MAX:],
        "draft_architecture": text(config.draft_architecture),
        "num_steps": text(config.num_steps),
        "eagle_topk": text(config.eagle_topk),
        "num_draft_tokens": text(config.num_draft_tokens),
    }


def _render_verdict(out: Families, base: dict[str, str], verdict: Verdict) -> None:
    for state in STATES:
        out.add("verdict", {**base, "state": state}, float(state == verdict.state))
    out.add("verdict_since_timestamp_seconds", base, verdict.since)


def _render_upstream_health(out: Families, base: dict[str, str], insight: Insight) -> None:
    snap = insight.upstream
    if snap is None:
        return
    for endpoint, status in snap.endpoints.items():
        labels = labelled(base, "endpoint", endpoint)
        out.add("upstream_scrape_duration_seconds", labels, status.duration_seconds)
    # The counts' mappings are the published snapshot's own, never changed (and written in
    # a fixed order, whatever theirs).
    values = (
        *[(endpoint, status.up) for endpoint, status in snap.endpoints.items()],
        snap.errors,
        snap.dropped,
    )
    slot = ("upstream", base["target"])
    _grouped(out, slot, values, _render_upstream_counts, base, snap)


def _render_upstream_counts(out: Families, base: dict[str, str], snap: UpstreamSnapshot) -> None:
    """Whether each endpoint answered, its failures by reason and the dropped samples, each
    from zero."""
    for endpoint, status in snap.endpoints.items():
        out.add("upstream_up", {**base, "endpoint": endpoint}, 1 if status.up else 0)
    for endpoint in ENDPOINTS:
        if endpoint not in snap.endpoints:
            continue
        for reason in REASONS:  # every reason from zero, so rate() and increase() work
            labels = {**base, "endpoint": endpoint, "reason": reason}
            count = snap.errors.get((endpoint, reason), 0)
            out.add("upstream_scrape_errors", labels, count)
    if "metrics" in snap.endpoints:
        for reason in DROP_REASONS:
            labels = {**base, "reason": reason}
            out.add("upstream_dropped_samples", labels, snap.dropped.get(reason, 0))


def _render_custom(
    out: Families, base: dict[str, str], target: Watched, stale_after: float
) -> None:
    rules = target.custom_rules
    if rules is None:
        return
    for sample in rules.samples(stale_after):
        out.add_custom(sample, {**base, **dict(sample.labels)})
    for (rule, reason), count in sorted(rules.dropped_counts().items()):
        labels = {**base, "rule": rule, "reason": reason}
        out.add("custom_rule_dropped_lines", labels, count)
