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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO, Protocol, TextIO

from exporter.parse import ranges
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
    split_above: int | None = None,
) -> None:
    """Feed every line of ``paths`` (in order; ``-`` is stdin) through one ``sink``.

    A plain SGLang file bigger than ``split_above`` bytes (default
    ``ranges.SPLIT_ABOVE_BYTES``) is read on several cores (:mod:`.ranges`); the sink sees the
    same calls either way.
    """
    processor = LineProcessor(sink)
    before = 0  # bytes of the files already read, for the progress bar
    for path in paths:
        processor.reset()
        with _open(path) as (stream, raw):
            reader = _FileReader(path, stream, raw, processor, max_line_bytes)
            if progress is not None and raw is not None:
                reader.on_chunk = _progress_of(progress, before, raw)
            reader.read_all(split_above)
            before += raw.tell() if raw is not None else 0
    processor.finish()


def read_range(
    fd: int,
    start: int,
    end: int,
    sink: RecordSink,
    max_line_bytes: int,
    on_line_start: Callable[[int], None],
    *,
    engine: str,
) -> None:
    """Bytes ``[start, end)`` of the plain log of ``engine`` open as ``fd`` (a helper's share,
    see :mod:`.ranges`), by ``pread``: the descriptor's offset is shared with the reader.

    ``on_line_start(offset)`` follows each chunk, with the offset of the first line not yet
    delivered whole: reading could start again there.
    """
    processor = LineProcessor(sink, engine=engine, envelope="plain")
    file = PreadFile(fd)
    reader = _FileReader(f"descriptor {fd}", file, file, processor, max_line_bytes)
    splitter = reader.splitter

    def at_line_start() -> None:
        if not splitter.skipping:
            on_line_start(file.tell() - splitter.pending)

    reader.on_chunk = at_line_start
    reader.read_range(start, end)


class SeekableFile(Protocol):
    """A plain file as the range reader uses it: a real file, or :class:`PreadFile`."""

    def read(self, size: int = -1, /) -> bytes: ...

    def seek(self, offset: int, /) -> int: ...

    def tell(self) -> int: ...

    def fileno(self) -> int: ...


class PreadFile:
    """Reads a descriptor by ``pread`` at an offset of its own, leaving the descriptor's
    offset, which another process shares, where it is."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._offset = 0

    def read(self, size: int = -1, /) -> bytes:
        if size < 0:
            size = max(0, os.fstat(self._fd).st_size - self._offset)
        data = os.pread(self._fd, size, self._offset)
        self._offset += len(data)
        return data

    def seek(self, offset: int, /) -> int:
        self._offset = offset
        return offset

    def tell(self) -> int:
        return self._offset

    def fileno(self) -> int:
        return self._fd


class _FileReader:
    """One file's lines through the processor, from wherever its stream stands."""

    def __init__(
        self,
        path: str,
        stream: Readable,
        raw: SeekableFile | None,
        processor: LineProcessor,
        max_line_bytes: int,
    ) -> None:
        self._path = path
        self._stream = stream
        # The file itself when it is read as it is (not gzip, not stdin): it can be cut.
        self._plain_file = raw if raw is stream else None
        self._processor = processor
        self._max_line_bytes = max_line_bytes
        self.splitter = LineSplitter(max_line_bytes)
        self.on_chunk: Callable[[], None] | None = None

    def read_all(self, split_above: int | None) -> None:
        """The whole file; its far part on other cores when it is big and plain enough."""
        self._step()  # the first chunk decides the engine and the envelope
        self._read_with_helpers(split_above)
        while self._step():
            pass
        last = self.splitter.flush()
        if last:
            self._processor.process([last])

    def read_range(self, start: int, end: int) -> None:
        """Bytes ``[start, end)``: whole lines when both ends follow a newline."""
        file = self._require_plain_file()
        file.seek(start)
        while (left := end - file.tell()) > 0 and self._step(min(CHUNK_BYTES, left)):
            pass

    def _step(self, size: int = CHUNK_BYTES) -> bool:
        """Read and process one chunk of at most ``size`` bytes; False at the end."""
        chunk = _read(self._stream, size, self._path)
        if not chunk:
            return False
        split = self.splitter.feed(chunk)
        for _ in range(split.too_long):
            self._processor.sink.on_skipped("too_long")
        for line in split.clipped:
            self._processor.process_clipped(line)
        if split.framed is not None:
            self._processor.process_framed(split.framed)
        elif split.listed:
            self._processor.process(split.listed)
        if self.on_chunk is not None:
            self.on_chunk()
        return True

    def _read_with_helpers(self, split_above: int | None) -> None:
        """Read up to the first cut here while helpers read the rest; then replay their
        calls (or read a failed helper's range here) and go on after the last."""
        file = self._plain_file
        if file is None or not self._processor.cuttable:
            return
        fd, position, engine = file.fileno(), file.tell(), self._processor.engine
        if engine is None:
            return
        end = ranges.read_by_ranges(
            fd,
            position,
            os.fstat(fd).st_size,
            self._processor.sink,
            self._max_line_bytes,
            self.read_range,
            split_above=split_above,
            engine=engine,
        )
        if end is not None:
            file.seek(end)

    def _require_plain_file(self) -> SeekableFile:
        if self._plain_file is None:
            raise ValueError(f"{self._path}: only a plain file can be read by ranges")
        return self._plain_file


def _progress_of(progress: Progress, before: int, raw: BinaryIO) -> Callable[[], None]:
    def update() -> None:
        progress.update(before + raw.tell())

    return update


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


def _read(stream: Readable, size: int, path: str) -> bytes:
    # Standard input may be a live pipe (``tail -f log | specwatch parse -``): take what has
    # come instead of waiting for a whole chunk, which would hold lines back until the end.
    read1 = getattr(stream, "read1", None) if path == "-" else None
    try:
        return read1(size) if read1 is not None else stream.read(size)
    except (OSError, EOFError) as exc:
        raise ReadError(f"cannot read {path}: {exc}") from exc


def _size(count: int) -> str:
    """Bytes in the largest unit that keeps the number readable (``1.2 GB``)."""
    value, unit = float(count), "B"
    for bigger in ("KB", "MB", "GB"):
        if value < 1000:
            break
        value, unit = value / 1000, bigger
    return f"{value:.1f} {unit}"
