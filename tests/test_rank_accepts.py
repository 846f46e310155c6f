"""Accept lengths by DP rank: a batch's columns fold as its windows one at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.analysis.ranks import MAX_RANKS, RankAccepts

_LENGTHS = st.one_of(
    st.none(),
    st.floats(1.0, 8.0),
    st.sampled_from([float("inf"), float("nan"), 1e308]),
)
_WINDOWS = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, MAX_RANKS + 20)), _LENGTHS), max_size=80
)


@given(st.lists(_WINDOWS, max_size=6))
def test_columns_fold_as_one_window_at_a_time(
    batches: list[list[tuple[int | None, float | None]]],
) -> None:
    columns, each = RankAccepts(), RankAccepts()
    for windows in batches:
        columns.add_lengths([rank for rank, _ in windows], [length for _, length in windows])
        for rank, length in windows:
            each.add_lengths(iter([rank]), iter([length]))
    assert columns.figures() == each.figures()


def test_ranks_past_the_cap_are_left_out_in_the_order_they_first_logged() -> None:
    accepts = RankAccepts()
    ranks = list(range(MAX_RANKS + 3, -1, -1))
    accepts.add_lengths(ranks, [2.0] * len(ranks))
    kept = [rank.dp_rank for rank in accepts.figures()]
    assert kept == sorted(ranks[:MAX_RANKS])
