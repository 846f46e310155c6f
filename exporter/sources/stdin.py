"""Lines from standard input (``specwatch run --log-file -``), e.g. ``sglang ... | specwatch``.

Same splitting and length cap as the file tailer. Standard input cannot rotate or be reread,
so there is no bootstrap and no file events; at end of input the last unterminated line is
complete (the writer is done) and is delivered too.
"""

from __future__ import annotations

import io
import logging
import select
import sys
import threading
from collections.abc import Callable
from typing import IO

from exporter.sources.tail.events import TailEvents
from exporter.sources.tail.lines import CHUNK_BYTES, LineSplitter

log = logging.getLogger(__name__)

_STOP_CHECK_SECONDS = 0.2
"""How long one wait for input may last before the thread checks whether it should stop."""


class StdinSource:
    """Reads a binary stream in chunks on a thread and hands complete lines to ``events``."""

    def __init__(
        self,
        events: TailEvents,
        stream: IO[bytes] | None = None,
        *,
        max_line_bytes: int = 1 << 20,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self._events = events
        self._on_end = on_end
        self._stream = stream if stream is not None else sys.stdin.buffer
        self._splitter = LineSplitter(max_line_bytes)
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        """Set once the reading thread runs: a pipe keeps what is written before that, so
        nothing is ever taken as old."""

    def start(self) -> None:
        """Read in a background daemon thread; a second call does nothing."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="specwatch-stdin", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reading (within about 0.2 s even while no input arrives); idempotent."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the input ended and every line was delivered; False on timeout."""
        return self._finished.wait(timeout)

    def _run(self) -> None:
        self.ready.set()
        try:
            while not self._stopping.is_set():
                if not self._input_ready():
                    continue
                chunk = self._read_chunk()
                if not chunk:
                    self._flush()
                    self._end()
                    return
                self._deliver(chunk)
        except OSError as exc:
            log.warning("reading standard input failed: %s", exc)
            self._events.on_read_error("io")
            self._end()
        finally:
            self._finished.set()

    def _end(self) -> None:
        """No more input will come: tell the owner, which decides whether that ends the run."""
        if self._on_end is not None:
            self._on_end()

    def _deliver(self, chunk: bytes) -> None:
        """A consumer bug costs this chunk's lines, counted, never the rest of the input."""
        try:
            self._splitter.feed(chunk).deliver(self._events)
        except Exception:
            log.exception("handling standard input failed; reading on")
            self._events.on_read_error("internal")

    def _input_ready(self) -> bool:
        """Wait briefly for input so stop() is noticed; streams without a descriptor block."""
        try:
            fd = self._stream.fileno()
        except (OSError, io.UnsupportedOperation):
            return True
        readable, _, _ = select.select([fd], [], [], _STOP_CHECK_SECONDS)
        return bool(readable)

    def _read_chunk(self) -> bytes:
        """Whatever is available, up to one chunk: never wait for a full chunk on a pipe."""
        read1 = getattr(self._stream, "read1", None)
        return read1(CHUNK_BYTES) if read1 is not None else self._stream.read(CHUNK_BYTES)

    def _flush(self) -> None:
        line = self._splitter.flush()
        if line is not None:
            self._events.on_lines([line])
