"""A recording ``TailEvents`` and file tailers to drive with it.

``stepped`` gives a tailer that only moves when the test calls ``poll()``: one pass each, so a
test can show that a pass did *not* deliver something. ``following`` gives a running tailer, for
what needs its thread (wake-ups, stop), waited on with ``wait_for``; ``turned`` waits for a
running ``TailLoop`` to have taken what happened before it, so a test can show that the loop
holds a read back without sleeping first.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exporter.config import TargetConfig
from exporter.sources.tail import FileTailer, TailEvents
from exporter.sources.tail.loop import TailLoop
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.metrics import Scrape, render
from tests.support.waiting import wait_for

FAST: dict[str, Any] = {"poll_interval": 0.02, "rotate_wait": 0.3}
"""Tailer timings that keep each test well under a second of waiting."""


class _Turns:
    """A job of a ``TailLoop`` that makes two passes at once, then none: counts the loop's
    rounds."""

    def __init__(self) -> None:
        self.passes = 0

    def step(self) -> float:
        self.passes += 1
        return 0.0 if self.passes < 2 else math.inf


def turned(loop: TailLoop) -> None:
    """Wait until ``loop`` has gone round twice from now: every notification of a write or an
    open made before this call is taken, and every pass it made due at once is made (each
    round takes the notifications queued, then makes the passes due, earliest first)."""
    turns = _Turns()
    loop.add(turns)
    try:
        wait_for(lambda: turns.passes >= 2, what="two rounds of the tail loop")
    finally:
        loop.remove(turns)


class Recorder(TailEvents):
    """Records every event in arrival order; safe to read while the tailer thread writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[str, Any]] = []

    def _add(self, kind: str, payload: Any = None) -> None:
        with self._lock:
            self.events.append((kind, payload))

    def on_lines(self, lines: list[bytes]) -> None:
        self._add("lines", list(lines))

    def on_bootstrap(self, lines: list[bytes], mtime: float) -> None:
        self._add("bootstrap", (list(lines), mtime))

    def on_backlog(self, lines: list[bytes], written_by: float) -> None:
        self._add("backlog", (list(lines), written_by))

    def on_new_file(self) -> None:
        self._add("new_file")

    def on_rotation(self) -> None:
        self._add("rotation")

    def on_truncation(self) -> None:
        self._add("truncation")

    def on_skipped(self, reason: str) -> None:
        self._add("skipped", reason)

    def on_read_error(self, reason: str) -> None:
        self._add("read_error", reason)

    def snapshot(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self.events)

    @property
    def lines(self) -> list[bytes]:
        """All lines given through ``on_lines``, flattened, in order."""
        return [line for kind, batch in self.snapshot() if kind == "lines" for line in batch]

    @property
    def bootstraps(self) -> list[tuple[list[bytes], float]]:
        return [payload for kind, payload in self.snapshot() if kind == "bootstrap"]

    @property
    def backlogs(self) -> list[tuple[list[bytes], float]]:
        return [payload for kind, payload in self.snapshot() if kind == "backlog"]

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.snapshot() if k == kind)

    def reasons(self, kind: str) -> Counter[str]:
        """How often each reason of ``skipped`` or ``read_error`` events occurred."""
        return Counter(payload for k, payload in self.snapshot() if k == kind)


@contextmanager
def stepped(pattern: Path | str, **options: Any) -> Iterator[tuple[FileTailer, Recorder]]:
    """A ``FileTailer`` that is never started: each ``poll()`` is one pass; closed on exit."""
    recorder = Recorder()
    tailer = FileTailer(str(pattern), recorder, **{**FAST, **options})
    try:
        yield tailer, recorder
    finally:
        tailer.stop()


@contextmanager
def stepped_target(pattern: Path | str) -> Iterator[tuple[FileTailer, Callable[[], Scrape]]]:
    """The daemon's path from one log to a scrape, stepped: tailer, feed, state, collector.

    Yields the never-started tailer and a function rendering what ``/metrics`` shows now.
    """
    target = Target.from_config(TargetConfig(name="node", log_files=[str(pattern)]))
    feed = LogFeed(target.state, target.custom_rules)
    tailer = FileTailer(str(pattern), feed, **FAST)
    try:
        yield tailer, lambda: render([target], time.time)
    finally:
        tailer.stop()


@contextmanager
def following(pattern: Path | str, **options: Any) -> Iterator[tuple[FileTailer, Recorder]]:
    """A started ``FileTailer`` with fast timings and a ``Recorder``; stopped on exit."""
    with stepped(pattern, **options) as (tailer, recorder):
        tailer.start()
        yield tailer, recorder


class FailingOnce(Recorder):
    """A consumer with a bug that raises on its first batch of lines."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def on_lines(self, lines: list[bytes]) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("consumer bug")
        super().on_lines(lines)
