"""Glue between one log source and its target's state.

A source (file tailer or stdin) reports raw lines and file events; the line processor turns
lines into records; the sinks here route both into ``TargetState``. One feed per log source, so
each source keeps its own envelope detection and partial CRI joins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from exporter import clock
from exporter.engines.batch import TIME, StatsBatch
from exporter.engines.record import LogLine, RequestRecord, StatsRecord, logged_seconds
from exporter.parse import ranges
from exporter.parse.custom_rules import CustomRuleSet
from exporter.parse.pipeline import LineProcessor, RecordSink
from exporter.sources.tail.events import TailEvents
from exporter.state.streams import StreamWatch
from exporter.state.target_state import TargetState

# The most of a backlog one catch-up takes on: the helpers' spool files stay under the
# 256 MiB temp directory the shipped deploy files give (0.55 of it at most, ~0.2 measured).
MAX_STRETCH_BYTES = 256 << 20


class StateSink:
    """``RecordSink`` for live lines: everything is counted and becomes current.

    Records are held until ``flush`` (or the next call of any other kind, so the state still
    sees every call in order) and then applied together: the state takes a batch for the
    price of a few records, which is what lets the daemon catch up on a long log quickly.
    A batch's lines are counted with its records, after them: a scrape that sees a line
    counted sees what the line said.
    """

    def __init__(self, state: TargetState, streams: StreamWatch | None = None) -> None:
        self.state = state
        # The source's servers, told apart (``state.streams``); one per source.
        self.streams = streams or state.watch_streams()
        self._pending: list[StatsRecord] = []
        self._requests: list[RequestRecord] = []
        self._lines = 0
        # When the lines being read were written at the latest (see ``TailEvents
        # .on_written_by``); None for a source that cannot tell: they are as old as now.
        self.written_by: float | None = None
        # A backlog's newest logged time in seconds and when it was written by (``LogFeed
        # .on_backlog``): records written by then are placed at their logged distance before.
        self.backlog: tuple[float, float] | None = None

    def on_lines(self, count: int) -> None:
        self.flush()
        self._lines += count

    def on_record(self, record: StatsRecord) -> None:
        self._pending.append(record)

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self._pending.extend(records)

    def on_unrecognized(self, reason: str) -> None:
        self._apply()
        self.state.add_unrecognized()

    def on_skipped(self, reason: str) -> None:
        self._apply()
        self.state.add_skipped(reason)

    def on_event(self, line: LogLine) -> None:
        """Startup and configuration lines; the findings engine consumes them."""
        self._apply()
        self.streams.observe(line)
        self.state.add_event(line, self.written_by)

    def on_fallback(self, reason: str) -> None:
        self.state.add_fallback(reason)

    def on_request(self, record: RequestRecord) -> None:
        self._requests.append(record)

    def flush(self) -> None:
        """Apply the records held so far, as seen when they were written at the latest (now,
        for a live log), then count their lines; the source calls it after each read."""
        self._apply()
        if self._lines:
            lines, self._lines = self._lines, 0
            self.state.add_lines(lines)

    def _apply(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self.streams.add(self.state.tracker.stamped(pending))
            self.state.add_records(pending, self.written_by, self._times(pending))
        if self._requests:
            requests, self._requests = self._requests, []
            written = self.written_by
            self.state.requests.add(requests, clock.now() if written is None else written)

    def _times(self, records: Sequence[StatsRecord]) -> list[float] | None:
        """Each record's time when it is of the backlog (``backlog``), else None: all are
        as old as ``written_by``."""
        backlog = self.backlog
        if backlog is None or self.written_by != backlog[1]:
            return None
        newest, written = backlog
        return dated(logged_times(records), written, newest)


class BootstrapSink(StateSink):
    """Sink for the head and tail of a file present at start: adopt its state, count nothing.

    Its windows are held and replayed in order by :meth:`flush`, each at its logged time
    before the newest one's, which takes the file's mtime: a log that stopped long ago stays
    stale, and the judge sees the tail's minutes as minutes. At the mtime alone, a tail of a
    quarter hour was judged as one moment: a drafter that broke ten minutes before the end,
    after healthy ones, came out healthy or a low accept length where ``report`` said
    collapsed.
    """

    def __init__(
        self, state: TargetState, mtime: float, streams: StreamWatch | None = None
    ) -> None:
        super().__init__(state, streams)
        self._mtime = mtime
        self.written_by = mtime  # a server's end in the tail is as old as the file
        self._held: list[StatsRecord | LogLine] = []  # the tail's records and events, in order

    def on_lines(self, count: int) -> None:
        pass

    def on_record(self, record: StatsRecord) -> None:
        self._held.append(record)

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self._held.extend(records)

    def on_event(self, line: LogLine) -> None:
        self._held.append(line)

    def flush(self) -> None:
        """Hand the state what was held, in order, each window at its time (``spread_back``):
        the tail's newest time is known only once the whole tail was read."""
        held, self._held = self._held, []
        records = [item for item in held if isinstance(item, StatsRecord)]
        times = iter(spread_back(records, self._mtime))
        for item in held:
            if isinstance(item, StatsRecord):
                self.streams.add(self.state.tracker.stamped((item,)))
                self.state.restore_window(item, next(times))
            else:
                super().on_event(item)

    def on_unrecognized(self, reason: str) -> None:
        pass

    def on_skipped(self, reason: str) -> None:
        pass

    def on_fallback(self, reason: str) -> None:
        pass

    def on_request(self, record: RequestRecord) -> None:
        """Requests finished before the start are not recent: the share judges what comes."""


