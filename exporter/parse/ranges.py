"""Read the far part of a big plain log in helper processes, on the machine's other cores.

Reading a busy node's log is bound by one core: Python parses one line at a time. So when a
log is big, the reader cuts it at line boundaries, reads the first part itself, and starts one
helper process per other core that is idle (``python -m exporter.parse.range_helper``) for
the rest: a helper costs CPU of its own (its interpreter, its spool, the replay), which buys
time only on a core nothing else wants. Each helper spools the sink calls it makes, a frame
per chunk read; the reader replays them in order as they come. The sink gets the records,
events and drift in the same order one reader would deliver them, and the same line counts
and skips (in other batches, with the same sums), so nothing downstream changes.

The reader also replays and folds every record, so it parses the smaller share. Only what a
helper can read alone is cut: a regular, uncompressed file whose envelope is plain and whose
engine is SGLang (vLLM pairs lines across a cut; CRI and Docker join partial lines across
it). A helper that fails, runs past its deadline or is stopped leaves the lines it did not
deliver to the reader: each frame says where reading could resume.

Helpers spool to the directory ``TMPDIR`` names, else ``/tmp`` (never the working directory,
``tempfile``'s last resort). A container with a read-only root and no writable ``/tmp`` has
nowhere to spool: then every stretch is read in-process, as on a machine with one core.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import IO, Any

from exporter.cpus import usable_cpus
from exporter.engines.record import LogLine, RequestRecord, StatsRecord, record_from_row
from exporter.parse.pipeline import RecordSink

SPLIT_ABOVE_BYTES = 32 << 20  # smaller logs take about a second: not worth a process
# The reader's share of the bytes still to read. It also replays the helpers' calls (about a
# fifth of parsing them) and folds every record into its sink, so it parses less than a
# helper. The report builder folds a read for about a fifth of its parsing, the daemon's
# target state for about a third of that; measured, the same share suits both (see bench/).
READER_SHARE = 0.45
MAX_HELPERS = 3
# A helper reads at least ~20 MB/s on a slow core; far past that it is stuck, not slow.
HELPER_SECONDS_PER_MB = 0.5
HELPER_MIN_SECONDS = 30.0
KILL_WAIT = 5.0  # seconds to reap a killed helper
# How long the machine is watched for idle cores before helpers are started: a helper costs
# CPU of its own (its interpreter, its spool), which buys time only on a core nothing else
# wants. On a busy machine the reader reads alone, as a sidecar should.
IDLE_SAMPLE = 0.1
# A reader asking again and again (``IdleWatch``) measures from its last look unless that is
# older than this: the daemon's catch-up asks every pass, a fraction of a second apart.
IDLE_FRESH = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc/stat's ticks
PROC_STAT = "/proc/stat"
SPOOL_POLL = 0.005  # seconds between looks for a helper's next frame
_BOUNDARY_SEARCH = 1 << 20
# What a helper process runs: it reads its range with the reader, which imports this module.
HELPER_MODULE = "exporter.parse.range_helper"
_LENGTH = struct.Struct("<Q")  # before each spooled frame

# Spooled sink calls: (kind, value); a run of records is one call with a list of them.
_LINES, _RECORDS, _EVENT, _UNRECOGNIZED, _SKIPPED, _FALLBACK, _REQUEST = range(7)
_EXTRA = StatsRecord._fields.index("extra")

log = logging.getLogger(__name__)
_warned_spool = False


def spool_dir() -> str:
    """Where helpers spool: ``TMPDIR``, else ``/tmp``."""
    return os.environ.get("TMPDIR") or "/tmp"


def spool_problem() -> str | None:
    """Why helpers could not spool now, or None when they can (checked at start to say so
    early; every read checks again by opening its spools)."""
    try:
        with tempfile.TemporaryFile(prefix="specwatch-range-", dir=spool_dir()):
            return None
    except OSError as exc:
        return f"{spool_dir()}: {exc.strerror or exc}"


def _open_spools(count: int) -> list[IO[bytes]] | None:
    """One spool file per helper, or None (logged once) when the spool directory refuses."""
    global _warned_spool
    spools: list[IO[bytes]] = []
    try:
        for _ in range(count):
            spool = tempfile.TemporaryFile(prefix="specwatch-range-", dir=spool_dir())  # noqa: SIM115 - Helper.close()
            spools.append(spool)
    except OSError as exc:
        for opened in spools:
            opened.close()
        if not _warned_spool:
            _warned_spool = True
            log.warning(
                "cannot spool in %s (%s): long stretches of a log are read in one process",
                spool_dir(),
                exc.strerror or exc,
            )
        return None
    return spools


def idle_cores(sample: float = IDLE_SAMPLE) -> float:
    """Cores of the machine that ran nothing over the next ``sample`` seconds, from
    ``/proc/stat``'s idle time (the reader waits meanwhile, so its own core counts as idle);
    every usable core where that file cannot be read (not Linux)."""
    before = _idle_and_total()
    time.sleep(sample)
    after = _idle_and_total()
    if before is None or after is None or after[1] <= before[1]:
        return float(usable_cpus())
    cores = os.cpu_count() or 1
    return cores * (after[0] - before[0]) / (after[1] - before[1])


class IdleWatch:
    """Idle cores for a reader that asks before each of many passes (the daemon catching up
    on a long log asks every 4 MiB): measured over the time since its last look, so only the
    first look waits ``sample`` seconds (28 waits of 0.1 s were a third of a 600k-line
    catch-up's wall time on a busy machine). The reader's own CPU time since then counts as
    idle: that core is its own, as it is while ``idle_cores`` waits. A look older than
    ``fresh`` seconds tells little of now: the next waits again. The first look is taken
    when the watch is made (the daemon's start), so a catch-up's first pass, which comes
    after the rest of the start, seldom waits at all."""

    def __init__(self, sample: float = IDLE_SAMPLE, fresh: float = IDLE_FRESH) -> None:
        self._sample = sample
        self._fresh = fresh
        # When the last look was (monotonic), /proc/stat's idle and total ticks then, and the
        # CPU seconds of this process and its reaped helpers then (``_own_cpu``).
        self._last: tuple[float, tuple[int, int] | None, float] = self._look()

    def cores(self) -> float:
        """Cores that ran nothing (the reader's own counted) since the last look, at least
        ``sample`` seconds ago (waiting out the rest); every usable core where
        ``/proc/stat`` cannot be read."""
        last = self._last
        if time.monotonic() - last[0] > self._fresh:
            last = self._look()
        wait = last[0] + self._sample - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = self._look()
        self._last = now
        before, after = last[1], now[1]
        if before is None or after is None or after[1] <= before[1]:
            return float(usable_cpus())
        cores = os.cpu_count() or 1
        own = (now[2] - last[2]) * CLK_TCK
        return min(cores, cores * (after[0] - before[0] + own) / (after[1] - before[1]))

    @staticmethod
    def _look() -> tuple[float, tuple[int, int] | None, float]:
        return time.monotonic(), _idle_and_total(), _own_cpu()


def _own_cpu() -> float:
    """CPU seconds of this process and of the helpers it has reaped: a look taken after a
    stretch its helpers read counts their cores as the reader's own, not as busy (else the
    next stretch would start none)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _idle_and_total() -> tuple[int, int] | None:
    """Idle (idle + iowait) and total ticks of every CPU so far, from ``/proc/stat``."""
    try:
        with open(PROC_STAT, "rb") as stat:
            ticks = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 5:
        return None
    return ticks[3] + ticks[4], sum(ticks[:8])  # guest time is counted in user already


def helpers_available() -> int:
    """Helper processes worth starting: one per usable CPU beyond the reader's (the container's
    CPU quota counts, see ``exporter.cpus``), a few at most."""
    return max(0, min(usable_cpus() - 1, MAX_HELPERS))


def plan(
    fd: int, start: int, size: int, helpers: int, reader_share: float = READER_SHARE
) -> list[tuple[int, int]]:
    """The helpers' ranges of ``[start, size)``, each starting and ending just after a
    newline; the reader reads from ``start`` to the first, and whatever follows the last.

    Empty when no line boundary is found near a wanted cut (one enormous line).
    """
    reader_end = start + int((size - start) * reader_share)
    share = (size - reader_end) / helpers
    wanted = [reader_end + int(i * share) for i in range(helpers)]
    cuts = [_line_start_after(fd, offset, size) for offset in wanted]
    last = _line_start_before(fd, size)  # a line still being written is left to the reader
    if last is None or any(cut is None for cut in cuts):
        return []
    bounds = sorted({cut for cut in cuts if cut is not None and cut < last} | {last})
    return list(pairwise(bounds))


def _line_start_after(fd: int, offset: int, size: int) -> int | None:
    window = os.pread(fd, min(_BOUNDARY_SEARCH, size - offset), offset)
    newline = window.find(b"\n")
    return None if newline < 0 else offset + newline + 1


def _line_start_before(fd: int, size: int) -> int | None:
    offset = max(0, size - _BOUNDARY_SEARCH)
    newline = os.pread(fd, size - offset, offset).rfind(b"\n")
    return None if newline < 0 else offset + newline + 1


def read_by_ranges(
    fd: int,
    position: int,
    size: int,
    sink: RecordSink,
    max_line_bytes: int,
    read_here: Callable[[int, int], None],
    stopping: Callable[[], bool] = lambda: False,
    split_above: int | None = None,
    reader_share: float = READER_SHARE,
    max_stretch: int | None = None,
    *,
    engine: str,
    idle: Callable[[], float] | None = None,
) -> int | None:
    """Read ``[position, size)`` of the plain file ``fd``, a log of ``engine`` (one whose
    reader is ``cuttable``), with helpers for its far part, or None when it is not worth
    cutting (small, one core, one enormous line).

    ``read_here(start, end)`` reads a range in-process, through the caller's own splitter
    and processor into ``sink``: the near part, and the range of a helper that failed.
    Returns the offset reading goes on from (where a helper range stopped when ``stopping``).
    With ``max_stretch``, at most that many bytes are taken on at once, which bounds the
    spool files (at most the helpers' share of it, about 0.4 of that for stats lines).
    ``idle`` says how many cores are idle (``idle_cores`` by default; a reader asking for
    every stretch gives an ``IdleWatch``'s).
    """
    above = SPLIT_ABOVE_BYTES if split_above is None else split_above
    if max_stretch is not None:
        size = min(size, position + max_stretch)
    if size - position <= above:
        return None  # the common case, every live pass: decided before the cgroup is read
    count = helpers_available()
    if count:  # one core is the reader's own; a helper for each other one left idle
        idle_now = idle_cores() if idle is None else idle()
        count = min(count, max(0, round(idle_now) - 1))
    cut = plan(fd, position, size, count, reader_share) if count else []
    spools = _open_spools(len(cut)) if cut else None
    if spools is None:
        return None
    helpers = [
        Helper.launch(fd, start, end, max_line_bytes, spool, engine)
        for (start, end), spool in zip(cut, spools, strict=True)
    ]
    try:
        read_here(position, cut[0][0])
        for helper in helpers:
            done = helper.replay(sink, stopping)
            if done < helper.end:
                if stopping():  # the reader is going away; nothing after this is read
                    return done
                read_here(done, helper.end)  # it failed: the rest of its range is read here
        return cut[-1][1]
    finally:
        for helper in helpers:
            helper.close()


@dataclass
class Helper:
    """One helper process reading ``[start, end)`` of a log into its spool file."""

    start: int
    end: int
    process: subprocess.Popen[bytes] | None
    spool: IO[bytes]

    @classmethod
    def launch(
        cls, fd: int, start: int, end: int, max_line_bytes: int, spool: IO[bytes], engine: str
    ) -> Helper:
        """Start reading the file open as ``fd`` (the same file, whatever happens to its name
        meanwhile) into ``spool``, which ``close()`` closes; a helper that cannot even start
        has its range read in-process later."""
        argv = [sys.executable, "-m", HELPER_MODULE, str(fd), str(start), str(end)]
        argv += [str(max_line_bytes), str(os.getpid()), engine]
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=spool,
                stderr=subprocess.DEVNULL,
                pass_fds=(fd,),
            )
        except OSError:
            process = None
        return cls(start, end, process, spool)

    def replay(self, sink: RecordSink, stopping: Callable[[], bool] = lambda: False) -> int:
        """Deliver the helper's calls to ``sink`` in order, as it spools them; returns the
        offset up to which the lines are delivered: its end when it read its whole range,
        less when it failed, overran its deadline, or ``stopping`` turned true."""
        done, exited = self.start, False
        deadline = time.monotonic() + self._allowed_seconds()
        frames = _SpoolReader(self.spool)
        while True:
            while (frame := frames.next()) is not None and not stopping():
                done, calls = frame
                _deliver(calls, sink)
            if exited or self.process is None or stopping() or time.monotonic() > deadline:
                return done  # below its end when it failed: the caller reads the rest
            exited = self.process.poll() is not None  # then take what it wrote, once more
            if not exited:
                time.sleep(SPOOL_POLL)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL: gone at once
                self.process.wait(KILL_WAIT)
        self.spool.close()

    def _allowed_seconds(self) -> float:
        return max(HELPER_MIN_SECONDS, (self.end - self.start) / 1e6 * HELPER_SECONDS_PER_MB)


class _SpoolReader:
    """The frames of a spool file still being written: each a length, its resume offset and
    calls in marshal bytes; read by ``pread``, since the writer shares the file offset.
    (``marshal.load`` on a file reads a few bytes per call, some 25 times slower.)"""

    def __init__(self, spool: IO[bytes]) -> None:
        self._fd = spool.fileno()
        self._position = 0

    def next(self) -> tuple[int, list[tuple[int, Any]]] | None:
        """The next whole frame, or None while it is not all written."""
        header = os.pread(self._fd, _LENGTH.size, self._position)
        if len(header) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack(header)
        body = os.pread(self._fd, length, self._position + _LENGTH.size)
        if len(body) < length:
            return None
        self._position += _LENGTH.size + length
        resume, calls = marshal.loads(body)
        return resume, calls


def _deliver(frame: list[tuple[int, Any]], sink: RecordSink) -> None:
    for kind, value in frame:
        if kind == _RECORDS:
            sink.on_records(list(map(record_from_row, value)))
        elif kind == _LINES:
            sink.on_lines(value)
        elif kind == _EVENT:
            sink.on_event(LogLine(*value))
        elif kind == _UNRECOGNIZED:
            sink.on_unrecognized(value)
        elif kind == _FALLBACK:
            sink.on_fallback(value)
        elif kind == _REQUEST:
            sink.on_request(RequestRecord(*value))
        else:
            sink.on_skipped(value)


class SpoolSink(RecordSink):
    """The helper's ``RecordSink``: every call, in order, in marshal frames (plain values
    only: marshal is the fastest way between two Pythons, and records are tuples). A run of
    records is one entry, so the reader rebuilds them in C."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._calls: list[tuple[int, Any]] = []
        self._records: list[StatsRecord] | None = None

    def on_lines(self, count: int) -> None:
        self._add((_LINES, count))

    def on_record(self, record: StatsRecord) -> None:
        self.on_records([record])

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        if self._records is None:
            self._records = []
            self._calls.append((_RECORDS, self._records))
        self._records.extend(records)

    def on_unrecognized(self, reason: str) -> None:
        self._add((_UNRECOGNIZED, reason))

    def on_skipped(self, reason: str) -> None:
        self._add((_SKIPPED, reason))

    def on_fallback(self, reason: str) -> None:
        self._add((_FALLBACK, reason))

    def on_event(self, line: LogLine) -> None:
        self._add(
            (
                _EVENT,
                (line.time, line.dp_rank, line.tp_rank, line.message, line.engine, line.pp_rank),
            )
        )

    def on_request(self, record: RequestRecord) -> None:
        self._add((_REQUEST, tuple(record)))

    def flush(self, resume: int) -> None:
        """Write the calls so far as one frame, with the offset reading could resume from."""
        calls = [
            (kind, list(map(tuple, value)) if kind == _RECORDS else value)
            for kind, value in self._calls
        ]
        try:
            frame = marshal.dumps((resume, calls))
        except ValueError:  # a record with the shared, read-only empty extra: marshal wants dicts
            frame = marshal.dumps((resume, [_with_plain_extras(call) for call in calls]))
        self._out.write(_LENGTH.pack(len(frame)) + frame)
        self._out.flush()  # the reader takes frames while this helper goes on
        self._calls, self._records = [], None

    def _add(self, call: tuple[int, Any]) -> None:
        self._records = None  # a record after this call starts a new run
        self._calls.append(call)


def _with_plain_extras(call: tuple[int, Any]) -> tuple[int, Any]:
    kind, value = call
    if kind != _RECORDS:
        return call
    return kind, [(*row[:_EXTRA], dict(row[_EXTRA]), *row[_EXTRA + 1 :]) for row in value]
