"""User-defined extraction rules: metrics from log lines specwatch has no parser for.

Teams print their own diagnostics next to SGLang's, for example a draft profiler::

    EAGLE3_PROF (6400 cycles, 3688 tok, no sync) Draft steps: 0.64 ms/cyc ( 2.1%) \
Draft re-extend: 0.25 ms/cyc ( 0.9%) Accept len: 0.58

A rule for it in the config file::

    custom_rules:
      - name: eagle3_prof
        contains: "EAGLE3_PROF"          # cheap literal test before the regex runs
        pattern: 'EAGLE3_PROF \\((?P<cycles>\\d+) cycles, (?P<tokens>\\d+) tok, (?P<sync>[^)]*)\\)
          Draft steps: (?P<draft_ms>[\\d.]+) ms/cyc.*Accept len: (?P<accept_len>[\\d.]+)'
        labels: [sync]                   # named groups that become labels
        metrics:
          - {name: eagle3_prof_draft_step_ms, type: gauge, value: draft_ms}
          - {name: eagle3_prof_accept_length, type: gauge, value: accept_len}
          - {name: eagle3_prof_cycles, type: counter, value: cycles}
          - {name: eagle3_prof_reports, type: counter}   # +1 per matching line

gives ``specwatch_custom_eagle3_prof_accept_length{target,sync="no sync"} 0.58`` and
``specwatch_custom_eagle3_prof_cycles_total``. Rules are validated at start (a bad regex, an
unknown group or a bad name is an error naming the rule), and each rule keeps at most
``max_series`` label combinations of at most ``MAX_LABEL_CHARS`` characters each: label values
come from log text, so without both caps one rule could create unbounded series or a huge
scrape. Lines over either cap are counted, not exported. All rules together keep at most
``MAX_SERIES_TOTAL`` series, checked at start.

Patterns run on RE2 (``google-re2``), whose matching time is linear in the line: Python's
``re`` backtracks, so ``^(a+)+$`` against a few dozen ``a``s would spin for hours in the tail
thread while holding the interpreter lock, and nothing else in the daemon, signals included,
would run. RE2 refuses what it cannot match in linear time (backreferences, look-around) when
the pattern is compiled, that is at start. As a last guard, a rule that takes more than
``RULE_CPU_BUDGET`` seconds of CPU over one line is disabled for good, logged once and its
further lines counted. The budget is per line, not per batch: a batch's size depends on how
far behind the reader is, and a busy rule that matches every line of a long catch-up is
working, not stuck.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec
from msgspec import Meta

from exporter import clock
from exporter.settings import Strict

if TYPE_CHECKING:
    import re2

PREFIX = "specwatch_custom_"
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RESERVED_LABELS = frozenset({"target", "le", "quantile"})
MAX_LABEL_CHARS = 128
# specwatch's own families under PREFIX: a rule metric of the same name wrote a second HELP
# block, and Prometheus refused the whole scrape.
OWN_METRICS = frozenset({"rule_dropped_lines"})
# Series all rules may keep per target, counted as max_series x metrics per rule: each rule
# was capped alone, and 300 rules of 1,000 series (40 KB of config) made a 16 MB scrape that
# took 5 s and 464 MB. The shipped monitors' sampleLimit is 1,000 per scrape.
MAX_SERIES_TOTAL = 2000
# A label combination with no line for this long is forgotten, counters included (they
# restart from 0 if it comes back, which rate() reads as a reset).
RETIRE_SECONDS = 3600.0
# How often a full rule looks for combinations to forget, at most.
RETIRE_CHECK_SECONDS = 1.0
# RE2's own default; a pattern whose automaton needs more fails to compile, at start.
RULE_MAX_MEM = 8 << 20
# CPU seconds one rule may spend on one line (at most max_line_bytes, 1 MiB by default, which
# RE2 reads in milliseconds); past it the rule is disabled rather than hold up the tail thread.
RULE_CPU_BUDGET = 0.1

log = logging.getLogger(__name__)


class CustomRuleError(ValueError):
    """A rule that cannot work, reported naming the rule."""


class CustomMetric(Strict, frozen=True):
    """One metric a rule feeds: a gauge set to a group, or a counter increased by it (or 1)."""

    name: str  # suffix after specwatch_custom_; counters get _total added
    type: Literal["gauge", "counter"] = "gauge"
    value: str | None = None  # the named group holding the number
    help: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name.endswith("_total"):
            raise ValueError(
                f"name: metric name {self.name!r} must match [a-zA-Z_][a-zA-Z0-9_]* "
                "and not end in _total"
            )
        if self.name in OWN_METRICS:
            raise ValueError(
                f"name: metric name {self.name!r} is specwatch's own {PREFIX}{self.name}_total"
            )
        if self.type == "gauge" and self.value is None:
            raise ValueError(f"gauge {self.name!r} needs a value group")


class CustomRule(Strict, frozen=True):
    """One ``custom_rules`` entry of the config file."""

    name: str
    pattern: str
    metrics: Annotated[list[CustomMetric], Meta(min_length=1)]
    contains: str | None = None
    labels: list[str] = msgspec.field(default_factory=list)
    max_series: Annotated[int, Meta(ge=1, le=1000)] = 100

    def __post_init__(self) -> None:
        try:
            groups = set(compile_rule(self.pattern).groupindex)
        except ValueError as exc:
            raise ValueError(f"pattern: {exc}") from None
        self._label_names()
        wanted = set(self.labels) | {m.value for m in self.metrics if m.value}
        if missing := sorted(wanted - groups):
            raise ValueError(f"rule {self.name!r}: pattern has no named group {missing}")

    def _label_names(self) -> None:
        """Prometheus reserves ``__`` names (a ``__name__`` label makes it reject the whole
        scrape), the exporter sets ``target``, and a histogram or summary owns ``le`` and
        ``quantile``; a name given twice would write one series with two values."""
        labels = self.labels
        if bad := sorted({n for n in labels if n in _RESERVED_LABELS or n.startswith("__")}):
            raise ValueError(f"labels: label name {bad} is reserved")
        if twice := sorted({n for n in labels if labels.count(n) > 1}):
            raise ValueError(f"labels: label name {twice} given twice")


def compile_rule(pattern: str) -> re2._Regexp[str]:
    """``pattern`` as RE2 runs it, or ``ValueError`` saying why RE2 cannot (its syntax is
    Python's without backreferences and look-around; ``\\Z`` is written ``\\z``)."""
    import re2  # its library is 2 MiB of the daemon's memory; a node without rules needs none

    options = re2.Options()
    options.log_errors = False  # the reason goes into our one-line error instead of stderr
    options.max_mem = RULE_MAX_MEM
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(f"invalid regular expression (RE2 syntax): {text}") from None


@dataclass(frozen=True, slots=True)
class CustomSample:
    """One exported series: full metric name (without ``_total``), type, labels, value."""

    name: str
    type: str
    help: str
    labels: tuple[tuple[str, str], ...]
    value: float


class _CompiledRule:
    def __init__(self, rule: CustomRule) -> None:
        self.rule = rule
        self.regex = compile_rule(rule.pattern)
        self.disabled = False
        # (metric name, label values) -> (value, monotonic time of last update)
        self.series: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}
        self.label_sets: dict[tuple[str, ...], float] = {}  # -> time of its newest line
        self.pruned_at = -math.inf

    def retire(self, now: float) -> None:
        """Forget label combinations without a line for RETIRE_SECONDS, freeing their places
        in ``max_series``: a label such as a request id would otherwise fill the budget once
        and keep every later value out for good."""
        old = {labels for labels, seen in self.label_sets.items() if now - seen > RETIRE_SECONDS}
        if old:
            self.series = {key: v for key, v in self.series.items() if key[1] not in old}
            self.label_sets = {k: v for k, v in self.label_sets.items() if k not in old}
        self.pruned_at = now


