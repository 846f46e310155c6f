"""Accept length per DP rank: one rank's collapse is not averaged away by the others.

With DP attention every rank runs its own drafter on its own requests. A rank whose drafter
state went bad (a corrupted KV cache, a rank that reloaded the wrong draft) accepts nothing
while the others stay healthy, and the node's mean barely moves: five ranks at 2.4 and one at
1.00 average 2.17. So the ranks are also judged one by one, here for all three readers.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from math import isfinite
from operator import add, attrgetter
from statistics import fmean
from typing import cast

from exporter.engines.record import StatsRecord, drafting_off

# Ranks followed one by one; more distinct ranks than this are hostile input, not a node.
MAX_RANKS = 256


@dataclass(frozen=True, slots=True)
class RankAccept:
    """One DP rank's mean accept length over its windows."""

    dp_rank: int
    windows: int
    accept_length: float


class RankAccepts:
    """Accept lengths by DP rank: all of a run's (``recent=None``: sums) or each rank's
    ``recent`` newest windows (the daemon's present)."""

    def __init__(self, recent: int | None = None) -> None:
        self._recent = recent
        self._values: dict[int, deque[float]] = {}
        self._sums: dict[int, list[float]] = {}  # rank -> [sum, count]

    def add(self, records: Iterable[StatsRecord]) -> None:
        if type(records) is list and len(records) == 1 and records[0].dp_rank is None:
            return  # a live pass's one line of a node without DP ranks: nothing to add
        # Drafting off is told by ``extra``, which few records carry.
        drafted = [r for r in records if not (r.extra and drafting_off(r))]
        self.add_lengths(list(map(_DP_RANK, drafted)), list(map(_ACCEPT_LENGTH, drafted)))

    def add_lengths(self, ranks: Iterable[int | None], lengths: Iterable[float | None]) -> None:
        """Windows that drafted, by their DP ranks and accept lengths (a batch's columns)."""
        if self._recent is None and isinstance(ranks, list) and isinstance(lengths, list):
            counted = _all_counted(ranks, lengths)
            if counted is not None:
                self._add_sums(*counted)
                return
        for rank, length in zip(ranks, lengths, strict=False):
            if rank is None or length is None or not isfinite(length):
                continue  # a hostile line's inf or nan: nothing of a drafter
            if self._recent is None:
                total = self._sums.get(rank)
                if total is None:
                    if len(self._sums) >= MAX_RANKS:
                        continue
                    total = self._sums[rank] = [0.0, 0.0]
                total[0] += length
                total[1] += 1
                continue
            values = self._values.get(rank)
            if values is None:
                if len(self._values) >= MAX_RANKS:
                    continue
                values = self._values[rank] = deque(maxlen=self._recent)
            values.append(length)

    def _add_sums(self, ranks: list[int], lengths: list[float]) -> None:
        """:meth:`add_lengths` of windows that all count, into the sums: each rank's lengths
        gathered first, then summed in their order (a float sum depends on it)."""
        by_rank: defaultdict[int, list[float]] = defaultdict(list)
        for rank, length in zip(ranks, lengths, strict=False):
            by_rank[rank].append(length)
        sums = self._sums
        for rank, values in by_rank.items():  # in the order the ranks first logged
            total = sums.get(rank)
            if total is None:
                if len(sums) >= MAX_RANKS:
                    continue
                total = sums[rank] = [0.0, 0.0]
            total[0] = reduce(add, values, total[0])
            total[1] += len(values)

    def figures(self) -> tuple[RankAccept, ...]:
        """Every rank's mean, by rank number."""
        if self._recent is None:
            found = [RankAccept(r, int(n), s / n) for r, (s, n) in self._sums.items()]
        else:
            found = [RankAccept(r, len(v), fmean(v)) for r, v in self._values.items()]
        return tuple(sorted(found, key=lambda rank: rank.dp_rank))


def _all_counted(
    ranks: list[int | None], lengths: list[float | None]
) -> tuple[list[int], list[float]] | None:
    """The columns, where every window names its rank and a finite accept length (found in
    C: a finite sum has no inf or nan in it); else None."""
    if None in ranks or None in lengths:
        return None
    known = cast("list[float]", lengths)
    return (cast("list[int]", ranks), known) if isfinite(sum(known)) else None


_DP_RANK = attrgetter("dp_rank")
_ACCEPT_LENGTH = attrgetter("accept_length")
