"""Bounded-memory time series for charts of logs of any length.

A multi-GB log has millions of decode windows; a chart has a few hundred pixels across. The
series keeps at most ``max_points`` buckets: when full, neighbouring buckets are merged
pairwise and each new bucket covers twice as many windows. Memory stays constant and every
window still contributes to exactly one plotted mean.

A chart must not draw a line through time the server did not decode: an idle spell (SGLang
logs no decode window without running requests) or a restart. Such a break starts a new
bucket, and merging leaves it in place as long as breaks are a minority of the buckets.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# No decode window for this long: the server was idle, stalled or down, not decoding slowly
# (a decode window is logged every few dozen steps, seconds apart at the slowest).
IDLE_GAP_SECONDS = 60.0
# A crash-looping server restarts thousands of times; the newest marks are the ones to see.
MAX_RESTARTS = 100


@dataclass(slots=True)
class _Bucket:
    start: float
    end: float
    after_break: bool
    windows: int = 0
    sums: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)

    def add(self, time: float, values: tuple[float | None, ...]) -> None:
        self.windows += 1
        if time > self.end:
            self.end = time
        sums, counts = self.sums, self.counts  # a report adds a window every few lines
        for i, value in enumerate(values):
            if value is not None:
                sums[i] += value
                counts[i] += 1

    def absorb(self, other: _Bucket) -> None:
        self.windows += other.windows
        self.end = max(self.end, other.end)
        for i in range(len(self.sums)):
            self.sums[i] += other.sums[i]
            self.counts[i] += other.counts[i]

    def means(self) -> tuple[float | None, ...]:
        return tuple(s / c if c else None for s, c in zip(self.sums, self.counts, strict=True))


@dataclass(frozen=True, slots=True)
class Point:
    """One plotted point: the time of its first window and the mean of each field.

    ``after_break``: an idle spell or a restart lies between the previous point and this one,
    so no line may join them.
    """

    time: float
    values: dict[str, float | None]
    end: float = 0.0  # time of its last window
    after_break: bool = False


class Downsampler:
    """Append-only series of ``fields`` per window, averaged into at most ``max_points``."""

    def __init__(
        self,
        fields: tuple[str, ...],
        max_points: int = 1200,
        idle_gap: float = IDLE_GAP_SECONDS,
    ) -> None:
        if max_points < 2:
            raise ValueError("max_points must be at least 2")
        self.fields = fields
        self._max = max_points
        self._idle_gap = idle_gap
        self._per_bucket = 1
        self._buckets: list[_Bucket] = []
        self._break_pending = False
        self.restarts: deque[float] = deque(maxlen=MAX_RESTARTS)

    def add(self, time: float, values: tuple[float | None, ...]) -> None:
        """Record one window at ``time`` (seconds); ``None`` values are left out of the mean."""
        last = self._buckets[-1] if self._buckets else None
        broken = self._break_pending or (last is not None and abs(time - last.end) > self._idle_gap)
        if last is None or broken or last.windows >= self._per_bucket:
            if len(self._buckets) >= self._max:
                self._halve()
            width = len(self.fields)
            last = _Bucket(time, time, broken, sums=[0.0] * width, counts=[0] * width)
            self._buckets.append(last)
            self._break_pending = False
        last.add(time, values)

    def restart(self, at: float | None) -> None:
        """A new server run begins at ``at``: its windows never share a line or a mean with
        the previous run's. Marked for the charts when windows came before it."""
        self._break_pending = True
        if at is not None and self._buckets:
            self.restarts.append(at)

    def points(self) -> list[Point]:
        return [
            Point(b.start, dict(zip(self.fields, b.means(), strict=True)), b.end, b.after_break)
            for b in self._buckets
        ]

    def __len__(self) -> int:
        return len(self._buckets)

    def _halve(self) -> None:
        """Double the windows per bucket; across a break only when breaks crowd the series."""
        merged = self._merged(keep_breaks=True)
        if len(merged) > self._max * 3 // 4:
            merged = self._merged(keep_breaks=False)
        self._buckets = merged
        self._per_bucket *= 2

    def _merged(self, keep_breaks: bool) -> list[_Bucket]:
        merged: list[_Bucket] = []
        for bucket in self._buckets:
            previous = merged[-1] if merged else None
            joinable = previous is not None and not (keep_breaks and bucket.after_break)
            if previous is not None and joinable and previous.windows < self._per_bucket * 2:
                previous.absorb(bucket)
            else:
                merged.append(_copy(bucket))
        return merged


def _copy(bucket: _Bucket) -> _Bucket:
    return _Bucket(
        bucket.start,
        bucket.end,
        bucket.after_break,
        bucket.windows,
        list(bucket.sums),
        list(bucket.counts),
    )
