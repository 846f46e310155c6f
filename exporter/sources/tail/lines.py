"""Newline splitting with a hard line-length cap, shared by the file and stdin sources.

Bytes arrive in arbitrary chunks. Only newline-terminated lines leave; the fragment after the
last newline waits for the next chunk. A line longer than ``max_line_bytes`` is dropped up to
its newline and counted once, and the splitter never holds more than ``max_line_bytes`` of it,
so one runaway line (an echoed prompt, a binary blob) cannot exhaust memory.

Of a dropped line, its first ``CLIP_HEAD_BYTES`` and last ``CLIP_TAIL_BYTES`` are handed on as
one clipped line: a record that puts its figures at its end (SGLang's finished-request lines,
which carry the whole prompt and output before them) can still be read within those bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.sources.tail.events import TailEvents

CHUNK_BYTES = 256 << 10
"""Read size for both sources: large reads keep the per-line cost low."""
CLIP_HEAD_BYTES = 512
CLIP_TAIL_BYTES = 64 << 10


@dataclass
class Split:
    """Result of feeding one chunk: complete lines in order, and how many were too long.

    The lines usually come as ``framed``: each line between two newlines, as the chunk held
    them. A bulk reader hands that on unsplit (see ``LineProcessor.process_framed``): a big
    buffer costs a page fault per 4 KB, so one copy of the chunk is cheaper than splitting it
    into lines and joining them again.
    """

    framed: bytes | None = None
    listed: list[bytes] = field(default_factory=list)
    too_long: int = 0
    # Head and tail of each line over the cap, joined (see the module's docstring).
    clipped: list[bytes] = field(default_factory=list)

    @property
    def lines(self) -> list[bytes]:
        return self.listed if self.framed is None else self.framed.split(b"\n")[1:-1]

    def deliver(self, events: TailEvents) -> None:
        """Hand the lines, then one ``too_long`` skip per dropped line, to ``events``."""
        if self.framed is not None:
            events.on_framed(self.framed)
        elif self.listed:
            events.on_lines(self.listed)
        for _ in range(self.too_long):
            events.on_skipped("too_long")
        for line in self.clipped:
            events.on_clipped(line)


class LineSplitter:
    """Turns a byte stream into complete lines; one instance per open stream."""

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._max = max_line_bytes
        self._partial = bytearray()
        self._skipping = False
        # Of the line being skipped: its head (None when reading began mid-line) and tail.
        self._clip_head: bytes | None = None
        self._clip_tail = bytearray()

    @property
    def pending(self) -> int:
        """Bytes held for the unterminated last line (never more than ``max_line_bytes``)."""
        return len(self._partial)

    @property
    def skipping(self) -> bool:
        """Whether a line over the cap is being dropped up to its newline."""
        return self._skipping

    def feed(self, chunk: bytes) -> Split:
        """Split ``chunk``, joining it to the held fragment; keeps the new trailing fragment."""
        nothing_held = not self._partial and not self._skipping
        if nothing_held and len(chunk) <= self._max and chunk.endswith(b"\n"):
            return Split(framed=b"\n" + chunk)  # whole lines, none too long: a live read's few
        out = Split()
        start = self._finish_held_line(chunk, out)
        if start < 0:
            return out
        last_nl = chunk.rfind(b"\n", start)
        if last_nl >= 0:
            if last_nl - start <= self._max:  # no line in it can be too long: no length checks
                held = [line + b"\n" for line in out.listed]  # the held line it finished
                out.framed = b"".join([b"\n", *held, memoryview(chunk)[start : last_nl + 1]])
                out.listed = []
            else:
                self._add_lines(chunk[start:last_nl].split(b"\n"), out)
            start = last_nl + 1
        self._hold(chunk[start:], out)
        return out

    def discard(self) -> bool:
        """Drop the held fragment (its file is gone); True if a non-empty fragment was dropped.

        A line already being skipped for length was counted as too long, so it is not counted
        again here.
        """
        dropped = bool(self._partial)
        self._partial.clear()
        self._stop_skipping()
        return dropped

    def skip_line(self) -> None:
        """Drop everything up to the next newline, uncounted: reading starts mid-line."""
        self._partial.clear()
        self._skipping = True
        self._clip_head = None

    def flush(self) -> bytes | None:
        """The held fragment as a final line, for a stream that has ended (stdin EOF)."""
        line = bytes(self._partial) if self._partial else None
        self._partial.clear()
        self._stop_skipping()
        return line

    def _stop_skipping(self) -> None:
        self._skipping = False
        self._clip_head = None
        self._clip_tail.clear()

    def _finish_held_line(self, chunk: bytes, out: Split) -> int:
        """Complete (or keep skipping) the line held from earlier chunks.

        Returns the offset in ``chunk`` where fresh lines start, or -1 when the whole chunk was
        consumed by the held line.
        """
        if not self._skipping and not self._partial:
            return 0
        nl = chunk.find(b"\n")
        if nl < 0:
            if self._skipping:
                self._keep_tail(chunk)
                return -1
            if len(self._partial) + len(chunk) <= self._max:
                self._partial += chunk  # in place: a copy per chunk was quadratic in the line
            else:
                self._hold(bytes(self._partial) + chunk, out)
            return -1
        if self._skipping:
            self._keep_tail(memoryview(chunk)[:nl])
            if self._clip_head is not None:
                out.clipped.append(self._clip_head + self._clip_tail)
            self._stop_skipping()
        else:
            line = bytes(self._partial) + chunk[:nl]
            self._partial.clear()
            self._add_lines([line], out)
        return nl + 1

    def _add_lines(self, lines: list[bytes], out: Split) -> None:
        for line in lines:
            if len(line) > self._max:
                out.too_long += 1
                out.clipped.append(line[:CLIP_HEAD_BYTES] + line[-CLIP_TAIL_BYTES:])
            else:
                out.listed.append(line)

    def _hold(self, fragment: bytes, out: Split) -> None:
        """Keep an unterminated fragment, or start skipping it once it exceeds the cap."""
        self._partial.clear()
        if len(fragment) > self._max:
            self._skipping = True
            out.too_long += 1
            self._clip_head = fragment[:CLIP_HEAD_BYTES]
            self._keep_tail(fragment)
        else:
            self._partial += fragment

    def _keep_tail(self, data: bytes | memoryview) -> None:
        """The last ``CLIP_TAIL_BYTES`` of the line being skipped, so far."""
        tail = self._clip_tail
        tail += data[-CLIP_TAIL_BYTES:]
        if len(tail) > CLIP_TAIL_BYTES:
            del tail[: len(tail) - CLIP_TAIL_BYTES]
