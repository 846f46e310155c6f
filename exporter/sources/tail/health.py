"""Whether a configured log path is being followed, and why not when it is not.

A monitoring sidecar pointed at the wrong path exports nothing and pages nobody, so every
reason a path cannot be followed is named: once per change in a WARNING line (repeated while it
lasts, at most every ``REPEAT_SECONDS``) and continuously through the status callback, which
the daemon turns into ``specwatch_log_source_up``. A path that does not exist yet is given a
grace period first: servers are often started after their sidecar.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal, get_args

log = logging.getLogger(__name__)

SourceReason = Literal[
    "ok", "waiting", "missing", "directory", "not_regular", "unreadable", "symlink_loop", "stuck"
]
"""``ok``: a regular file is followed. ``waiting``: nothing at the path yet, within the grace
period. ``missing``: nothing at the path for longer than the grace period. ``directory``,
``not_regular`` (a FIFO, device or socket), ``unreadable`` (permission denied) and
``symlink_loop`` (symbolic links that lead back to themselves) name what is there instead of a
readable file. ``stuck``: the file is there but reading it keeps failing
(``/healthz`` answers 503 then). A bounded set, usable as a metric label as is."""

SOURCE_REASONS: tuple[SourceReason, ...] = get_args(SourceReason)

_EXPLAIN: dict[str, str] = {
    "ok": "followed",
    "waiting": "not there yet (waiting for it)",
    "missing": "no such file",
    "directory": "is a directory, not a log file",
    "not_regular": "is not a regular file (a FIFO, device or socket cannot be tailed)",
    "unreadable": "permission denied",
    "symlink_loop": "is a loop of symbolic links (too many levels), not a log file",
    "stuck": "reading it keeps failing (see the error logged before)",
}


def explain(reason: str) -> str:
    """A reason in words, for log lines and the landing page."""
    return _EXPLAIN.get(reason, reason)


REPEAT_SECONDS = 600.0
"""How often a persisting problem is logged again: visible in any log window, never a flood."""

StatusCallback = Callable[[SourceReason], None]


class SourceHealth:
    """Turns what one tail pass saw at the path into a reason, with the grace for absence."""

    def __init__(
        self,
        pattern: str,
        report: StatusCallback | None = None,
        *,
        missing_grace: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pattern = pattern
        self._report = report
        self._grace = missing_grace
        self._clock = clock
        self._started = clock()
        self._absent_since: float | None = None
        self.reason: SourceReason | None = None
        self._logged_at = 0.0

    def observe(self, problem: SourceReason | None, following: bool) -> None:
        """One pass's verdict: ``problem`` is what stood in the way (None: nothing did),
        ``following`` whether a file of the path is open."""
        now = self._clock()
        reason = self._reason(problem, following, now)
        if reason != self.reason:
            self._changed(reason, now)
        elif reason not in ("ok", "waiting") and now - self._logged_at >= REPEAT_SECONDS:
            self._warn(reason, now, "still ")
        self.reason = reason
        if self._report is not None:
            self._report(reason)

    def _reason(self, problem: SourceReason | None, following: bool, now: float) -> SourceReason:
        if problem != "missing":
            self._absent_since = None
            return problem or "ok"
        if self._absent_since is None:
            # At start the grace counts from the start; later, from the first pass without it.
            self._absent_since = self._started if self.reason is None else now
        if now - self._absent_since < self._grace:
            return "ok" if following else "waiting"
        return "missing"

    def _changed(self, reason: SourceReason, now: float) -> None:
        if reason in ("ok", "waiting"):
            if reason == "ok" and self.reason not in (None, "waiting"):
                log.info("log %s: readable again, following it", self._pattern)
            return
        self._warn(reason, now, "")

    def _warn(self, reason: SourceReason, now: float, still: str) -> None:
        self._logged_at = now
        # A missing path is still watched: saying "nothing is read" sent people to restart a
        # sidecar that would have picked the file up the moment it appeared.
        extra = (
            f" for {self._grace:g} s; still watched, and read as soon as it appears"
            if reason == "missing"
            else "; checked again on every pass, and read once that changes"
        )
        log.warning("log %s: %s%s%s", self._pattern, still, explain(reason), extra)
