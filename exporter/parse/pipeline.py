"""From raw log bytes to records: envelope, cheap marker filter, then the engine parser.

Most lines of a busy server (access lines, prefill chunks of other kinds, warnings) are of no
interest, and a sidecar must not cost the node much CPU. So a line is decoded, cleaned and
parsed only when its raw bytes contain a marker; everything else is only counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from exporter.engines import ending, vllm
from exporter.engines.record import LogLine, StatsRecord, Unrecognized
from exporter.engines.sglang import (
    EVENT_MARKERS,
    STATS_KINDS,
    STATS_MARKERS,
    classify,
    read_stats_line,
)
from exporter.engines.sglang_chunk import ChunkReader
from exporter.parse.envelopes import DEBRIS, EnvelopeDecoder, clean

# A startup/config message names its subject within its first words ("Load weight end. ...",
# "The server is fired up ..."). Request logs and access lines, which may echo user text,
# only reach a marker much later ("Receive: obj=GenerateReqInput(text='..."), so they are
# never mistaken for events.
EVENT_MARKER_WINDOW = 20
# Batches this long are read whole by the chunk reader; shorter ones (a live server's lines,
# a few per wake-up) cost less line by line than the chunk reader's fixed cost per batch.
CHUNK_MIN_LINES = 32


class RecordSink(Protocol):
    """Where a LineProcessor delivers what it found; the daemon state and `parse` implement it.

    A sink that subclasses this protocol takes ``on_records`` one record at a time.
    """

    def on_lines(self, count: int) -> None: ...

    def on_record(self, record: StatsRecord) -> None: ...

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        """Records read together, in order, as if each were given to ``on_record``; a sink
        that folds a batch for less than its records one by one (the report, the daemon's
        state) takes it whole."""
        for record in records:
            self.on_record(record)

    def on_unrecognized(self, reason: str) -> None: ...

    def on_skipped(self, reason: str) -> None: ...

    def on_event(self, line: LogLine) -> None: ...


ENGINES = ("sglang", "vllm")


class LineProcessor:
    """Feed one file stream's raw lines through envelope decoding and its engine's parser.

    ``engine`` is ``sglang``, ``vllm`` or ``auto``: the first batch holding either engine's
    stats lines decides, once for the whole source, so no line pays for the other parser.
    """

    def __init__(self, sink: RecordSink, engine: str = "auto", envelope: str | None = None) -> None:
        self._sink = sink
        self._decoder = EnvelopeDecoder()
        self._decoder.kind = envelope
        self.engine: str | None = None
        self._vllm: vllm.VllmParser | None = None
        self._chunk = ChunkReader(message_head=_EVENT_SCAN)
        if engine != "auto":
            self._decide(engine)

    def _decide(self, engine: str) -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}")
        self.engine = engine
        if engine == "vllm":
            self._vllm = vllm.VllmParser()

    def _detect(self, lines: list[bytes], blob: bytes) -> None:
        """The first line that an engine's own prefix and message head claim decides.

        A marker alone is not enough: request logs echo prompts, and one prompt quoting the
        other engine's text must not switch a source for good.
        """
        if not any(marker in blob for marker in _DETECT_MARKERS):
            return
        for line in lines:
            engine = _engine_of(line)
            if engine is not None:
                self._decide(engine)
                return

    @property
    def sink(self) -> RecordSink:
        return self._sink

    @property
    def envelope(self) -> str | None:
        """``plain``, ``cri`` or ``docker`` once the first line has told; None before."""
        return self._decoder.kind

    @property
    def cuttable(self) -> bool:
        """Whether a part of this source can be read by another processor alone (see
        ``parse.ranges``): SGLang lines in a plain envelope carry no state across lines that
        a reader must have seen."""
        return self.engine == "sglang" and self._decoder.kind == "plain"

    def finish(self) -> None:
        """The source has ended: deliver what a parser still holds (vLLM's last engine line)."""
        if self._vllm is not None:
            self._deliver(self._vllm.flush())

    def reset(self) -> None:
        """A new file (rotation, truncation): its envelope is detected afresh."""
        self._decoder.reset()

    def process(self, raw_lines: list[bytes]) -> None:
        """Deliver counts, records, drift and events for ``raw_lines`` (no ``\\n``), in order."""
        sink = self._sink
        decoder = self._decoder
        lines = decoder.decode(raw_lines)
        for _ in range(decoder.oversized):
            sink.on_skipped("too_long")
        decoder.oversized = 0
        sink.on_lines(len(lines))
        # C-speed scans of the whole batch tell which markers can occur at all, so that most
        # batches are read in one pass, and the per-line test below checks few markers. The
        # batch is framed by newlines: every line, the first and last too, sits between two.
        blob = b"\n".join([b"", *lines, b""])
        if self.engine is None:
            self._detect(lines, blob)
        if self._vllm is not None:
            self._process_vllm(lines, blob)
            return
        # Terminal debris is rare, and the same scan spares cleaning each line of a tidy batch.
        tidy = not any(debris in blob for debris in DEBRIS)
        if tidy and len(lines) >= CHUNK_MIN_LINES:
            records = self._chunk_records(blob, len(lines))
            if records is not None:
                self._deliver_records(records)
                return
        markers = tuple(marker for marker in _ALL_MARKERS if marker in blob)
        if not markers:
            return
        handle = self._handle
        for line in lines:
            for marker in markers:
                if marker in line:
                    handle(line, tidy, marker)
                    break

    def process_framed(self, framed: bytes) -> None:
        """Deliver what the lines of ``framed`` (each between two newlines) hold, as
        :meth:`process` does: the bulk reader's batch. A tidy plain SGLang batch is read
        whole, never split into lines; anything else is split and read as lines."""
        if self.engine == "sglang" and self._decoder.kind == "plain":
            count = framed.count(b"\n") - 1
            tidy = not any(debris in framed for debris in DEBRIS)
            records = (
                self._chunk_records(framed, count) if tidy and count >= CHUNK_MIN_LINES else None
            )
            if records is not None:
                self._sink.on_lines(count)
                self._deliver_records(records)
                return
        self.process(framed.split(b"\n")[1:-1])

    def _chunk_records(self, blob: bytes, lines: int) -> list[StatsRecord] | None:
        """A tidy batch's records read in one pass (the hot path, see bench/), or None: the
        chunk reader cannot read it exactly as line by line (a startup event among them, a
        line the line reader would count as invalid UTF-8, a layout not learnt yet)."""
        if not _valid_utf8(blob):
            return None
        found = self._chunk.read(blob, lines)
        if found is None:
            return None
        records, rest = found
        return None if any(marker in rest for marker in _LINE_MARKERS) else records

    def _deliver_records(self, records: list[StatsRecord]) -> None:
        self._sink.on_records(records)

    def _process_vllm(self, lines: list[bytes], blob: bytes) -> None:
        """vLLM's stats lines come in pairs (engine, then spec): one parser keeps the pair."""
        if not any(marker in blob for marker in _VLLM_MARKERS):
            return
        parser = self._vllm
        assert parser is not None
        tidy = not any(debris in blob for debris in DEBRIS)
        for line in lines:
            if not any(marker in line for marker in _VLLM_MARKERS):
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                self._sink.on_skipped("invalid_utf8")
                continue
            self._deliver(parser.feed(text if tidy else clean(text)))

    def _deliver(self, results: Sequence[StatsRecord | Unrecognized | LogLine]) -> None:
        for result in results:
            if isinstance(result, StatsRecord):
                self._sink.on_record(result)
            elif isinstance(result, Unrecognized):
                self._sink.on_unrecognized(result.reason)
            else:
                self._sink.on_event(result)

    def _handle(self, line: bytes, tidy: bool, marker: bytes) -> None:
        """Dispatch one line that carries ``marker``.

        A stats line in the layout the engine learnt from the previous line of its kind is
        read straight from its bytes (the hot path, see bench/); any other line is decoded,
        cleaned (unless ``tidy``) and read as text, which defines the result.
        """
        kind = STATS_KINDS.get(marker)
        result: StatsRecord | Unrecognized | LogLine | None = None
        text = ""
        if kind is not None and tidy and line.isascii():
            result = read_stats_line(kind, line)
        if result is None:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                self._sink.on_skipped("invalid_utf8")
                return
            text = text if tidy else clean(text)
            result = classify(text)
        if isinstance(result, StatsRecord):
            self._sink.on_record(result)
        elif isinstance(result, Unrecognized):
            self._sink.on_unrecognized(result.reason)
        elif result is not None:
            if _is_event(result.message) or ending.opens(result.message):
                self._sink.on_event(result)
        elif marker in ending.MARKERS and ending.parse(text) is not None:
            self._sink.on_event(LogLine(None, None, None, text))  # a traceback's own lines


_ALL_MARKERS = STATS_MARKERS + EVENT_MARKERS + ending.MARKERS
# Lines other than stats lines that must be read one by one.
_LINE_MARKERS = EVENT_MARKERS + ending.MARKERS
_VLLM_MARKERS = vllm.STATS_MARKERS + vllm.EVENT_MARKERS + ending.MARKERS
_EVENT_TEXT = re.compile("|".join(re.escape(marker.decode()) for marker in EVENT_MARKERS))
_EVENT_SCAN = EVENT_MARKER_WINDOW + max(map(len, EVENT_MARKERS))


_DETECT_MARKERS = _VLLM_MARKERS + _ALL_MARKERS


def _valid_utf8(blob: bytes) -> bool:
    if blob.isascii():
        return True
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _engine_of(line: bytes) -> str | None:
    """The engine that wrote ``line`` as one of its own stats or startup lines, if any."""
    if not any(marker in line for marker in _DETECT_MARKERS):
        return None
    text = clean(line.decode("utf-8", "replace"))
    if any(marker in line for marker in _VLLM_MARKERS) and vllm.is_own_line(text):
        return "vllm"
    result = classify(text)
    if isinstance(result, (StatsRecord, Unrecognized)):
        return "sglang"
    if isinstance(result, LogLine) and _is_event(result.message):
        return "sglang"
    return None


def _is_event(message: str) -> bool:
    """An event marker that starts within the first EVENT_MARKER_WINDOW characters."""
    found = _EVENT_TEXT.search(message, 0, _EVENT_SCAN)
    return found is not None and found.start() <= EVENT_MARKER_WINDOW
