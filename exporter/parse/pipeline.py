"""From raw log bytes to records: envelope, cheap marker filter, then the engine's reader.

Most lines of a busy server (access lines, prefill chunks of other kinds, warnings) are of no
interest, and a sidecar must not cost the node much CPU. So a line is decoded, cleaned and
parsed only when its raw bytes contain a marker; everything else is only counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from exporter.engines import registry
from exporter.engines.engine import LogReader, has_any
from exporter.engines.record import LogLine, RequestRecord, StatsRecord
from exporter.parse.envelopes import DEBRIS, EnvelopeDecoder, clean


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

    def on_fallback(self, reason: str) -> None:
        """A long batch that the engine's whole-batch reader did not take was read line by
        line, for ``reason``; a sink that subclasses this protocol ignores it."""
        return None

    def on_request(self, record: RequestRecord) -> None:
        """A finished request's figures (SGLang's ``--log-requests``); a sink that subclasses
        this protocol and has no use for them ignores them."""
        return None


class _SideSink:
    """What a reader of another engine than the source's delivers: its records and finished
    requests; its lines are counted by the source's own reader's batch, and its start-up
    lines belong to no run of this source."""

    def __init__(self, sink: RecordSink) -> None:
        self._sink = sink

    def on_record(self, record: StatsRecord) -> None:
        self._sink.on_record(record)

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self._sink.on_records(records)

    def on_unrecognized(self, reason: str) -> None:
        self._sink.on_unrecognized(reason)

    def on_skipped(self, reason: str) -> None:
        self._sink.on_skipped(reason)

    def on_event(self, line: LogLine) -> None:
        return None

    def on_fallback(self, reason: str) -> None:
        return None

    def on_request(self, record: RequestRecord) -> None:
        self._sink.on_request(record)


class LineProcessor:
    """Feed one file stream's raw lines through envelope decoding and its engine's reader.

    ``engine`` is a registered engine's name or ``auto``: the first batch holding a line that
    an engine's own prefix claims decides, and from then on each batch goes straight to that
    engine's reader, which keeps this source's parsing state. Under ``auto`` another engine's
    server start decides again (a node moved from SGLang to vLLM writing to the same file):
    its lines are read, never dropped as the old engine's noise; one stray line of another
    engine's format switches nothing.

    Stats lines that another engine formatted itself are read too, by a reader of that
    engine kept beside the source's own, in their place in the batch: two servers of two
    engines writing one file must show as two streams (``state.streams``), not as one server
    whose other half is silently dropped. Only their records and requests are delivered: a
    start-up line of a server the source is not read as says nothing of the source's run.
    """

    def __init__(self, sink: RecordSink, engine: str = "auto", envelope: str | None = None) -> None:
        self._sink = sink
        self._decoder = EnvelopeDecoder()
        self._decoder.kind = envelope
        self.engine: str | None = None
        self._reader: LogReader | None = None
        # What starts a server of the engines this source could change to (none when configured).
        self._others: tuple[bytes, ...] = ()
        self._auto = engine == "auto"
        # Readers of the other engines, made when a line of theirs first comes, and the bytes
        # their lines carry: a batch without any is never looked at twice.
        self._side: dict[str, LogReader | None] = {}
        self._side_markers: tuple[bytes, ...] = ()
        # Both: a batch that may hold one of these is read whole only where its engine's reader
        # knows every line to be its own.
        self._not_own: tuple[bytes, ...] = ()
        if not self._auto:
            self._decide(engine)

    def _decide(self, name: str) -> None:
        try:
            chosen = registry.engine(name)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        if self._reader is not None:
            self._reader.finish()  # the old engine's held line belongs to its own run
        self.engine = chosen.name
        self._reader = chosen.log_reader(self._sink, clean)
        side = self._side.pop(chosen.name, None)
        if side is not None:
            side.finish()
        others = [engine for engine in registry.ENGINES if engine is not chosen]
        # Their stats lines (their starts are ``_others``, and a side reader's events are dropped).
        self._side_markers = tuple(
            marker
            for engine in others
            for marker in engine.markers
            if marker not in engine.start_markers
        )
        if self._auto:
            self._others = tuple(marker for engine in others for marker in engine.start_markers)
        self._not_own = self._others + self._side_markers

    def _other_engine_at(self, lines: list[bytes], blob: bytes) -> tuple[int, str] | None:
        """The first line where another engine's server starts, and that engine."""
        if not has_any(blob, self._others):
            return None
        for at, line in enumerate(lines):
            if has_any(line, self._others):
                text = clean(line.decode("utf-8", "replace"))
                owner = registry.owner(text, line)
                if owner is not None and owner.name != self.engine and owner.starts(text):
                    return at, owner.name
        return None

    def _detect(self, lines: list[bytes], blob: bytes) -> None:
        """The first line that an engine's own prefix and message head claim decides.

        A marker alone is not enough: request logs echo prompts, and one prompt quoting the
        other engine's text must not switch a source for good.
        """
        if not has_any(blob, registry.MARKERS):
            return
        for line in lines:
            if not has_any(line, registry.MARKERS):
                continue
            owner = registry.owner(clean(line.decode("utf-8", "replace")), line)
            if owner is not None:
                self._decide(owner.name)
                return

    def _side_lines(self, lines: list[bytes], blob: bytes) -> list[tuple[int, str]]:
        """Where lines that another engine formatted itself stand in the batch, and whose."""
        if not has_any(blob, self._side_markers):
            return []
        found = []
        for at, line in enumerate(lines):
            if has_any(line, self._side_markers):
                owner = registry.owner(clean(line.decode("utf-8", "replace")), line)
                if owner is not None and owner.name != self.engine:
                    found.append((at, owner.name))
        return found

    def _side_reader(self, name: str) -> LogReader | None:
        if name not in self._side:
            self._side[name] = registry.engine(name).log_reader(_SideSink(self._sink), clean)
        return self._side[name]

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
        ``parse.ranges``): a plain envelope, and an engine whose lines carry no state across
        lines that a reader must have seen."""
        reader = self._reader
        return reader is not None and reader.cuttable and self._decoder.kind == "plain"

    def finish(self) -> None:
        """The source has ended: deliver what a reader still holds (vLLM's last engine line)."""
        if self._reader is not None:
            self._reader.finish()
        for side in self._side.values():
            if side is not None:
                side.finish()

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
        clipped, decoder.clipped = decoder.clipped, []
        sink.on_lines(len(lines))
        # C-speed scans of the whole batch tell which markers can occur at all, so that most
        # batches are read in one pass, and the per-line test checks few markers. The batch
        # is framed by newlines: every line, the first and last too, sits between two.
        blob = b"\n".join([b"", *lines, b""])
        if self.engine is None:
            self._detect(lines, blob)
        if self.engine is not None and (switch := self._other_engine_at(lines, blob)):
            at, engine = switch
            self._read(lines[:at], b"\n".join([b"", *lines[:at], b""]))
            self._decide(engine)
            lines = lines[at:]
            blob = b"\n".join([b"", *lines, b""])
        if self._reader is None:
            return
        self._read(lines, blob)
        for line in clipped:  # joined from a container runtime's pieces, then over the cap
            self._reader.read_clipped(line)

    def _read(self, lines: list[bytes], blob: bytes, tidy: bool | None = None) -> None:
        """``tidy``: whether ``blob`` holds no terminal debris, when the caller knows."""
        if self._reader is None or not lines:
            return
        side = self._side_lines(lines, blob)
        if side:
            self._read_apart(lines, side)
            return
        # Terminal debris is rare, and the same scan spares cleaning each line of a tidy batch.
        if tidy is None:
            tidy = not has_any(blob, DEBRIS)
        self._reader.read(lines, blob, tidy)

    def _read_apart(self, lines: list[bytes], side: list[tuple[int, str]]) -> None:
        """A batch holding other engines' lines: each run of the source's own lines, then
        each other line by its own engine's reader, in the order they were written."""
        start = 0
        for at, name in side:
            if at > start:
                self._read(lines[start:at], b"\n".join([b"", *lines[start:at], b""]))
            reader = self._side_reader(name)
            if reader is not None:
                line = lines[at]
                reader.read([line], b"\n".join([b"", line, b""]), False)
            start = at + 1
        if start < len(lines):
            self._read(lines[start:], b"\n".join([b"", *lines[start:], b""]))

    def process_clipped(self, line: bytes) -> None:
        """A line over the line cap, of which only its head and tail were kept (see
        ``LineSplitter``), in a plain envelope: the engine reads what a record puts at its end
        (SGLang's finished requests); it was counted as too long already."""
        if self._reader is not None and self._decoder.kind in (None, "plain"):
            self._reader.read_clipped(line)

    def process_framed(self, framed: bytes) -> None:
        """Deliver what the lines of ``framed`` (each between two newlines) hold, as
        :meth:`process` does: the bulk reader's batch. A plain batch the engine's reader can
        take whole (SGLang's, tidy and long) is never split into lines; anything else is split
        and read as lines."""
        reader = self._reader
        if reader is not None and self._decoder.kind == "plain":
            tidy = not has_any(framed, DEBRIS)
            whole = reader.read_whole(framed, tidy, self._not_own)
            if whole is not None:
                count, records = whole
                self._sink.on_lines(count)
                self._sink.on_records(records)
                return
            if not self._others:  # no other engine's start to look for: ``process`` of its
                # lines, with ``framed`` their blob as it is (a live pass's few lines)
                lines = framed.split(b"\n")[1:-1]
                self._sink.on_lines(len(lines))
                self._read(lines, framed, tidy)
                return
        self.process(framed.split(b"\n")[1:-1])