class CustomRuleSet:
    """Compiled rules fed with log lines from the tail thread and read by the collector."""

    def __init__(
        self,
        rules: list[CustomRule],
        cpu_budget: float = RULE_CPU_BUDGET,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (total := sum(r.max_series * len(r.metrics) for r in rules)) > MAX_SERIES_TOTAL:
            raise CustomRuleError(
                f"the rules keep up to {total} series (max_series x metrics, summed), "
                f"at most {MAX_SERIES_TOTAL}"
            )
        names = [f"{PREFIX}{metric.name}" for rule in rules for metric in rule.metrics]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise CustomRuleError(f"metric name used twice: {duplicates}")
        self._rules = [_CompiledRule(rule) for rule in rules]
        self._cpu_budget = cpu_budget
        self._clock = clock
        self._lock = threading.Lock()
        self.dropped: dict[tuple[str, str], int] = {}  # (rule, reason) -> lines

    def __bool__(self) -> bool:
        return bool(self._rules)

    def feed_raw(self, lines: list[bytes], written_by: float | None = None) -> None:
        """Apply the rules to a batch of raw lines from the tailer; ``written_by``, when their
        file was last written (on the daemon's clock, ``exporter.clock``) if the source can
        tell: their gauges are as old.

        The ``contains`` literal is tested on the whole batch's bytes first, so a busy log
        costs one substring search per rule and batch, not a decode and regex per line.
        """
        age = 0.0 if written_by is None else max(0.0, clock.now() - written_by)
        at = self._clock() - age
        blob = b"\n".join(lines)
        for compiled in self._rules:
            contains = compiled.rule.contains
            needle = contains.encode() if contains is not None else None
            if needle is not None and needle not in blob:
                continue
            wanted = [raw for raw in lines if needle is None or needle in raw]
            if compiled.disabled:
                self._drop(compiled.rule.name, "over_budget", len(wanted))
            else:
                self._match(compiled, wanted, at)

    def _match(self, compiled: _CompiledRule, lines: list[bytes], at: float) -> None:
        """Match and apply, on the CPU time of this thread alone: time spent waiting for the
        interpreter lock while a scrape renders is not the rule's."""
        before = time.thread_time()
        for done, raw in enumerate(lines, 1):
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            if match := compiled.regex.search(text):
                self._apply(compiled, match, at)
            after = time.thread_time()
            if after - before > self._cpu_budget:
                self._disable(compiled, after - before, len(lines) - done)
                return
            before = after

    def _disable(self, compiled: _CompiledRule, spent: float, left: int) -> None:
        compiled.disabled = True
        self._drop(compiled.rule.name, "over_budget", left)
        log.error(
            "custom rule %s used %.2f s of CPU on one line (budget %g s); it is "
            "disabled until restart, and the lines it skips are counted in "
            'specwatch_custom_rule_dropped_lines_total{reason="over_budget"}',
            compiled.rule.name,
            spent,
            self._cpu_budget,
        )

    def _apply(self, compiled: _CompiledRule, match: re2._Match[str], at: float) -> None:
        """Update the rule's series from ``match``, a line written at ``at`` (this set's
        clock) at the latest."""
        rule = compiled.rule
        labels = tuple(match.group(name) or "" for name in rule.labels)
        if any(len(value) > MAX_LABEL_CHARS for value in labels):
            self._drop(rule.name, "bad_value")
            return
        updates: list[tuple[CustomMetric, float]] = []
        for metric in rule.metrics:
            try:
                value = float(match.group(metric.value)) if metric.value else 1.0
            except (TypeError, ValueError):
                value = math.nan
            # One nan or inf would stay in a counter for good.
            if not math.isfinite(value) or (metric.type == "counter" and value < 0):
                self._drop(rule.name, "bad_value")
                return
            updates.append((metric, value))
        now = self._clock()
        with self._lock:
            if labels not in compiled.label_sets:
                full = len(compiled.label_sets) >= rule.max_series
                if full and now - compiled.pruned_at >= RETIRE_CHECK_SECONDS:
                    compiled.retire(now)
                    full = len(compiled.label_sets) >= rule.max_series
                if full:
                    self._count_drop(rule.name, "series_limit")
                    return
            totals = [
                value + compiled.series.get((m.name, labels), (0.0, now))[0]
                if m.type == "counter"
                else value
                for m, value in updates
            ]
            if not all(map(math.isfinite, totals)):  # finite increments can still sum to inf
                self._count_drop(rule.name, "bad_value")
                return
            compiled.label_sets[labels] = at
            for (metric, _), total in zip(updates, totals, strict=True):
                compiled.series[(metric.name, labels)] = (total, at)

    def _drop(self, rule: str, reason: str, lines: int = 1) -> None:
        with self._lock:
            self._count_drop(rule, reason, lines)

    def _count_drop(self, rule: str, reason: str, lines: int = 1) -> None:
        self.dropped[(rule, reason)] = self.dropped.get((rule, reason), 0) + lines

    def samples(self, stale_after: float | None = None) -> list[CustomSample]:
        """Current series; gauges not updated within ``stale_after`` seconds are left out,
        like specwatch's own per-window gauges, so an old value never reads as current."""
        now = self._clock()
        out: list[CustomSample] = []
        with self._lock:
            for compiled in self._rules:
                metrics = {m.name: m for m in compiled.rule.metrics}
                for (name, label_values), (value, updated) in compiled.series.items():
                    metric = metrics[name]
                    if metric.type == "gauge" and stale_after and now - updated > stale_after:
                        continue
                    labels = tuple(zip(compiled.rule.labels, label_values, strict=True))
                    help_text = metric.help or f"Custom rule {compiled.rule.name}: {name}"
                    out.append(CustomSample(PREFIX + name, metric.type, help_text, labels, value))
        return out

    def dropped_counts(self) -> dict[tuple[str, str], int]:
        """Lines matched but not exported, by (rule, reason): ``series_limit``, ``bad_value``,
        or ``over_budget`` (lines a disabled rule no longer reads)."""
        with self._lock:
            return dict(self.dropped)
