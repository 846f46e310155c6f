"""The one Collector: renders every target's snapshot into docs/metrics.md's metrics per scrape.

Nothing is stored in prometheus_client metric objects: each scrape builds fresh families from
snapshots, so a value that went stale simply is not rendered (instead of lingering as if
current), and a scrape never waits on a tailer or an upstream.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.analysis.findings import drafts_only_accept_rate, window_accept_rate
from exporter.engines.record import UpstreamValues, drafting_off
from exporter.engines.server_config import (
    DRAFT_CONFIG_REASONS,
    ServerConfig,
    draft_config_failures,
)
from exporter.exposition.insight import Insight, inspect
from exporter.exposition.watched import Watched
from exporter.parse.custom_rules import CustomSample
from exporter.sources.upstream import ENDPOINTS, REASONS
from exporter.sources.upstream_checks import DROP_REASONS
from exporter.state.requests import NO_REQUESTS, REQUEST_BUCKETS, RequestsSnapshot
from exporter.state.target_state import (
    ACCEPT_LENGTH_BUCKETS,
    SPECULATION_COUNTS,
    LatestDecode,
    TargetSnapshot,
)

P = "specwatch_"
SERVED_MODEL_MAX = 128

log = logging.getLogger(__name__)

# name -> (type, help). Declared once so every family has one help text and one type.
FAMILIES: dict[str, tuple[str, str]] = {
    "build_info": ("gauge", "specwatch version, always 1."),
    "target_info": (
        "gauge",
        "One series per configured target, always 1; its engine and served model.",
    ),
    "draft_config_errors": (
        "counter",
        "Draft model paths named by a server (log or /server_info) whose config.json could "
        "not be read here, once per path, by reason.",
    ),
    "accept_length": ("gauge", "Mean accepted tokens per verify round in the newest window."),
    "accept_ratio": (
        "gauge",
        "Accepted drafts per proposed draft (0-1), derived by specwatch as "
        "(accept_length-1)/(num_draft_tokens-1); SGLang's own rate changed meaning in 2026.",
    ),
    "cuda_graph": ("gauge", "1 if the newest decode window ran with a CUDA (or CPU/NPU) graph."),
    "running_requests": ("gauge", "Running requests in the newest decode window."),
    "cap_length": (
        "gauge",
        "Mean verify window per round scheduled by confidence, bonus slot included (SGLang "
        "DSPARK's `cap len`), in the newest decode window.",
    ),
    "block_accept_length": (
        "gauge",
        "Mean uncapped full-block accept length per round (SGLang's `block accept len`, exact "
        "in DSPARK's cap-accept mode), in the newest decode window.",
    ),
    "queued_requests": ("gauge", "Queued requests in the newest decode window."),
    "token_usage_ratio": ("gauge", "KV cache token usage (0-1) in the newest decode window."),
    "gen_throughput_tokens_per_second": ("gauge", "Generation throughput of the newest window."),
    "position_accept_ratio": (
        "gauge",
        "Share (0-1) of draft rounds whose drafts up to this position (0 = first) were all "
        "accepted, in the newest window (vLLM's per-position acceptance).",
    ),
    "drafts": ("counter", "Draft rounds (one per request and verify step with drafts)."),
    "draft_tokens": ("counter", "Draft tokens proposed."),
    "accepted_tokens": (
        "counter",
        "Draft tokens accepted (the target's own token excluded); accept length is "
        "1 + rate(accepted) / rate(drafts).",
    ),
    "position_accepted_tokens": (
        "counter",
        "Draft tokens accepted at this position (0 = first), from the engine's per-position "
        "counters (vLLM's schema, TensorRT-LLM); rate() over a fleet or many ranks weighs "
        "each by its drafts, as the per-window ratio cannot.",
    ),
    "speedup_ratio": (
        "gauge",
        "Generation throughput divided by the baseline at the current running requests.",
    ),
    "last_decode_timestamp_seconds": ("gauge", "When specwatch last saw a decode stats line."),
    "decode_windows": ("counter", "Decode stats windows seen, by CUDA-graph state."),
    "generated_tokens": (
        "counter",
        "Tokens generated, the logged throughput of each node moment integrated over the "
        "log's own time (gaps over 60 s count nothing).",
    ),
    "windows_vs_baseline": (
        "counter",
        "Node decode moments by speed against the baseline at their running requests: "
        "at_or_below or above; only with a baseline.",
    ),
    "accept_length_windows": ("histogram", "Per-window accept length."),
    "request_accept_length": (
        "histogram",
        "Accept length of each finished speculative request (SGLang --log-requests), by "
        "traffic_class when request_label_header is set.",
    ),
    "requests_finished": (
        "counter",
        "Finished requests read from the request log, with speculation figures or without.",
    ),
    "requests_speculative": (
        "counter",
        "Finished requests with speculation figures (at least one verify round).",
    ),
    "requests_no_draft_accepted": (
        "counter",
        "Finished requests that accepted no draft token in at least 8 verify rounds.",
    ),
    "requests_clipped": (
        "counter",
        "Finished requests read from a line over max_line_bytes, of which only the head and "
        "tail were read (the line also counts as skipped, too_long).",
    ),
    "baseline_gen_throughput_tokens_per_second": (
        "gauge",
        "Throughput without speculation at the current running requests (configured).",
    ),
    "expected_accept_length": ("gauge", "Accept length this drafter should reach (configured)."),
    "speculative_steps": (
        "gauge",
        "Draft steps in force (adaptive speculation's newest choice, else the configured "
        "count); 0 while adaptive has drafting off.",
    ),
    "speculative_draft_tokens": ("gauge", "Verified positions per round in force."),
    "adaptive_step_changes": (
        "counter",
        "Times adaptive speculation changed the draft steps (its 'Switch adaptive runtime "
        "state' and 'Adaptive spec params updated' lines).",
    ),
    "drafting_off_windows": (
        "counter",
        "Decode windows adaptive speculation ran with drafting off; they carry no accept length.",
    ),
    "drafting_off_ratio": (
        "gauge",
        "Share (0-1) of recent decode windows with drafting off (adaptive speculation).",
    ),
    "accept_length_floor": (
        "gauge",
        "Accept length below which this drafter counts as low, by its algorithm and draft "
        "steps (docs/metrics.md, Algorithms); absent while accept length is not judged.",
    ),
    "max_running_requests": (
        "gauge",
        "The server's cap on running requests per scheduler (per DP rank with DP attention), "
        "from its startup log or /server_info.",
    ),
    "speculative_info": (
        "gauge",
        "Speculative decoding configuration of the server (log, /server_info, draft config); 1.",
    ),
    "finding": (
        "gauge",
        "1 for each active finding (codes in docs/metrics.md, Findings); absent otherwise.",
    ),
    "upstream_up": ("gauge", "1 if the newest scrape of the server's endpoint succeeded."),
    "upstream_scrape_duration_seconds": ("gauge", "Duration of the newest upstream scrape."),
    "upstream_scrape_errors": ("counter", "Failed upstream scrapes, by endpoint and reason."),
    "upstream_dropped_samples": (
        "counter",
        "Samples of the server's /metrics that specwatch reads but cannot be true, dropped: "
        "non_finite, negative, out_of_range (a 0-1 share above 1, an impossible accept "
        "length) or duplicate (every copy of a series given twice).",
    ),
    "custom_rule_dropped_lines": (
        "counter",
        "Lines a custom rule matched but did not export (series_limit, bad_value), or skipped "
        "after it was disabled for exceeding its CPU budget (over_budget).",
    ),
    "log_source_up": (
        "gauge",
        "1 while a configured log path is followed; 0 with the reason it is not: waiting (not "
        "there yet, within the grace period), missing, directory, not_regular, unreadable, stuck.",
    ),
    "log_lines": ("counter", "Log lines read."),
    "log_stats_lines": ("counter", "Scheduler stats lines parsed, by kind."),
    "log_unrecognized_stats_lines": (
        "counter",
        "Lines that look like stats lines but could not be parsed (format drift).",
    ),
    "log_rotations": ("counter", "Log file rotations (rename+create, delete+recreate)."),
    "log_truncations": ("counter", "Log file truncations (copytruncate)."),
    "log_skipped_lines": ("counter", "Log lines skipped, by reason."),
    "log_chunk_fallbacks": (
        "counter",
        "Long batches of log lines read line by line instead of whole, by reason (slower, "
        "same result).",
    ),
    "log_read_errors": ("counter", "Errors reading the log (retried on the next poll)."),
    "folded_dp_ranks": (
        "gauge",
        "DP ranks past max_dp_ranks: counted in this target's totals, without per-rank series.",
    ),
    "render_errors": (
        "counter",
        "Failed renders of a target, whose series those scrapes lack (a specwatch bug; see log).",
    ),
}

# Per-window gauges and the record attribute each renders.
WINDOW_GAUGES: tuple[tuple[str, Callable[[LatestDecode], float | None]], ...] = (
    ("accept_length", lambda w: None if drafting_off(w.record) else w.record.accept_length),
    ("cuda_graph", lambda w: None if w.record.cuda_graph is None else float(w.record.cuda_graph)),
    ("running_requests", lambda w: w.record.running_requests),
    ("queued_requests", lambda w: w.record.queued_requests),
    ("token_usage_ratio", lambda w: w.record.token_usage),
    ("gen_throughput_tokens_per_second", lambda w: w.record.gen_throughput),
    ("cap_length", lambda w: w.record.extra.get("cap_length")),
    ("block_accept_length", lambda w: w.record.extra.get("block_accept_length")),
)


# The prometheus_client family that writes a sample of each type (a counter's ``_total``).
_SCALAR: dict[str, type[CounterMetricFamily] | type[GaugeMetricFamily]] = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
}


class Families:
    """Lazily created metric families keyed by short name, yielded in declaration order.

    A series' label names vary within a family (``dp_rank`` only where ranks are logged), and
    prometheus_client's families fix them, so each series is written by a family of its own
    and its samples are appended, in order, to the family kept under its name.
    """

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._custom: dict[str, Metric] = {}

    def add(self, short: str, labels: dict[str, str], value: float) -> None:
        """One series of a declared gauge or counter."""
        kind, doc = FAMILIES[short]
        _keep(self._metrics, short, _scalar(kind, P + short, doc, labels, value))

    def add_histogram(
        self,
        short: str,
        labels: dict[str, str],
        buckets: Sequence[tuple[str, float]],
        sum_value: float,
    ) -> None:
        """One series of a declared histogram; ``buckets`` are cumulative and end with +Inf."""
        _, doc = FAMILIES[short]
        family = HistogramMetricFamily(P + short, doc, labels=list(labels))
        family.add_metric(_label_values(labels), buckets, sum_value)
        _keep(self._metrics, short, family)

    def add_custom(self, sample: CustomSample, labels: dict[str, str]) -> None:
        """A user-defined ``specwatch_custom_*`` series (names validated at start)."""
        family = _scalar(sample.type, sample.name, sample.help, labels, sample.value)
        _keep(self._custom, sample.name, family)

    def merge(self, other: Families) -> None:
        """Append ``other``'s samples, family by family (one target's render into the scrape)."""
        for mine, theirs in ((self._metrics, other._metrics), (self._custom, other._custom)):
            for name, metric in theirs.items():
                _keep(mine, name, metric)

    def __iter__(self) -> Iterator[Metric]:
        declared = (self._metrics[k] for k in FAMILIES if k in self._metrics)
        return itertools.chain(declared, self._custom.values())


LABEL_VALUE_MAX = 128
"""Longest label value exported, in characters. Values come from the server (``/server_info``,
its log) and the user's rules, any of which can name megabytes; a longer one is cut to 119
characters plus ``~`` and 8 hex digits of its hash, so two long values stay two series."""


def bounded(value: str) -> str:
    """``value`` as a label can carry it: at most LABEL_VALUE_MAX characters of UTF-8 (a lone
    surrogate from a JSON string would make the whole exposition fail to encode)."""
    if len(value) <= LABEL_VALUE_MAX and value.isascii():
        return value
    text = value.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= LABEL_VALUE_MAX:
        return text
    digest = hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
    return f"{text[: LABEL_VALUE_MAX - 9]}~{digest}"


def _label_values(labels: dict[str, str]) -> list[str]:
    return [bounded(value) for value in labels.values()]


def _scalar(kind: str, name: str, doc: str, labels: dict[str, str], value: float) -> Metric:
    family = _SCALAR[kind](name, doc, labels=list(labels))
    family.add_metric(_label_values(labels), value)
    return family


def _keep(kept: dict[str, Metric], name: str, family: Metric) -> None:
    """Keep ``family`` under ``name``, or append its samples to the family already kept."""
    if name in kept:
        kept[name].samples.extend(family.samples)
    else:
        kept[name] = family


class SpecwatchCollector(Collector):
    """Renders all targets; safe to call from concurrent scrape threads."""

    def __init__(
        self,
        targets: Sequence[Watched],
        stale_after: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._targets = targets
        self._stale_after = stale_after
        self._clock = clock
        self._render_errors: Counter[str] = Counter()
        self._errors_lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # collect() is cheap but has no fixed shape; skip registration-time checks

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        families = Families()
        families.add("build_info", {"version": __version__}, 1)
        failures = draft_config_failures()
        for reason in (r for r in DRAFT_CONFIG_REASONS if r != "absent"):  # a hub id
            families.add("draft_config_errors", {"reason": reason}, failures.get(reason, 0))
        for target in self._targets:
            families.merge(self._render_guarded(target, now))
            failed = self._render_errors[target.name]
            families.add("render_errors", {"target": target.name}, failed)
        yield from families

    def _render_guarded(self, target: Watched, now: float) -> Families:
        """One target's series, or none: a bug there must not cost the other targets theirs,
        nor show half a target as if it were whole."""
        rendered = Families()
        try:
            render_target(rendered, target, target.state.snapshot(), now, self._stale_after)
        except Exception:
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
            return Families()
        return rendered


def render_target(
    out: Families, target: Watched, snap: TargetSnapshot, now: float, stale_after: float
) -> None:
    base = {"target": target.name}
    fresh = snap.fresh_windows(now, stale_after)
    insight = inspect(target, snap, fresh, now, stale_after)
    engine = engine_of(target, snap, insight)
    model = served_model(target, insight)
    out.add("target_info", {**base, "engine": engine, "served_model": model}, 1)
    _render_windows(out, base, fresh)
    _render_speed(out, target, base, insight)
    _render_setup(out, base, insight, snap)
    _render_counters(out, base, snap)
    _render_requests(out, base, target.state.requests.snapshot(now))
    _render_speculation_counts(out, target, base, snap, insight)
    _render_log_health(out, base, snap)
    _render_insight(out, target, base, fresh, insight, stale_after)


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
    return "".join(c for c in name if c.isprintable())[:SERVED_MODEL_MAX]


def _render_speculation_counts(
    out: Families, target: Watched, base: dict[str, str], snap: TargetSnapshot, insight: Insight
) -> None:
    """The engine's counters from one source for good: ``/metrics`` when configured (absent
    while it is down), else the log's sums; switching would make the counters jump. The
    per-position counts are the engine's alone (a log gives ratios, not counts)."""
    positions: Sequence[float] = ()
    if target.config.metrics_url:
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
        out.add("position_accepted_tokens", {**base, "position": str(position)}, accepted)


