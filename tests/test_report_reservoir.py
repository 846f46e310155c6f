"""The findings' sample of a long log: uniform, though only kept windows cost a random draw."""

from __future__ import annotations

import random
from collections import Counter
from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st

from exporter.report.reservoir import Reservoir


def sample(stream: range, size: int, seed: int) -> list[int]:
    """Offer ``stream`` as the report does: only the item at the due position is handed over."""
    reservoir = Reservoir[int](size, random.Random(seed))
    for position, item in enumerate(stream, start=1):
        if position == reservoir.due:
            reservoir.keep(item)
    return reservoir.items


@given(st.integers(1, 50), st.integers(0, 50), st.integers(0, 2**32))
def test_reservoir_keeps_a_stream_no_longer_than_it_whole_and_in_order(
    size: int, length: int, seed: int
) -> None:
    stream = range(min(size, length))
    assert sample(stream, size, seed) == list(stream)


@given(st.integers(1, 20), st.integers(0, 500), st.integers(0, 2**32))
def test_reservoir_keeps_size_distinct_items_of_a_longer_stream(
    size: int, extra: int, seed: int
) -> None:
    stream = range(size + extra)
    kept = sample(stream, size, seed)
    assert len(kept) == size
    assert len(set(kept)) == size
    assert set(kept) <= set(stream)


def test_reservoir_keeps_every_subset_equally_often() -> None:
    # 2 of 6 items: 15 subsets, each 1/15 of 30 000 seeded draws (2 000, sd about 43).
    trials = 30_000
    seen = Counter(frozenset(sample(range(6), 2, seed)) for seed in range(trials))
    assert set(seen) == {frozenset(pair) for pair in combinations(range(6), 2)}
    expected = trials / 15
    assert all(abs(count - expected) < 6 * 43 for count in seen.values()), seen


def test_reservoir_keeps_late_items_as_often_as_early_ones_of_a_long_stream() -> None:
    # 5 of 200 items over 4 000 seeds: each item about 100 times (sd about 10).
    trials = 4_000
    seen = Counter(item for seed in range(trials) for item in sample(range(200), 5, seed))
    first, last = range(0, 100), range(100, 200)
    assert abs(sum(seen[i] for i in first) - sum(seen[i] for i in last)) < 6 * 140
    assert max(seen.values()) < 100 + 6 * 10
    assert min(seen[i] for i in range(200)) > 100 - 6 * 10
