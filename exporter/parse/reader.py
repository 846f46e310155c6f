"""Read log files once, front to back, in large chunks: multi-GB logs in constant memory.

The one reader of ``specwatch parse``, ``doctor`` and ``report``: the same line splitter (with
its line-length cap) and line processor as the daemon, so no command and the live exporter
disagree about what a line means. Gzipped rotations (``server.log.1.gz``) are read
transparently.
"""

from __future__ import annotations

import gzip
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO, Protocol, TextIO

from exporter.parse.pipeline import LineProcessor, RecordSink
from exporter.sources.tail.lines import CHUNK_BYTES, LineSplitter

DEFAULT_MAX_LINE_BYTES = 1 << 20
PROGRESS_INTERVAL = 0.2  # seconds between progress bar redraws


class Readable(Protocol):
    """What a log is read through: stdin, a file or a gzip stream (which is no ``BinaryIO``)."""

    def read(self, size: int = -1, /) -> bytes: ...


class ReadError(Exception):
    """A log file that cannot be opened or read."""


class Progress:
    """A one-line progress bar on a terminal; silent when the stream is not a TTY.

    Redirected stderr (CI logs, ``2> file``) must not fill with carriage-return debris.
    """

    def __init__(self, total_bytes: int, stream: TextIO | None = None, width: int = 30) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = self._stream.isatty()
        self._total = max(total_bytes, 1)
        self._width = width
        self._done = 0
        self._drawn_at = 0.0

    def update(self, done_bytes: int) -> None:
        """Set how many of the total bytes are read; redraws at most every 0.2 s."""
        self._done = done_bytes
        now = time.monotonic()
        if self._enabled and now - self._drawn_at >= PROGRESS_INTERVAL:
            self._drawn_at = now
            self._draw()

    def close(self) -> None:
        if self._enabled:
            self._stream.write("\r\x1b[K")
            self._stream.flush()

    def _draw(self) -> None:
        fraction = min(self._done / self._total, 1.0)
        filled = int(fraction * self._width)
        bar = "#" * filled + "-" * (self._width - filled)
        done, total = _size(self._done), _size(self._total)
        self._stream.write(f"\rreading [{bar}] {fraction:4.0%} {done}/{total}")
        self._stream.flush()


def total_size(paths: Sequence[str]) -> int:
    """Bytes the progress bar counts to (compressed size for .gz, 0 for stdin)."""
    return sum(os.path.getsize(p) for p in paths if p != "-" and os.path.exists(p))


def require_readable(paths: Sequence[str]) -> None:
    """Fail on the first file that cannot be opened, before anything is printed."""
    for path in paths:
        if path != "-":
            with _open(path):
                pass


def read_logs(
    paths: Sequence[str],
    sink: RecordSink,
    progress: Progress | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> None:
    """Feed every line of ``paths`` (in order; ``-`` is stdin) through one ``sink``."""
    processor = LineProcessor(sink)
    before = 0  # bytes of the files already read, for the progress bar
    for path in paths:
        processor.reset()
        splitter = LineSplitter(max_line_bytes)
        with _open(path) as (stream, raw):
            for chunk in _chunks(stream, path):
                split = splitter.feed(chunk)
                for _ in range(split.too_long):
                    sink.on_skipped("too_long")
                if split.lines:
                    processor.process(split.lines)
                if progress is not None and raw is not None:
                    progress.update(before + raw.tell())
            before += raw.tell() if raw is not None else 0
        last = splitter.flush()
        if last:
            processor.process([last])
    processor.finish()


@contextmanager
def _open(path: str) -> Iterator[tuple[Readable, BinaryIO | None]]:
    """The decompressed stream and, for progress, the raw file under it."""
    if path == "-":
        yield sys.stdin.buffer, None
        return
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below, after the gzip wrapper
    except OSError as exc:
        raise ReadError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        if raw.read(2) == b"\x1f\x8b":
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw) as unzipped:
                yield unzipped, raw
        else:
            raw.seek(0)
            yield raw, raw
    finally:
        raw.close()


def _chunks(stream: Readable, path: str) -> Iterator[bytes]:
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except (OSError, EOFError) as exc:
            raise ReadError(f"cannot read {path}: {exc}") from exc
        if not chunk:
            return
        yield chunk


def _size(count: int) -> str:
    """Bytes in the largest unit that keeps the number readable (``1.2 GB``)."""
    value, unit = float(count), "B"
    for bigger in ("KB", "MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:.1f} {unit}"
