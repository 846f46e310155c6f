"""Per-request acceptance: the distribution a window average hides (docs/metrics.md, "Per-request
acceptance").

A window's accept length averages over every request in it, weighted by tokens, so a node at
2.4 may serve a share of its requests at 1.0: one language, one LoRA, one tenant the drafter
does not fit. SGLang's finished-request records give each request's own figure; this module
keeps their distribution, per configured traffic class, and the recent share that gets no
benefit. It keeps numbers only: no text, id or header of a request outlives ``add``.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from exporter.analysis.request_share import (
    NO_BENEFIT_ACCEPT_LENGTH,
    RecentShare,
    no_draft_accepted,
)
from exporter.engines.record import RequestRecord

# Upper bounds of ``specwatch_request_accept_length``: 1.0 alone (the bonus token only), the
# low range up to 1.5 (1.05 is where the alerts call acceptance none), then the normal range.
REQUEST_BUCKETS: tuple[float, ...] = (1.0, 1.05, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
# How far back the daemon's finding looks, and the most seconds it keeps for it.
RECENT_SECONDS = 900.0
# Values of the configured label with series of their own; the rest are counted as OTHER.
DEFAULT_MAX_CLASSES = 8
OTHER, UNLABELLED = "other", "none"
# A traffic class is named as the worst only with this many speculative requests behind it.
MIN_CLASS_REQUESTS = 20


@dataclass(frozen=True, slots=True)
class ClassCounts:
    """One traffic class's speculative requests: cumulative bucket counts (``le`` each of
    ``REQUEST_BUCKETS``), sum and count of their accept lengths, and those with no draft
    accepted."""

    buckets: tuple[int, ...]
    total: float
    count: int
    no_draft: int


NO_REQUESTS = ClassCounts((0,) * len(REQUEST_BUCKETS), 0.0, 0, 0)


class _Tally:
    """Counts of one traffic class (not locked: the owner holds the lock)."""

    __slots__ = ("buckets", "count", "no_draft", "total")

    def __init__(self) -> None:
        self.buckets = [0] * len(REQUEST_BUCKETS)
        self.total = 0.0
        self.count = 0
        self.no_draft = 0

    def add(self, record: RequestRecord, length: float) -> None:
        at = bisect.bisect_left(REQUEST_BUCKETS, length)
        if at < len(REQUEST_BUCKETS):
            self.buckets[at] += 1
        self.total += length
        self.count += 1
        self.no_draft += no_draft_accepted(record)

    def counts(self) -> ClassCounts:
        cumulative, running = [], 0
        for count in self.buckets:
            running += count
            cumulative.append(running)
        return ClassCounts(tuple(cumulative), self.total, self.count, self.no_draft)


class _Second:
    """The speculative requests observed in one second, and their logged times."""

    __slots__ = ("first", "last", "no_benefit", "requests", "second")

    def __init__(self, second: int) -> None:
        self.second = second
        self.requests = 0
        self.no_benefit = 0
        self.first: str | None = None
        self.last: str | None = None

    def add(self, time: str | None, no_benefit: bool) -> None:
        self.requests += 1
        self.no_benefit += no_benefit
        if time is not None:
            self.first = self.first or time
            self.last = time


def _share(seconds: Sequence[_Second]) -> RecentShare:
    return RecentShare(
        sum(s.requests for s in seconds),
        sum(s.no_benefit for s in seconds),
        next((s.first for s in seconds if s.first), None),
        next((s.last for s in reversed(seconds) if s.last), None),
    )


@dataclass(frozen=True, slots=True)
class RequestsSnapshot:
    """Finished requests read (with figures or without), those read from clipped lines, the
    classes' counts (key None without a configured label) and the recent share."""

    finished: int
    clipped: int
    classes: dict[str | None, ClassCounts]
    recent: RecentShare | None


class RequestStats:
    """The requests of one target; thread-safe. ``label_header``: the logged header whose
    value names a request's traffic class, if configured; only the first ``max_classes``
    values seen get their own class."""

    def __init__(self, label_header: str | None = None, max_classes: int = DEFAULT_MAX_CLASSES):
        self._header = label_header
        self._max_classes = max_classes
        self._lock = threading.Lock()
        self._finished = 0
        self._clipped = 0
        self._classes: dict[str | None, _Tally] = {}
        # The recent requests, per second of observation (at most RECENT_SECONDS of them).
        self._recent: deque[_Second] = deque()

    def add(self, records: Sequence[RequestRecord], observed_at: float) -> None:
        second = int(observed_at)
        with self._lock:
            for record in records:
                self._finished += 1
                self._clipped += record.clipped
                length = record.accept_length
                if length is None:
                    continue
                self._tally(record).add(record, length)
                self._remember(second, record.time, length <= NO_BENEFIT_ACCEPT_LENGTH)
            self._forget(observed_at)

    def _tally(self, record: RequestRecord) -> _Tally:
        key = self._class_of(record)
        tally = self._classes.get(key)
        if tally is None:
            tally = self._classes[key] = _Tally()
        return tally

    def _class_of(self, record: RequestRecord) -> str | None:
        if self._header is None:
            return None
        value = dict(record.headers).get(self._header, UNLABELLED)
        if value in self._classes or value in (OTHER, UNLABELLED):
            return value
        own = sum(1 for key in self._classes if key not in (OTHER, UNLABELLED))
        return value if own < self._max_classes else OTHER

    def _remember(self, second: int, time: str | None, no_benefit: bool) -> None:
        recent = self._recent
        if recent and second < recent[-1].second:
            # Read after newer ones (an old log moved in beside a live one): older than the
            # share's span it is not recent; within it, it joins the newest second, so the
            # seconds stay in order for ``_forget``.
            if second < recent[-1].second - RECENT_SECONDS:
                return
            second = recent[-1].second
        if not recent or recent[-1].second != second:
            recent.append(_Second(second))
        recent[-1].add(time, no_benefit)

    def _forget(self, now: float) -> None:
        recent = self._recent
        while recent and recent[0].second < now - RECENT_SECONDS:
            recent.popleft()

    def snapshot(self, now: float) -> RequestsSnapshot:
        with self._lock:
            self._forget(now)
            classes = {key: tally.counts() for key, tally in self._classes.items()}
            recent = _share(self._recent) if self._recent else None
        if recent is not None:
            recent = _with_worst_class(recent, classes)
        return RequestsSnapshot(self._finished, self._clipped, classes, recent)


def _with_worst_class(recent: RecentShare, classes: dict[str | None, ClassCounts]) -> RecentShare:
    """``recent`` naming the traffic class (of those with enough requests to judge) whose
    requests most often got no benefit: where an on-call looks first."""
    bound = REQUEST_BUCKETS.index(NO_BENEFIT_ACCEPT_LENGTH)
    judged = [
        (counts.buckets[bound] / counts.count, name)
        for name, counts in classes.items()
        if name is not None and counts.count >= MIN_CLASS_REQUESTS
    ]
    if not judged:
        return recent
    share, name = max(judged)
    return replace(recent, worst_class=name, worst_class_share=share)
