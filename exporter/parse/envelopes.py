"""Container log envelopes (CRI, Docker json-file) and terminal debris around log text.

A sidecar reads SGLang's output wherever the platform put it: a plain file, a kubelet CRI log
(``<RFC3339Nano> stdout|stderr P|F <text>``, long lines split into P records ended by an F
record) or Docker's json-file driver (one JSON object per chunk, the last chunk of a line
ending in ``\\n``). The engine parser must only ever see the payload, one logical line at a
time, so unwrapping happens here, once, per file stream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from exporter.sources.tail.lines import CLIP_HEAD_BYTES, CLIP_TAIL_BYTES

# CSI sequences: ESC [ parameters intermediates final-byte (colours, cursor moves, erase-line).
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# <time> <stream> <tag> <text>; the tag is P or F, optionally followed by ':'-joined extra tags.
_CRI = re.compile(rb"\d{4}-\d\d-\d\dT\S+ (stdout|stderr) ([PF])(?::\S*)?(?: |$)")
_DOCKER_START = b'{"log":'

# A joined CRI/Docker line is capped like a physical line: a writer that never ends its line
# must not grow memory without bound.
DEFAULT_MAX_JOINED_BYTES = 1 << 20


# The bytes of what ``clean`` removes: text with none of them is already clean.
DEBRIS: tuple[bytes, ...] = (b"\r", b"\x1b", b"\x00")


def clean(text: str) -> str:
    """Return the text a terminal would finally show for one log line.

    tqdm progress bars rewrite the line with ``\\r``; uvicorn colours ``INFO:`` when attached to
    a TTY; crashed writers leave NULs. None of that is log content, and all of it would break
    exact matching of SGLang's prefix and field names.
    """
    if "\r" in text:
        text = text.rstrip("\r")
        text = text[text.rfind("\r") + 1 :]
    if "\x1b" in text:
        text = _CSI.sub("", text)
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text


def detect(line: bytes) -> str:
    """Envelope kind of a file from its first non-empty line: "cri", "docker" or "plain"."""
    if _CRI.match(line):
        return "cri"
    if line.startswith(_DOCKER_START) and _docker_record(line) is not None:
        return "docker"
    return "plain"


def _docker_record(line: bytes) -> tuple[str, bytes] | None:
    """(``log`` text, stream) of one json-file record, or None when the line is not one.

    The stream is only a joining key: anything but stdout/stderr shares one key, so hostile
    input cannot open unbounded partial-line buffers.
    """
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        return None
    if not isinstance(record, dict) or not isinstance(record.get("log"), str):
        return None
    stream = record.get("stream")
    return record["log"], _STREAMS.get(stream, b"") if isinstance(stream, str) else b""


_STREAMS = {"stdout": b"stdout", "stderr": b"stderr"}


@dataclass(slots=True)
class _Pending:
    """The pieces of one stream's line collected so far (or that it is being dropped)."""

    pieces: list[bytes] = field(default_factory=list)
    size: int = 0
    discarding: bool = False
    # Of a line being dropped: its head and its tail so far (see ``LineSplitter``'s clipping).
    head: bytes = b""
    tail: bytearray = field(default_factory=bytearray)

    def keep_tail(self, piece: bytes) -> None:
        self.tail += piece[-CLIP_TAIL_BYTES:]
        if len(self.tail) > CLIP_TAIL_BYTES:
            del self.tail[: len(self.tail) - CLIP_TAIL_BYTES]


class EnvelopeDecoder:
    """Turn one file stream's raw lines into payload lines, joining split records.

    One instance per followed file: the detected kind and half-joined lines belong to that
    file. Lines are joined per output stream: the runtime writes stdout and stderr
    independently, so an access line can land between the pieces of a long stderr line.
    ``oversized`` counts joined lines dropped for exceeding ``max_joined_bytes`` so the caller
    can report them as skipped; nothing is dropped silently. ``clipped`` holds the head and tail
    of each, joined, for a reader of records whose figures are at their end (as the line
    splitter keeps them of a plain line over the cap).
    """

    def __init__(self, max_joined_bytes: int = DEFAULT_MAX_JOINED_BYTES) -> None:
        self.oversized = 0
        self.clipped: list[bytes] = []
        self._max = max_joined_bytes
        self.reset()

    def reset(self) -> None:
        """Forget the kind and any half-joined line: a rotated file may be written differently."""
        self.kind: str | None = None
        self._pending: dict[bytes, _Pending] = {}

    def decode(self, lines: list[bytes]) -> list[bytes]:
        """Raw lines (without ``\\n``) in, payload lines out, in order of completion."""
        if self.kind == "plain":
            return lines
        if self.kind is None:
            first = next((i for i, line in enumerate(lines) if line.strip()), None)
            if first is None:
                return lines
            self.kind = detect(lines[first])
            if self.kind == "plain":
                return lines
            return lines[:first] + self._unwrap(lines[first:])
        return self._unwrap(lines)

    def _unwrap(self, lines: list[bytes]) -> list[bytes]:
        split = _split_cri if self.kind == "cri" else _split_docker
        out: list[bytes] = []
        pending = self._pending
        for line in lines:
            record = split(line)
            if record is None:
                # Not an envelope record (e.g. a hand-appended note): keep it, never lose it.
                self._flush(out)
                out.append(line)
            elif record[1] and not pending:  # a whole line, nothing half-joined: the usual case
                out.append(record[0])
            else:
                self._join(out, *record)
        return out

    def _join(self, out: list[bytes], piece: bytes, complete: bool, stream: bytes) -> None:
        """Collect a stream's partial pieces; emit its whole line when the last one arrives."""
        pending = self._pending.get(stream)
        if pending is None:
            if complete:
                out.append(piece)
                return
            pending = self._pending[stream] = _Pending()
        if pending.discarding:
            pending.keep_tail(piece)
        else:
            pending.pieces.append(piece)
            pending.size += len(piece)
            if pending.size > self._max:
                self.oversized += 1
                joined = b"".join(pending.pieces)
                pending.head = joined[:CLIP_HEAD_BYTES]
                pending.keep_tail(joined)
                pending.pieces.clear()
                pending.discarding = True
        if complete:
            if pending.discarding:
                self.clipped.append(pending.head + pending.tail)
            else:
                out.append(b"".join(pending.pieces))
            del self._pending[stream]

    def _flush(self, out: list[bytes]) -> None:
        """An interrupted partial record is still text someone wrote: emit what was collected."""
        out.extend(b"".join(p.pieces) for p in self._pending.values() if p.pieces)
        self._pending.clear()


def _split_cri(line: bytes) -> tuple[bytes, bool, bytes] | None:
    """(text, ends the line, stream) of a CRI record, or None for a line that is not one."""
    match = _CRI.match(line)
    if match is None:
        return None
    return line[match.end() :], match.group(2) == b"F", match.group(1)


def _split_docker(line: bytes) -> tuple[bytes, bool, bytes] | None:
    """(text, ends the line, stream) of a json-file record; its ``\\n`` marks the last chunk."""
    record = _docker_record(line) if line.startswith(_DOCKER_START) else None
    if record is None:
        return None
    text, stream = record
    payload = text.encode("utf-8", "replace")
    if text.endswith("\n"):
        return payload[:-1], True, stream
    return payload, False, stream
