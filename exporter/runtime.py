"""Interpreter settings every specwatch process starts with."""

from __future__ import annotations

import gc

# Reading a log allocates a record (a tuple) and often a dict per stats line, nearly all of
# them garbage a moment later, and none in a reference cycle. With CPython's default of 700
# the cycle collector ran every few hundred lines and took 6 to 8% of a report's CPU; at this
# threshold it runs a few times per ten thousand lines, and holds at most that many objects
# for it, a few MB.
YOUNG_GENERATION_THRESHOLD = 20_000


def tune_gc() -> None:
    """Run the cycle collector less often: see ``YOUNG_GENERATION_THRESHOLD``."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, oldest)
