"""Interpreter settings every specwatch process starts with."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def starting() -> Iterator[None]:
    """A long-lived process's set-up without the cycle collector, its objects then left out
    of every later collection (``gc.freeze``).

    The daemon's set-up (its imports, config models, targets) makes objects that live as long
    as the process and no cyclic garbage worth a pass: a collection in it took 10 to 26 ms of
    a start, and every full collection afterwards walked those objects again for nothing.
    Not for one-shot commands run in a process that goes on (tests): what is frozen is never
    collected."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
