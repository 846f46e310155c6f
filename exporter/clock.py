"""The daemon's clock: the wall clock's reading at start, advanced by the monotonic clock.

Ages, staleness and which of two observations is newer are decided on it, so a wall clock
stepped back an hour (NTP, a VM resumed) no longer froze the accept length at its pre-step
value and called it "0 s ago". A file's modification time, a date on the wall clock, only
dates what a file held when specwatch first read it: :func:`since` turns it into a moment on
this clock, and a date in the future is unknown rather than now.
"""

from __future__ import annotations

import time

_WALL_AT_START = time.time()
_MONOTONIC_AT_START = time.monotonic()

UNKNOWN = 0.0
"""The moment given to content whose date cannot be true (a modification time in the future):
the oldest there is, so it is never taken as current."""


def now() -> float:
    """Seconds since the epoch, as the wall clock said at start plus the time since."""
    return _WALL_AT_START + (time.monotonic() - _MONOTONIC_AT_START)


def since(date: float) -> float:
    """The moment on this clock of a wall-clock ``date`` (a file's mtime): as long before now
    as the wall clock says it is; :data:`UNKNOWN` for a date after the wall clock's now."""
    age = time.time() - date
    return UNKNOWN if age < 0 else now() - age