def spread_back(records: Sequence[StatsRecord], newest_at: float) -> list[float]:
    """Each record's time on the clock of ``newest_at``, the last record's logged time taking
    ``newest_at`` (``dated``)."""
    texts = logged_times(records)
    last = _last_seconds(texts)
    if last is None:
        return [newest_at] * len(records)
    return dated(texts, newest_at, last)


def dated(texts: Sequence[str | None], newest_at: float, newest: float) -> list[float]:
    """Each logged time in ``texts`` on the clock of ``newest_at``, which logged time
    ``newest`` (in seconds) takes: each its logged distance before it. One without a time,
    or logged later (a clock set back, a restart in another time zone), takes ``newest_at``
    itself: lines are never made older than they are. Logged times are read once per
    distinct text: a second's DP ranks share one."""
    at = dict.fromkeys(texts, newest_at)
    for text in at:
        seconds = logged_seconds(text)
        if seconds is not None and seconds < newest:
            at[text] = newest_at - (newest - seconds)
    return list(map(at.__getitem__, texts))


def logged_times(records: Sequence[StatsRecord]) -> Sequence[str | None]:
    """The records' logged times, from the chunk reader's column where it holds them."""
    if isinstance(records, StatsBatch):
        return records.column(TIME)
    return list(map(_TIME, records))


def _last_seconds(texts: Sequence[str | None]) -> float | None:
    """The last logged time in ``texts`` that reads as one, in seconds."""
    return next((s for s in map(logged_seconds, reversed(texts)) if s is not None), None)


_TIME = attrgetter("time")


class _NewestTime(RecordSink):
    """A sink that keeps the logged time of the last record it is given, in seconds (what
    the end of a backlog says of when it was written), and nothing else."""

    def on_lines(self, count: int) -> None:
        return None

    def on_unrecognized(self, reason: str) -> None:
        return None

    def on_skipped(self, reason: str) -> None:
        return None

    def on_event(self, line: LogLine) -> None:
        return None

    def __init__(self) -> None:
        self.newest: float | None = None

    def on_record(self, record: StatsRecord) -> None:
        self.on_records((record,))

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        last = _last_seconds(logged_times(records))
        if last is not None:
            self.newest = last


class LogFeed(TailEvents):
    """The tailer's ``TailEvents`` for one source of one target."""

    def __init__(
        self,
        state: TargetState,
        custom_rules: CustomRuleSet | None = None,
        engine: str = "auto",
    ) -> None:
        self._state = state
        self._engine = engine
        self._sink = StateSink(state)
        self._processor = LineProcessor(self._sink, engine)
        self._custom_rules = custom_rules
        # Asked before each pass of a long backlog: waits once, not before every pass.
        self._idle = ranges.IdleWatch()

    def on_lines(self, lines: list[bytes]) -> None:
        try:
            self._processor.process(lines)
        finally:
            self._sink.flush()  # whatever was read becomes current, even if a line raised
        if self._custom_rules:
            self._custom_rules.feed_raw(lines, self._sink.written_by)

    def on_framed(self, framed: bytes) -> None:
        if self._custom_rules:  # they see every raw line
            self.on_lines(framed.split(b"\n")[1:-1])
            return
        try:
            self._processor.process_framed(framed)
        finally:
            self._sink.flush()

    def read_backlog(
        self,
        fd: int,
        position: int,
        size: int,
        max_line_bytes: int,
        read_here: Callable[[int, int], None],
        stopping: Callable[[], bool],
    ) -> int | None:
        """Catching up on a long stretch of a plain log, helpers on the other cores read
        its far part (``parse.ranges``; a ``BacklogReader``). Not with custom rules: they see
        every raw line, which only this process has."""
        engine = self._processor.engine
        if self._custom_rules or not self._processor.cuttable or engine is None:
            return None
        try:
            return ranges.read_by_ranges(
                fd,
                position,
                size,
                self._sink,
                max_line_bytes,
                read_here,
                stopping,
                max_stretch=MAX_STRETCH_BYTES,
                engine=engine,
                idle=self._idle.cores,
            )
        finally:
            self._sink.flush()  # the last replayed records become current now, not next read

    def on_bootstrap(self, lines: list[bytes], mtime: float) -> None:
        sink = BootstrapSink(self._state, mtime, self._sink.streams)
        bootstrap = LineProcessor(sink, self._engine)
        bootstrap.process(lines)
        bootstrap.finish()
        sink.flush()

    def on_backlog(self, lines: list[bytes], written_by: float) -> None:
        """Date the backlog about to be read by its end: each record of it at its logged
        distance before the newest, which takes ``written_by``; a log without logged times
        leaves the backlog as old as ``written_by``."""
        newest = _NewestTime()
        reader = LineProcessor(newest, self._engine)
        reader.process(lines)
        reader.finish()
        self._sink.backlog = None if newest.newest is None else (newest.newest, written_by)

    def on_written_by(self, at: float) -> None:
        self._sink.flush()  # what was read before belongs to the time given before
        self._sink.written_by = at

    def on_new_file(self) -> None:
        self._processor.reset()

    def on_rotation(self) -> None:
        self._state.add_rotation()

    def on_truncation(self) -> None:
        self._state.add_truncation()

    def on_skipped(self, reason: str) -> None:
        self._state.add_skipped(reason)

    def on_clipped(self, line: bytes) -> None:
        try:
            self._processor.process_clipped(line)
        finally:
            self._sink.flush()

    def on_read_error(self, reason: str) -> None:
        self._state.add_read_error()
