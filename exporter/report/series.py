"""Bounded-memory time series for charts of logs of any length.

A multi-GB log has millions of decode windows; a chart has a few hundred pixels across. The
series keeps at most ``max_points`` buckets: when full, neighbouring buckets are merged
pairwise and each new bucket covers twice as many windows. Memory stays constant and every
window still contributes to exactly one plotted mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Bucket:
    start: float
    windows: int = 0
    sums: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)

    def add(self, values: tuple[float | None, ...]) -> None:
        self.windows += 1
        for i, value in enumerate(values):
            if value is not None:
                self.sums[i] += value
                self.counts[i] += 1

    def absorb(self, other: _Bucket) -> None:
        self.windows += other.windows
        for i in range(len(self.sums)):
            self.sums[i] += other.sums[i]
            self.counts[i] += other.counts[i]

    def means(self) -> tuple[float | None, ...]:
        return tuple(s / c if c else None for s, c in zip(self.sums, self.counts, strict=True))


@dataclass(frozen=True, slots=True)
class Point:
    """One plotted point: the time of its first window and the mean of each field."""

    time: float
    values: dict[str, float | None]


class Downsampler:
    """Append-only series of ``fields`` per window, averaged into at most ``max_points``."""

    def __init__(self, fields: tuple[str, ...], max_points: int = 1200) -> None:
        if max_points < 2:
            raise ValueError("max_points must be at least 2")
        self.fields = fields
        self._max = max_points
        self._per_bucket = 1
        self._buckets: list[_Bucket] = []

    def add(self, time: float, values: tuple[float | None, ...]) -> None:
        """Record one window at ``time`` (seconds); ``None`` values are left out of the mean."""
        last = self._buckets[-1] if self._buckets else None
        if last is None or last.windows >= self._per_bucket:
            if len(self._buckets) >= self._max:
                self._halve()
            width = len(self.fields)
            last = _Bucket(start=time, sums=[0.0] * width, counts=[0] * width)
            self._buckets.append(last)
        last.add(values)

    def points(self) -> list[Point]:
        return [
            Point(b.start, dict(zip(self.fields, b.means(), strict=True))) for b in self._buckets
        ]

    def __len__(self) -> int:
        return len(self._buckets)

    def _halve(self) -> None:
        merged: list[_Bucket] = []
        for i in range(0, len(self._buckets), 2):
            bucket = self._buckets[i]
            if i + 1 < len(self._buckets):
                bucket.absorb(self._buckets[i + 1])
            merged.append(bucket)
        self._buckets = merged
        self._per_bucket *= 2
