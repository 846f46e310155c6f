"""What judging one target costs as its run grows old: the daemon judges every target at every
scrape and every few seconds on its own, over all of the run's minute-long stretches (up to a
day of them).

A run of a steady node, one decode window a second, is folded into stretches; then, as a
live daemon does, a window more is added and the target judged again, ``--judgements`` times:
once as a daemon judges (the run's ``StateMemo`` kept from one judgement to the next, after
one judgement of the run not timed: a daemon's memo has judged its run from the start), once
afresh (as before the memo). CPU per judgement, the copy of the stretches included.

    .venv/bin/python bench/judge_bench.py [--hours 0.1 1 24] [--judgements 20]
"""

from __future__ import annotations

import argparse
import time

from exporter.analysis.judge import Case, StateMemo, Stretches, judge

T0 = 1_800_000_000.0


def run_of(seconds: int) -> Stretches:
    """A steady node's windows, one a second for ``seconds``."""
    stretches = Stretches()
    for second in range(seconds):
        at = T0 + second
        stretches.add_window(at, 32.0, 40.0, False)
        stretches.add_moment(at, 8, 600.0, None, False)
    return stretches


def per_judgement(stretches: Stretches, at: float, judgements: int, kept: bool) -> float:
    """CPU seconds per judgement, a window added before each."""
    memo = StateMemo() if kept else None
    if memo is not None:  # a daemon's memo knows the run's states: not timed, as in a day
        judge(Case(stretches=stretches.items(), now=at - 1, memo=memo))
    spent = 0.0
    for number in range(judgements):
        now = at + number
        stretches.add_window(now, 32.0, 40.0, False)
        stretches.add_moment(now, 8, 600.0, None, False)
        start = time.thread_time()
        judge(Case(stretches=stretches.items(), now=now, memo=memo))
        spent += time.thread_time() - start
    return spent / judgements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[0.1, 1.0, 24.0])
    parser.add_argument("--judgements", type=int, default=20)
    args = parser.parse_args()
    print("| run | stretches | judged as the daemon does (memo) | afresh |")
    print("|---|---|---|---|")
    for hours in args.hours:
        seconds = int(hours * 3600)
        stretches = run_of(seconds)
        count = len(stretches.items())
        kept = per_judgement(stretches, T0 + seconds, args.judgements, kept=True)
        fresh = per_judgement(stretches, T0 + seconds + args.judgements, args.judgements, False)
        print(f"| {hours:g} h | {count} | {kept * 1e3:.2f} ms | {fresh * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
