"""One thread that acts at deadlines, for every upstream scrape in flight.

A scrape's socket is shut down at its deadline so that a read blocked on a trickling server
fails at once. A ``threading.Timer`` per scrape did that with a thread per scrape; here one
thread keeps the deadlines in a heap, and a scrape that ends in time cancels its own.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Deadlines:
    """Calls each registered action at its deadline unless it was cancelled before."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._actions: dict[int, Callable[[], None]] = {}
        self._numbers = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def at(self, deadline: float, action: Callable[[], None]) -> int:
        """Run ``action`` at ``deadline`` (monotonic seconds); returns a number to cancel it."""
        with self._changed:
            number = next(self._numbers)
            self._actions[number] = action
            heapq.heappush(self._heap, (deadline, number))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="specwatch-deadlines", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return number

    def cancel(self, number: int) -> None:
        with self._changed:
            self._actions.pop(number, None)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._changed.wait(wait)
                _, number = heapq.heappop(self._heap)
                action = self._actions.pop(number, None)
            if action is not None:
                action()


DEADLINES = Deadlines()
