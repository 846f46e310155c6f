"""A run judged again and again (the daemon's every scrape) decides only the stretches that
changed: the same judgement as a fresh one, whatever order the windows came in."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.analysis.judge import Case, SpeedBaseline, StateMemo, Stretches, judge

T0 = 1_800_000_000.0


def test_a_stretch_that_did_not_change_is_handed_out_as_the_same_copy() -> None:
    stretches = Stretches()
    stretches.add_window(T0, 32.0, 40.0, False)
    stretches.add_window(T0 + 61, 32.0, 40.0, False)
    first = stretches.items()
    stretches.add_window(T0 + 62, 32.0, 10.0, False)
    second = stretches.items()
    assert second[0] is first[0]
    assert second[1] is not first[1] and second[1].accepted == 50.0
    assert first[1].accepted == 40.0  # a copy handed out earlier is never changed
    stretches.add_window(T0 + 5, 32.0, 1.0, False)  # a late window, into the older stretch
    third = stretches.items()
    assert third[0] is not first[0] and third[0].accepted == 41.0
    assert third[1] == second[1]


# A window: seconds after the last one (some of them back in time: a late line), its accept
# length (None: drafting off), the node's throughput.
windows = st.lists(
    st.tuples(st.floats(-90, 400), st.one_of(st.none(), st.floats(1.0, 4.0)), st.floats(10, 900)),
    max_size=60,
)


def _add(stretches: Stretches, at: float, length: float | None, throughput: float) -> None:
    if length is None:
        stretches.add_window(at, None, None, True)
    else:
        stretches.add_window(at, 40.0, 40.0 * (length - 1.0), False)
    stretches.add_moment(at, 8, throughput, 600.0, length is None)


@given(windows, st.booleans())
def test_a_judgement_with_the_memo_is_the_judgement_without_it(
    added: list[tuple[float, float | None, float]], baseline: bool
) -> None:
    """Judged after every window, as the daemon's scrapes do, against a run whose stretches
    are copied afresh (a twin fed the same windows, asked for the first time)."""
    stretches, memo, at = Stretches(), StateMemo(), T0
    based = SpeedBaseline() if baseline else None
    moments: list[tuple[float, float | None, float]] = []
    for step, length, throughput in added:
        at = max(T0, at + step)
        moments.append((at, length, throughput))
        _add(stretches, at, length, throughput)
        twin = Stretches()
        for moment in moments:
            _add(twin, *moment)
        items = stretches.items()
        assert items == twin.items()  # every stretch that changed was copied again
        for later in (0.0, 1.0, 400.0):  # the same windows, judged again as time passes
            fresh = judge(Case(stretches=items, now=at + later, baseline=based))
            kept = judge(Case(stretches=items, now=at + later, baseline=based, memo=memo))
            assert kept == fresh


@given(windows)
def test_one_memo_judged_under_other_settings_in_turn_judges_each_as_afresh(
    added: list[tuple[float, float | None, float]],
) -> None:
    """The daemon's judge thread and a scrape may judge one run under other settings (a
    baseline, an expected accept length, two servers' mix): what the memo kept under one is
    never handed to the other."""
    stretches, memo, at = Stretches(), StateMemo(), T0
    settings: list[dict[str, object]] = [
        {},
        {"baseline": SpeedBaseline()},
        {"expected_accept_length": 3.5},
        {"interleaved": True},
    ]
    for step, length, throughput in added:
        at = max(T0, at + step)
        _add(stretches, at, length, throughput)
        items = stretches.items()
        for each in settings:
            fresh = judge(Case(stretches=items, now=at, **each))  # type: ignore[arg-type]
            kept = judge(Case(stretches=items, now=at, memo=memo, **each))  # type: ignore[arg-type]
            assert kept == fresh


# Spells of a run: minutes of one window every 20 s at one accept length (1.0 collapsed, 1.6
# low, 3.0 healthy, None drafting off, 0 too few drafts to tell), or a gap of silence.
spells = st.lists(
    st.tuples(st.integers(1, 6), st.sampled_from([1.0, 1.6, 3.0, None, 0.0])), max_size=24
)


@given(spells)
@example([(3, 3.0), *[(3, 1.0), (1, 0.0), (2, 3.0), (2, None)] * 7, (1, 1.0), (4, 3.0)])
def test_a_long_run_of_many_episodes_is_judged_with_the_memo_as_without_it(
    added: list[tuple[int, float | None]],
) -> None:
    """Since when a state holds and the past episodes, from the runs of states the memo keeps,
    are those of a walk through every stretch: over runs of many spells, more episodes than
    are told, stretches that tell nothing between them."""
    stretches, memo, at = Stretches(), StateMemo(), T0
    for minutes, length in added:
        for _ in range(minutes * 3):
            at += 20.0
            if length == 0.0:  # a window of few rounds: the stretch tells no state
                stretches.add_window(at, 1.0, 2.0, False)
            else:
                _add(stretches, at, length, 600.0)
        items = stretches.items()
        fresh = judge(Case(stretches=items, now=at))
        kept = judge(Case(stretches=items, now=at, memo=memo))
        assert kept == fresh
