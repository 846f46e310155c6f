"""What a line source tells its consumer: raw lines plus the file events that explain them.

The tailer knows nothing about engines or parsing. It hands over bytes and says when the file
behind them changed, so the consumer can reset per-file state and count what happened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

SkipReason = Literal["too_long", "partial_discarded"]
"""``too_long``: a line over ``max_line_bytes``, dropped up to its newline and counted once.
``partial_discarded``: an unterminated fragment dropped when its file was truncated or retired."""

ReadErrorReason = Literal[
    "permission", "vanished", "stale", "io", "stat", "open", "read", "internal"
]
"""A bounded set, so the consumer can use it as a metric label as is."""


class TailEvents(Protocol):
    """Receiver of a line source's output; called from the source's own thread."""

    def on_lines(self, lines: list[bytes]) -> None:
        """Complete lines in order, without the trailing ``\\n`` (a trailing ``\\r`` may remain)."""

    def on_framed(self, framed: bytes) -> None:
        """Complete lines as read, each between two newlines: a consumer that reads a batch
        whole is spared splitting it. A receiver that subclasses this protocol gets them as
        ``on_lines``."""
        self.on_lines(framed.split(b"\n")[1:-1])

    def on_written_by(self, at: float) -> None:
        """The lines delivered from now on were all written by ``at`` (wall clock, never
        later than now): a file's last modification, taken after they were read. A log moved
        into place, or read from its beginning, keeps the time it was last written, so its
        lines are not taken for the server's present. Sources without such a time (a pipe)
        never call it: their lines are as old as their arrival. A receiver that subclasses
        this protocol ignores it."""
        return None

    def on_backlog(self, lines: list[bytes], written_by: float) -> None:
        """The last whole lines of what a file held when it was opened, before the lines
        from its start (``from_beginning``, or a file that appeared with lines in it), and
        when they were written at the latest: the consumer may date the backlog's lines by
        their logged distance from these. A receiver that subclasses this protocol ignores
        it."""
        return None

    def on_bootstrap(self, lines: list[bytes], mtime: float) -> None:
        """Head and tail lines of a file present at start, before any ``on_lines``; ``mtime``
        is when the file was last written, never later than now."""

    def on_new_file(self) -> None:
        """A different file (rotated, recreated, newer glob match, truncated) starts."""

    def on_rotation(self) -> None:
        """Rename+create, delete+recreate, or a newer glob match replaced the followed file."""

    def on_truncation(self) -> None:
        """The followed file shrank below the read offset (copytruncate)."""

    def on_skipped(self, reason: SkipReason) -> None:
        """One line or fragment was dropped; see ``SkipReason``."""

    def on_clipped(self, line: bytes) -> None:
        """The head and tail of a line dropped for its length (counted as ``too_long``
        already), joined: a consumer that reads records by their end may still read it."""
        return None

    def on_read_error(self, reason: ReadErrorReason) -> None:
        """A filesystem call failed; the source retries on its next pass."""


class BacklogReader(Protocol):
    """The consumer's way through a long unread stretch of the followed file (catching up on
    a big log): helper processes for its far part (``parse.ranges``), ``read_here(start,
    end)`` for what it reads through the tailer as usual. Returns the offset the tailer goes
    on from, or None to leave the stretch to the tailer."""

    def __call__(
        self,
        fd: int,
        position: int,
        size: int,
        max_line_bytes: int,
        read_here: Callable[[int, int], None],
        stopping: Callable[[], bool],
    ) -> int | None: ...