def _render_positions(
    out: Families, labels: dict[str, str], positions: Sequence[float] | None
) -> None:
    for position, rate in enumerate(positions or ()):
        out.add("position_accept_ratio", {**labels, "position": str(position)}, rate)


def _window_labels(base: dict[str, str], dp_rank: int | None) -> dict[str, str]:
    return base if dp_rank is None else {**base, "dp_rank": str(dp_rank)}


def _render_windows(
    out: Families, base: dict[str, str], fresh: dict[int | None, LatestDecode]
) -> None:
    for dp_rank, window in sorted(fresh.items(), key=lambda kv: (kv[0] is not None, kv[0])):
        labels = _window_labels(base, dp_rank)
        for short, getter in WINDOW_GAUGES:
            value = getter(window)
            if value is not None:
                out.add(short, labels, value)
        counts = window.record.draft_counts
        if counts is not None:
            _render_positions(out, labels, counts.accept_rate_by_position)


def _render_speed(out: Families, target: Watched, base: dict[str, str], insight: Insight) -> None:
    _add_known(
        out,
        base,
        (
            ("expected_accept_length", target.config.expected_accept_length),
            ("accept_length_floor", insight.accept_floor),
            ("baseline_gen_throughput_tokens_per_second", insight.baseline_tok_s),
            ("speedup_ratio", insight.speedup),
        ),
    )


