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
scrape. Lines over either cap are counted, not exported.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

PREFIX = "specwatch_custom_"
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RESERVED_LABELS = frozenset({"target", "le", "quantile"})
MAX_LABEL_CHARS = 128


class CustomRuleError(ValueError):
    """A rule that cannot work, reported naming the rule."""


class CustomMetric(BaseModel):
    """One metric a rule feeds: a gauge set to a group, or a counter increased by it (or 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="suffix after specwatch_custom_; counters get _total added")
    type: Literal["gauge", "counter"] = "gauge"
    value: str | None = Field(None, description="named group holding the number")
    help: str = ""

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not _NAME.match(name) or name.endswith("_total"):
            raise ValueError(
                f"metric name {name!r} must match [a-zA-Z_][a-zA-Z0-9_]* and not end in _total"
            )
        return name

    @model_validator(mode="after")
    def _gauge_has_value(self) -> CustomMetric:
        if self.type == "gauge" and self.value is None:
            raise ValueError(f"gauge {self.name!r} needs a value group")
        return self


class CustomRule(BaseModel):
    """One ``custom_rules`` entry of the config file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pattern: str
    contains: str | None = None
    labels: list[str] = Field(default_factory=list)
    metrics: list[CustomMetric] = Field(min_length=1)
    max_series: int = Field(100, ge=1, le=1000)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from exc
        return pattern

    @model_validator(mode="after")
    def _groups_exist(self) -> CustomRule:
        groups = set(re.compile(self.pattern).groupindex)
        wanted = set(self.labels) | {m.value for m in self.metrics if m.value}
        if missing := sorted(wanted - groups):
            raise ValueError(f"rule {self.name!r}: pattern has no named group {missing}")
        if bad := sorted(set(self.labels) & _RESERVED_LABELS):
            raise ValueError(f"rule {self.name!r}: label name {bad} is reserved")
        return self


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
        self.regex = re.compile(rule.pattern)
        # (metric name, label values) -> (value, monotonic time of last update)
        self.series: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}
        self.label_sets: set[tuple[str, ...]] = set()


class CustomRuleSet:
    """Compiled rules fed with log lines from the tail thread and read by the collector."""

    def __init__(self, rules: list[CustomRule]) -> None:
        names = [f"{PREFIX}{metric.name}" for rule in rules for metric in rule.metrics]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise CustomRuleError(f"metric name used twice: {duplicates}")
        self._rules = [_CompiledRule(rule) for rule in rules]
        self._lock = threading.Lock()
        self.dropped: dict[tuple[str, str], int] = {}  # (rule, reason) -> lines

    def __bool__(self) -> bool:
        return bool(self._rules)

    def feed_raw(self, lines: list[bytes]) -> None:
        """Apply the rules to a batch of raw lines from the tailer.

        The ``contains`` literal is tested on the whole batch's bytes first, so a busy log
        costs one substring search per rule and batch, not a decode and regex per line.
        """
        blob = b"\n".join(lines)
        for compiled in self._rules:
            contains = compiled.rule.contains
            needle = contains.encode() if contains is not None else None
            if needle is not None and needle not in blob:
                continue
            for raw in lines:
                if needle is None or needle in raw:
                    text = raw.decode("utf-8", errors="replace").rstrip("\r")
                    if match := compiled.regex.search(text):
                        self._apply(compiled, match)

    def _apply(self, compiled: _CompiledRule, match: re.Match[str]) -> None:
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
        now = time.monotonic()
        with self._lock:
            if labels not in compiled.label_sets:
                if len(compiled.label_sets) >= rule.max_series:
                    self._count_drop(rule.name, "series_limit")
                    return
                compiled.label_sets.add(labels)
            for metric, value in updates:
                key = (metric.name, labels)
                if metric.type == "counter":
                    value += compiled.series.get(key, (0.0, now))[0]
                compiled.series[key] = (value, now)

    def _drop(self, rule: str, reason: str) -> None:
        with self._lock:
            self._count_drop(rule, reason)

    def _count_drop(self, rule: str, reason: str) -> None:
        self.dropped[(rule, reason)] = self.dropped.get((rule, reason), 0) + 1

    def samples(self, stale_after: float | None = None) -> list[CustomSample]:
        """Current series; gauges not updated within ``stale_after`` seconds are left out,
        like specwatch's own per-window gauges, so an old value never reads as current."""
        now = time.monotonic()
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
        """Lines matched but not exported, by (rule, reason): ``series_limit`` or ``bad_value``."""
        with self._lock:
            return dict(self.dropped)
