"""The metrics specwatch exports, declared once, and the families a scrape collects into.

Every family has one type and one HELP text, here, so the collector's renderers only name a
family and give it samples, and the docs and lint tests read the same table. Label values
pass through :func:`bounded` on their way out, whichever renderer wrote them.
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from exporter.parse.custom_rules import CustomSample

P = "specwatch_"

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
    "scrapes_prepared": (
        "counter",
        "Scrapes of /metrics foreseen from a scraper's steady interval, whose log lines were "
        "read and moved targets rendered just before they came.",
    ),
    "accept_length": ("gauge", "Mean accepted tokens per verify round in the newest window."),
    "accept_ratio": (
        "gauge",
        "Accepted drafts per proposed draft (0-1): counted where the engine counts tokens, "
        "else (accept_length-1)/(num_draft_tokens-1).",
    ),
    "cuda_graph": ("gauge", "1 if the newest decode window ran with a CUDA (or CPU/NPU) graph."),
    "running_requests": ("gauge", "Running requests in the newest decode window."),
    "cap_length": (
        "gauge",
        "Mean verify window per round scheduled by confidence, bonus slot included (a block "
        "drafter's `cap len`), in the newest decode window.",
    ),
    "block_accept_length": (
        "gauge",
        "Mean uncapped full-block accept length per round (a block drafter's `block accept "
        "len`, exact in DSPARK's cap-accept mode), in the newest decode window.",
    ),
    "queued_requests": ("gauge", "Queued requests in the newest decode window."),
    "token_usage_ratio": ("gauge", "KV cache token usage (0-1) in the newest decode window."),
    "gen_throughput_tokens_per_second": ("gauge", "Generation throughput of the newest window."),
    "position_accept_ratio": (
        "gauge",
        "Share (0-1) of draft rounds whose drafts up to this position (0 = first) were all "
        "accepted, in the newest window, where the engine logs acceptance by position.",
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
        "Draft tokens accepted at this position (0 = first), where the engine counts them by "
        "position; rate() over a fleet or many ranks weighs each by its drafts, as the "
        "per-window ratio cannot.",
    ),
    "speedup": (
        "gauge",
        "Generation throughput as a multiple of the baseline at the current running requests "
        "(1 = as fast as without speculation).",
    ),
    "speedup_ratio": (
        "gauge",
        "Deprecated: the same value as specwatch_speedup, whose name it had; removed in the "
        "next release.",
    ),
    "last_decode_timestamp_seconds": (
        "gauge",
        "When specwatch last saw a decode stats line, or when its log file was last written "
        "if earlier.",
    ),
    "server_ended_timestamp_seconds": (
        "gauge",
        "When specwatch read in the log that the server died (finding server_crashed or "
        "server_failing) or was stopped, or when that log file was last written if earlier; "
        "absent while the run serves.",
    ),
    "decode_windows": ("counter", "Decode stats windows seen, by CUDA-graph state."),
    "generated_tokens": (
        "counter",
        "Tokens generated: each stats line's throughput (all DP ranks together) times the "
        "time since the previous line; a gap over 60 s (idle, restart) adds nothing.",
    ),
    "band_gen_throughput_tokens_per_second": (
        "summary",
        "Generation throughput of each decode window of the whole node (DP ranks summed), by "
        "the node's running requests (band: 1, 2, 3-4 ... 257-512, 513+) and mode: plain (a "
        "server without speculation), drafting, drafting_off. With served_model and "
        "hardware, what a fleet's baseline is learned from.",
    ),
    "windows_vs_baseline": (
        "counter",
        "Decode stats windows of the whole node (all DP ranks together), by speed against the "
        "baseline at their running requests: at_or_below, above, or drafting_off (adaptive "
        "speculation not drafting, not judged); only with a baseline.",
    ),
    "accept_length_windows": ("histogram", "Per-window accept length."),
    "request_accept_length": (
        "histogram",
        "Accept length of each finished speculative request, where the server logs its "
        "finished requests, by traffic_class when request_label_header is set.",
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
        "Throughput without speculation at the current running requests; source: configured, "
        "own_log (learned from a log served without speculation) or drafting_off (learned "
        "from this node's windows with drafting off).",
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
    "verdict": (
        "gauge",
        "The node's state now, one series per state of a fixed set (docs/metrics.md, "
        "Verdict): 1 for the state that holds, 0 for the others.",
    ),
    "verdict_since_timestamp_seconds": (
        "gauge",
        "When the state specwatch_verdict shows began (Unix seconds).",
    ),
    "upstream_up": ("gauge", "1 if the newest scrape of the server's endpoint succeeded."),
    "upstream_scrape_duration_seconds": ("gauge", "Duration of the newest upstream scrape."),
    "upstream_scrape_errors": ("counter", "Failed upstream scrapes, by endpoint and reason."),
    "upstream_dropped_samples": (
        "counter",
        "Samples of the server's /metrics that specwatch reads but cannot be true, dropped: "
        "non_finite, negative, out_of_range (a 0-1 share above 1, an impossible accept "
        "length, a count above 1e18), duplicate (every copy of a series given twice) or "
        "inconsistent (a window whose counters disagree: more tokens accepted than drafted).",
    ),
    "custom_rule_dropped_lines": (
        "counter",
        "Lines a custom rule matched but did not export (series_limit, bad_value), or skipped "
        "after it was disabled for exceeding its CPU budget (over_budget).",
    ),
    "log_source_up": (
        "gauge",
        "1 while a configured log path is followed; 0 with the reason it is not: waiting (not "
        "there yet, within the grace period), missing, directory, not_regular, unreadable, "
        "symlink_loop, stuck.",
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


# Each declared family's exported name and its gauge or counter sample's name, and its place
# in the exposition's order: looked up once per sample, not built.
_NAMES: dict[str, tuple[str, str]] = {
    short: (P + short, P + short + ("_total" if kind == "counter" else ""))
    for short, (kind, _) in FAMILIES.items()
}
_ORDER: dict[str, int] = {P + short: number for number, short in enumerate(FAMILIES)}


# A family's samples as columns: each sample's name, its labels and its value. A render
# compares a family's labels and values with the last render's as lists (the labels mostly
# the same dicts: ``labelled``), and writes its lines from the values; a sample becomes a
# prometheus_client ``Sample`` only when collected.
Columns = tuple[list[str], list[dict[str, str]], list[float]]


class Families:
    """Samples by exported family, yielded as prometheus_client metrics in declaration order
    (user-defined families after them, in the order first seen).

    A series' label names vary within a family (``dp_rank`` only where ranks are logged), so
    each sample keeps its own labels; samples are kept as columns (``Columns``), and a family
    becomes a :class:`Metric` of ``Sample`` objects only when it is collected.
    """

    def __init__(self) -> None:
        self._added: dict[str, Columns] = {}  # family name -> the samples added, in order
        # family name -> the samples given with their lines (``extend``, ``keep``), while no
        # others join them
        self._kept: dict[str, tuple[Columns, str]] = {}
        self._custom: dict[str, tuple[str, str]] = {}  # user-defined family -> (type, help)

    def add(self, short: str, labels: dict[str, str], value: float) -> None:
        """One series of a declared gauge or counter (a counter's sample adds ``_total``)."""
        name, sample = _NAMES[short]
        if _KNOWN.get(id(labels)) is not labels:
            labels = _bounded(labels)
        columns = self._added.get(name)
        if columns is None:
            self._added[name] = ([sample], [labels], [value])
        else:
            columns[0].append(sample)
            columns[1].append(labels)
            columns[2].append(value)

    def add_histogram(
        self,
        short: str,
        labels: dict[str, str],
        buckets: Sequence[tuple[str, float]],
        sum_value: float,
    ) -> None:
        """One series of a declared histogram; ``buckets`` are cumulative, of bounds 0 or
        more, and end with +Inf. The samples ``HistogramMetricFamily.add_metric`` makes, made
        here: a family object per series validated its name again at every render."""
        bounds = tuple(map(_BOUND, buckets))
        self.add_buckets(short, labels, bounds, list(map(_COUNT, buckets)), sum_value)

    def add_buckets(
        self,
        short: str,
        labels: dict[str, str],
        bounds: tuple[str, ...],
        counts: Sequence[float],
        sum_value: float,
    ) -> None:
        """``add_histogram`` of the buckets of ``bounds`` (``le`` values, the last +Inf) and
        their cumulative ``counts``, without pairing them first."""
        name = P + short
        bounded = labels if _KNOWN.get(id(labels)) is labels else _bounded(labels)
        names, labelled_, values = self._columns(name)
        names += _bucket_names(name, len(bounds))
        names += (name + "_count", name + "_sum")
        labelled_ += _bucket_labels(bounded, bounds)
        labelled_ += (bounded, bounded)
        values += map(float, counts)
        values += (float(counts[-1]), sum_value)

    def add_summary(self, short: str, labels: dict[str, str], count: int, sum_value: float) -> None:
        """One series of a declared summary (count and sum, no quantiles), as
        ``SummaryMetricFamily.add_metric`` makes it."""
        name = P + short
        bounded = labels if _KNOWN.get(id(labels)) is labels else _bounded(labels)
        names, labelled_, values = self._columns(name)
        names += (name + "_count", name + "_sum")
        labelled_ += (bounded, bounded)
        values += (count, sum_value)

    def extend(self, name: str, samples: Sequence[Sample], lines: str | None = None) -> None:
        """Samples of declared family ``name`` (its exported name) made before, as they were;
        ``lines``, their lines written before, which are the family's (``written``) unless
        other samples join it."""
        columns = (
            [s.name for s in samples],
            [s.labels for s in samples],
            [s.value for s in samples],
        )
        self.keep(((name, columns, lines),))

    def keep(self, group: Iterable[tuple[str, Columns, str | None]]) -> None:
        """``extend`` for each family of ``group`` (its name, its samples as columns, never
        changed afterwards, and their lines), in one call: a render keeps four groups of some
        sixteen families, neither copied nor compared."""
        added = self._added
        kept = self._kept
        for name, columns, lines in group:
            if lines is None or name in added or name in kept:
                _join(self._columns(name), columns)  # written from the samples
            else:
                kept[name] = (columns, lines)

    def written(self, name: str) -> str | None:
        """The lines of family ``name`` given with its samples (``extend``), when those are
        all its samples."""
        kept = self._kept.get(name)
        if kept is None or name in self._added:
            return None
        return kept[1]

    def add_custom(self, sample: CustomSample, labels: dict[str, str]) -> None:
        """A user-defined ``specwatch_custom_*`` series (names validated at start)."""
        family = _SCALAR[sample.type](sample.name, sample.help, labels=list(labels))
        family.add_metric(_label_values(labels), sample.value)
        self._custom.setdefault(family.name, (family.type, family.documentation))
        names, labelled_, values = self._columns(family.name)
        for each in family.samples:
            names.append(each.name)
            labelled_.append(each.labels)
            values.append(each.value)

    def merge(self, other: Families) -> None:
        """Append ``other``'s samples, family by family (one target's render into the scrape)."""
        for name, kind in other._custom.items():
            self._custom.setdefault(name, kind)
        for name, (columns, _) in other._kept.items():
            _join(self._columns(name), columns)
        for name, columns in other._added.items():
            _join(self._columns(name), columns)

    def names(self) -> list[str]:
        """The families holding samples, in the order they are exported."""
        order = _ORDER
        held = {**self._kept, **self._added}
        declared = sorted((name for name in held if name in order), key=order.__getitem__)
        return declared + [name for name in self._custom if name in held]

    def samples(self, name: str) -> Sequence[Sample]:
        kept = self._kept.get(name)
        added = self._added.get(name)
        out = [] if kept is None else _samples(kept[0])
        if added is not None:
            out += _samples(added)
        return out

    @property
    def by_family(self) -> Mapping[str, Sequence[Sample]]:
        """Every family's samples by its name (declared and user-defined mixed; ``names()``
        gives the exported order), made afresh: a render reads ``columns`` and ``kept``."""
        return {name: self.samples(name) for name in {**self._kept, **self._added}}

    @property
    def columns(self) -> Mapping[str, Columns]:
        """The samples added (``add``, its kin, and kept ones that others joined), by family
        in the order first added: the families' own dictionary, not a copy (a render
        compares some twenty families with the last render's), so typed read-only."""
        return self._added

    @property
    def kept(self) -> Mapping[str, tuple[Columns, str]]:
        """The families given with their lines (``extend``, ``keep``) that no other samples
        joined, with those lines; a family in ``columns`` too was joined (``written``)."""
        return self._kept

    def kind(self, name: str) -> tuple[str, str]:
        """The type and HELP text of family ``name``."""
        custom = self._custom.get(name)
        return custom if custom is not None else FAMILIES[name.removeprefix(P)]

    def __iter__(self) -> Iterator[Metric]:
        for name in self.names():
            kind, doc = self.kind(name)
            metric = Metric(name, doc, kind)
            metric.samples = list(self.samples(name))
            yield metric

    def _columns(self, name: str) -> Columns:
        """The columns of the samples added to family ``name``, made when none are yet; a
        family kept with its lines becomes one added to (its lines no longer stand for it)."""
        columns = self._added.get(name)
        if columns is None:
            columns = self._added[name] = ([], [], [])
            kept = self._kept.pop(name, None)
            if kept is not None:
                _join(columns, kept[0])
        return columns


def _join(columns: Columns, more: Columns) -> None:
    columns[0].extend(more[0])
    columns[1].extend(more[1])
    columns[2].extend(more[2])


def _samples(columns: Columns) -> list[Sample]:
    names, labels, values = columns
    rows = zip(names, labels, values, strict=True)
    return [_new(Sample, (name, each, value, None, None, None)) for name, each, value in rows]


_COUNT = operator.itemgetter(1)  # a bucket's count


@functools.lru_cache(maxsize=64)
def _bucket_names(name: str, count: int) -> tuple[str, ...]:
    return (name + "_bucket",) * count


# ``Sample(name, labels, value)`` without the Python call of a named tuple's constructor: a
# collection of 100 targets makes some 9,000 of them.
_new = tuple.__new__

# The labels of a histogram's buckets, by the series' labels (the dict itself, held here so
# that its id is not another's) and its bounds: the same dicts from one render to the next (a
# render compares its labels with the last one's, and equal objects compare at once), made
# once instead of a dozen per series and render.
_BUCKET_LABELS: dict[
    tuple[int, tuple[str, ...]], tuple[dict[str, str], tuple[dict[str, str], ...]]
] = {}
_BUCKET_LABELS_MAX = 4096


_BOUND = operator.itemgetter(0)  # a bucket's ``le``


def _bucket_labels(labels: dict[str, str], bounds: tuple[str, ...]) -> tuple[dict[str, str], ...]:
    key = (id(labels), bounds)
    kept = _BUCKET_LABELS.get(key)
    if kept is not None and kept[0] is labels:
        return kept[1]
    if len(_BUCKET_LABELS) >= _BUCKET_LABELS_MAX:
        _BUCKET_LABELS.clear()  # series come and go (traffic classes): start again
    made = tuple({**labels, "le": le} for le in bounds)
    _BUCKET_LABELS[key] = (labels, made)
    return made


# The prometheus_client family that writes a user-defined sample of each type.
_SCALAR: dict[str, type[CounterMetricFamily] | type[GaugeMetricFamily]] = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
}


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