def _render_setup(
    out: Families, base: dict[str, str], insight: Insight, snap: TargetSnapshot
) -> None:
    """The speculative setup in force, and how adaptive speculation has moved it."""
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
    for graph in (True, False):
        labels = {**base, "cuda_graph": "true" if graph else "false"}
        out.add("decode_windows", labels, snap.decode_windows[graph])
    out.add("generated_tokens", base, snap.generated_tokens)
    for speed, count in (snap.windows_vs_baseline or {}).items():
        out.add("windows_vs_baseline", {**base, "speed": speed}, count)
    buckets = [
        (_le(bound), float(count))
        for bound, count in zip(ACCEPT_LENGTH_BUCKETS, snap.accept_length_buckets, strict=True)
    ]
    buckets.append(("+Inf", float(snap.accept_length_count)))
    out.add_histogram("accept_length_windows", base, buckets, snap.accept_length_sum)


def _render_requests(out: Families, base: dict[str, str], requests: RequestsSnapshot) -> None:
    """The finished requests' distribution, once the log has shown one: most servers do not
    log their requests, and their scrapes carry none of these series."""
    if not requests.finished:
        return
    out.add("requests_finished", base, requests.finished)
    out.add("requests_clipped", base, requests.clipped)
    classes = requests.classes or {None: NO_REQUESTS}
    for name, counts in sorted(classes.items(), key=lambda kv: kv[0] or ""):
        labels = base if name is None else {**base, "traffic_class": name}
        out.add("requests_speculative", labels, counts.count)
        out.add("requests_no_draft_accepted", labels, counts.no_draft)
        buckets = [(_le(b), float(c)) for b, c in zip(REQUEST_BUCKETS, counts.buckets, strict=True)]
        buckets.append(("+Inf", float(counts.count)))
        out.add_histogram("request_accept_length", labels, buckets, counts.total)


