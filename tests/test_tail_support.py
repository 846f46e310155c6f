"""Shared pieces for the tailer tests: a recording ``TailEvents`` and a deadline wait."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exporter.sources.tail import FileTailer

FAST = {"poll_interval": 0.02, "rotate_wait": 0.3}
"""Tailer timings that keep each test well under a second of waiting."""


class Recorder:
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

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.snapshot() if k == kind)

    def reasons(self, kind: str) -> Counter[str]:
        """How often each reason of ``skipped`` or ``read_error`` events occurred."""
        return Counter(payload for k, payload in self.snapshot() if k == kind)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 2.0) -> None:
    """Poll ``condition`` until true; fail naming ``what`` when the deadline passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def let_tailer_run(seconds: float = 0.15) -> None:
    """Give a running tailer several poll passes, to show something does *not* happen."""
    time.sleep(seconds)


@contextmanager
def following(pattern: Path | str, **options: Any) -> Iterator[tuple[FileTailer, Recorder]]:
    """A started ``FileTailer`` with fast timings and a ``Recorder``; stopped on exit."""
    recorder = Recorder()
    tailer = FileTailer(str(pattern), recorder, **{**FAST, **options})
    tailer.start()
    try:
        yield tailer, recorder
    finally:
        tailer.stop()


def append(path: Path, data: bytes) -> None:
    """One write to the end of ``path``, as a logging process does."""
    with open(path, "ab") as handle:
        handle.write(data)


def numbered(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix} {i}".encode() for i in range(count)]


def joined(lines: list[bytes]) -> bytes:
    """Lines as written to a log: each one newline-terminated."""
    return b"".join(line + b"\n" for line in lines)


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