# Label dicts known to be bounded already, by their id (each holds its dict, so no other
# object takes its id while it is here): the labels a renderer keeps from one render to the
# next (``labelled``), which ``Families.add`` need not look at again.
_KNOWN: dict[int, dict[str, str]] = {}
_LABELLED: dict[tuple[int, tuple[str, ...]], tuple[dict[str, str], dict[str, str]]] = {}
_LABELS_MAX = 16384


def known(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` bounded, marked as such: a dict kept and never changed."""
    labels = _bounded(labels)
    if len(_KNOWN) >= _LABELS_MAX:
        _KNOWN.clear()
        _LABELLED.clear()
    _KNOWN[id(labels)] = labels
    return labels


def labelled(labels: dict[str, str], *pairs: str) -> dict[str, str]:
    """``labels`` and more (``pairs``: a name, its value, and so on), bounded, and the same
    dict for the same ``labels`` object and pairs from one render to the next: its samples
    compare with the last render's by identity, and ``Families.add`` does not check its
    values again. ``labels`` is never changed afterwards, as no label dict a renderer passes
    is."""
    key = (id(labels), pairs)
    hit = _LABELLED.get(key)
    if hit is not None and hit[0] is labels:
        return hit[1]
    if len(_LABELLED) >= _LABELS_MAX:
        _KNOWN.clear()
        _LABELLED.clear()
    made = known({**labels, **dict(zip(pairs[::2], pairs[1::2], strict=True))})
    _LABELLED[key] = (labels, made)
    return made


def _label_values(labels: dict[str, str]) -> list[str]:
    return [bounded(value) for value in labels.values()]


def _bounded(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with each value bounded; the same dict when every value is short ASCII
    already, as nearly all are (each of a scrape's thousands of samples comes here)."""
    joined = "".join(labels.values())  # short ASCII together: each one is
    if len(joined) <= LABEL_VALUE_MAX and joined.isascii():
        return labels
    for value in labels.values():
        if len(value) > LABEL_VALUE_MAX or not value.isascii():
            return {name: bounded(value) for name, value in labels.items()}
    return labels
