"""Waiting for something to happen, always with a deadline.

Tests wait only for positive conditions (a line counted, a server answering). That nothing
happens is shown by stepping the code (``FileTailer.poll()``), never by sleeping and looking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How long a process a test starts (the daemon, simulate) may take to come up, or to stop
# once told. A second or two on a quiet machine, but past 15 s under a loaded machine's test
# runs; the wait ends as soon as it is done, so only a process that never comes up or never
# stops costs the whole of it. How fast it starts is measured in bench/, not here.
PROCESS_TIMEOUT = 60.0


# A check is often a scrape, costing the test and the daemon a few ms of CPU each: polled
# every 10 ms, a long wait kept a core a third busy watching while the work it waited for
# queued behind it. The pause after each miss grows from ``interval`` to this.
LONGEST_PAUSE = 0.1


def wait_for(
    check: Callable[[], T | None],
    timeout: float = 10.0,
    *,
    what: str = "condition",
    interval: float = 0.01,
) -> T:
    """Call ``check`` until it returns something truthy, and return that (never None); fail at
    the deadline. The first pause is ``interval``; each miss lengthens the next, up to
    ``LONGEST_PAUSE`` (or ``interval``, when that is longer).

    The failure names ``what`` and the last value seen, which is usually the whole diagnosis.
    """
    deadline = time.monotonic() + timeout
    pause = interval
    last = check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s (last: {last!r})")
        time.sleep(pause)
        pause = min(pause * 1.5, max(interval, LONGEST_PAUSE))
        last = check()
    return last
