"""Which samples of the server's ``/metrics`` specwatch believes.

The server is hostile input like its log: one ``-Inf`` accept length fired the critical
collapse alert, one ``NaN`` silenced it for good, a 0-1 usage read 332,667, and two copies of
one series were summed as if two ranks. Each series specwatch reads is held to the range its
meaning allows; a sample outside it, and every copy of a series given twice, is dropped and
counted by reason, so a bad value is never exported and never mistaken for the server's state.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from exporter.engines.counters import MAX_ACCEPT_LENGTH

Samples = dict[str, list[tuple[dict[str, str], float]]]

# ``inconsistent``: a window whose counters, each in range, cannot be true together (more
# tokens accepted than drafted); its accept length and ratio are not derived.
DROP_REASONS = ("non_finite", "negative", "out_of_range", "duplicate", "inconsistent")
# A count no server reaches (a billion tokens a second for 30 years is 1e18) and that 20,000
# of stay finite when summed: two finite 1.7e308 ranks summed to +Inf.
MAX_COUNT = 1e18


def checked(samples: Samples, bounds: Callable[[str], str | None]) -> tuple[Samples, Counter[str]]:
    """``samples`` without what cannot be true, and how many were dropped by reason.

    ``bounds`` tells how a name is bounded, as the engine that reads it says (the readers'
    ``bounds``): ``count`` (0 to ``MAX_COUNT``), ``ratio`` (a 0-1 share) or ``accept_length`` (0, or
    1 to ``MAX_ACCEPT_LENGTH``); None for a name no engine reads, which is left alone.
    """
    dropped: Counter[str] = Counter()
    kept = dict(samples)
    for name in samples:
        kind = bounds(name)
        if kind is None:
            continue
        seen = Counter(frozenset(labels.items()) for labels, _ in samples[name])
        good = []
        for labels, value in samples[name]:
            reason = _problem(kind, value)
            if seen[frozenset(labels.items())] > 1:
                reason = "duplicate"
            if reason is None:
                good.append((labels, value))
            else:
                dropped[reason] += 1
        kept[name] = good
    return kept, dropped


def _problem(kind: str, value: float) -> str | None:
    if not math.isfinite(value):
        return "non_finite"
    if value < 0:
        return "negative"
    if kind == "count" and value > MAX_COUNT:
        return "out_of_range"
    if kind == "ratio" and value > 1:
        return "out_of_range"
    if kind == "accept_length" and (0 < value < 1 or value > MAX_ACCEPT_LENGTH):
        return "out_of_range"
    return None