def _le(bound: float) -> str:
    return repr(float(bound))


def _render_log_health(out: Families, base: dict[str, str], snap: TargetSnapshot) -> None:
    out.add("log_lines", base, snap.log_lines)
    for kind, count in sorted(snap.stats_lines.items()):
        out.add("log_stats_lines", {**base, "kind": kind}, count)
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
    """Configuration, findings, upstream health and values, and custom rule series."""
    tokens = insight.config.draft_tokens_now
    for dp_rank, window in fresh.items():
        if drafting_off(window.record):
            continue
        # A window the log did not stamp with a setup (no start-up lines read) is fresh, so
        # it is the run that /server_info describes now.
        stamped = window.draft_tokens if window.draft_tokens is not None else tokens
        rate = window_accept_rate(window.record, stamped)
        if rate is not None:
            out.add("accept_ratio", _window_labels(base, dp_rank), rate)
    if insight.fallback is not None:
        _render_upstream_values(out, base, insight.fallback, tokens)
    if insight.config.max_running_requests is not None:
        out.add("max_running_requests", base, insight.config.max_running_requests)
    spec_labels = speculative_labels(insight.config)
    if any(spec_labels.values()):  # nothing known yet: no series, rather than one of blanks
        out.add("speculative_info", {**base, **spec_labels}, 1)
    for finding in insight.findings:
        out.add("finding", {**base, "code": finding.code, "severity": finding.severity}, 1)
    _render_upstream_health(out, base, insight)
    _render_custom(out, base, target, stale_after)


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


def _render_upstream_health(out: Families, base: dict[str, str], insight: Insight) -> None:
    snap = insight.upstream
    if snap is None:
        return
    for endpoint, status in snap.endpoints.items():
        labels = {**base, "endpoint": endpoint}
        out.add("upstream_up", labels, 1 if status.up else 0)
        out.add("upstream_scrape_duration_seconds", labels, status.duration_seconds)
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
