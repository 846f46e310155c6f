"""Whether one log source carries two servers' streams (docs/reliability.md).

Two servers writing one file (``>> server.log`` from two launches, two containers' logs
merged) look to every reader like one server whose accept length flips at every line: a
collapsed one can read as healthy, and the judge would average the two. What tells them apart
is only what the lines show, so each source keeps a :class:`StreamWatch`:

- **two engines** (``engines``): stats lines that SGLang and vLLM each formatted themselves
  keep alternating among the source's recent stats lines. A node moved from one engine to the
  other changes once, and is one server.
- **two starts of one engine, no ending between, both alive**: a second server start
  (SGLang's ``server_args=``, vLLM's engine configuration) with no end of the first logged
  between, and then either decode lines of that engine going on for ``BOOT_SECONDS`` while the
  second one is still starting (``serving_while_starting``: it cannot serve before it says it
  is ready, so they are the first one's), or both servers saying they are ready
  (``both_ready``). A server killed without a word and started again says ready once, and
  writes nothing while it starts, so a restart is one server. Only an engine that says when
  its server is ready (SGLang's "fired up and ready to roll") can be told so.
- **two starts, no ending between, and two accept-length levels taking turns**
  (``alternating_levels``, any engine): after the later start, the decode windows of one rank
  fall into two tight levels (1.00 and 3.05-3.40, say) far apart, and go from one to the other
  and back again and again. A server restarted without a word logs only its own windows
  after its start, and one server's windows vary around one level, not between two.

DP ranks are one server: a start line of a rank other than 0 (vLLM's ``EngineCore_DP1``) is
not a server start, and ranks' stats lines are one engine's.

The same-engine sign holds until a server's end is logged (its death, or its HTTP server's
last line when stopped on purpose); the engines' sign while both engines' lines keep coming.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Sequence
from itertools import pairwise
from operator import attrgetter
from statistics import fmean
from typing import TypeGuard

from exporter.analysis.findings import Interleaving, Stream
from exporter.analysis.node import speaks_for_node
from exporter.engines import ending, registry
from exporter.engines.batch import ACCEPT_LENGTH, ENGINE, StatsBatch
from exporter.engines.counters import MAX_ACCEPT_LENGTH
from exporter.engines.events import ServerArgsEvent, ServerReady
from exporter.engines.record import LogLine, StatsRecord, drafting_off, logged_seconds

# The newest stats lines whose engines are compared: a minute or so of a busy node's lines,
# several of vLLM's 10 s windows among them.
RECENT = 256
# What the comparison keeps of each: read in C, a batch of records at a time.
_ENGINE, _ACCEPT_LENGTH = attrgetter("engine"), attrgetter("accept_length")
# Lines each of two engines must have among them, and how often the engine must change:
# once is a node moved to another engine; back and forth is two servers.
MIN_LINES = 2
MIN_CHANGES = 4
# Decode lines this long after a second start, before it is ready, are another server's (a
# starting server's warm-up request decodes for a second or two just before it says ready).
BOOT_SECONDS = 10.0
# Open starts remembered (each with its time, for the finding's evidence).
MAX_STARTS = 8
# Two accept-length levels taking turns: of the newest LEVEL_WINDOWS windows of one rank since
# the later start, at least LEVEL_MIN in each level, the levels LEVEL_GAP apart and the gap
# at least LEVEL_TIGHT times either level's own spread, and at least MIN_CHANGES turns.
LEVEL_WINDOWS = 32
LEVEL_MIN = 4
LEVEL_GAP = 0.5
LEVEL_TIGHT = 2.0

ENGINES_SIGN = "engines"
SERVING_SIGN = "serving_while_starting"
READY_SIGN = "both_ready"
LEVELS_SIGN = "alternating_levels"


class StreamWatch:
    """One source's lines as streams of servers; thread-safe (a tailer writes, scrapes read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The newest stats lines' engines and accept lengths, compared when asked.
        self._recent: deque[tuple[str, float | None]] = deque(maxlen=RECENT)
        # Server starts (engine, logged time) since the last end logged, oldest first.
        self._starts: deque[tuple[str, str | None]] = deque(maxlen=MAX_STARTS)
        self._announcing: set[str] = set()  # engines whose servers said they were ready here
        self._readies = 0  # ready lines since the newest start
        self._boot: tuple[float, float] | None = None  # first, last decode while it starts
        self._sign: str | None = None  # a same-engine sign, held until an end is logged
        # Accept lengths of one rank's decode windows since the newest start, in order.
        self._levels: deque[float] = deque(maxlen=LEVEL_WINDOWS)
        # The one engine of every line in ``_recent`` ("" before any), None when not known to
        # be one: then ``interleaving`` counts them, as every snapshot of the target asks.
        self._alone: str | None = ""

    def observe(self, line: LogLine) -> None:
        """A start-up or ending line of the source's own engine (``parse.pipeline`` hands on
        no other engine's)."""
        engine = registry.BY_NAME.get(line.engine)
        event = engine.parse_event(line.message) if engine is not None else None
        end = ending.parse(line.message, line.time)
        with self._lock:
            if end is not None and (end.final or end.stop):
                self._starts.clear()
                self._sign = None
                self._readies = 0
                self._boot = None
                self._levels.clear()
            if isinstance(event, ServerArgsEvent) and line.dp_rank in (None, 0):
                self._starts.append((line.engine, line.time))
                self._readies = 0
                self._boot = None
                self._levels.clear()
            elif isinstance(event, ServerReady):
                self._announcing.add(line.engine)
                self._readies += 1
                if self._readies >= 2 and len(self._open()) >= 2:
                    self._sign = self._sign or READY_SIGN

    def add(self, records: Sequence[StatsRecord]) -> None:
        """Stats lines read, in the order written, of whichever engine wrote them, stamped
        with the draft steps in force (``RunTracker.stamped``): a window with drafting off
        (adaptive speculation's 1.00, by design) is no level of a server."""
        if not records:
            return
        engines, lengths = _newest(records)
        with self._lock:
            self._recent.extend(zip(engines, lengths, strict=True))
            if self._alone is not None:
                alone = self._alone or engines[0]
                same = all(map(alone.__eq__, engines))
                self._alone = alone if same else None
            if self._sign is None and len(self._open()) >= 2:
                if self._readies == 0:
                    self._while_starting(records)
                self._taking_turns(records[-RECENT:])

    def _open(self) -> list[tuple[str, str | None]]:
        """The starts of the newest start's engine since the last end; under the lock."""
        if not self._starts:
            return []
        engine = self._starts[-1][0]
        return [start for start in self._starts if start[0] == engine]

    def _while_starting(self, records: Sequence[StatsRecord]) -> None:
        """Decode lines of the newest start's engine before it says it is ready: another
        server's, once they go on for ``BOOT_SECONDS``. Under the lock."""
        engine = self._starts[-1][0]
        if engine not in self._announcing:
            return  # an engine that never says ready: its start cannot be told from serving
        times = [
            at
            for r in records
            if r.kind == "decode" and r.engine == engine and (at := logged_seconds(r.time))
        ]
        if not times:
            return
        first = times[0] if self._boot is None else self._boot[0]
        self._boot = (first, times[-1])
        if times[-1] - first >= BOOT_SECONDS:
            self._sign = SERVING_SIGN

    def _taking_turns(self, records: Sequence[StatsRecord]) -> None:
        """One rank's windows since the later start, in two levels that take turns (see
        ``two_levels``): a server restarted without a word logs only its own after its start.
        Under the lock."""
        engine = self._starts[-1][0]
        self._levels.extend(
            length
            for r in records
            if r.kind == "decode"
            and r.engine == engine
            and _plausible(length := r.accept_length)
            and r.dp_rank in (None, 0)
            and speaks_for_node(r)
            and not (r.extra and drafting_off(r))
        )
        if self._sign is None and two_levels(list(self._levels)):
            self._sign = LEVELS_SIGN

    def interleaving(self) -> Interleaving | None:
        """What shows two servers in this source now, or None."""
        with self._lock:
            sign = self._sign
            if sign is None and self._alone is not None:
                return None  # one engine's lines alone: no two to count
            recent = list(self._recent)
            starts = tuple(self._open()) if sign is not None else ()
            counts = Counter(engine for engine, _ in recent)
            if len(counts) == 1:  # the other engine's lines have left the recent ones
                self._alone = next(iter(counts))
        changes = sum(1 for (a, _), (b, _) in pairwise(recent) if a != b)
        top = counts.most_common(2)
        if len(top) == 2 and top[1][1] >= MIN_LINES and changes >= MIN_CHANGES:
            sign = ENGINES_SIGN
        if sign is None:
            return None
        streams = tuple(_stream(engine, lines, recent) for engine, lines in counts.most_common())
        return Interleaving(sign, streams, len(recent), starts)


def _newest(records: Sequence[StatsRecord]) -> tuple[Sequence[str], Sequence[float | None]]:
    """The engines and accept lengths of the newest ``RECENT`` of ``records``: from a batch's
    columns where the chunk reader's batch holds them, with no record built."""
    # A list (a live pass's records) is told apart first: ``isinstance`` of an abstract
    # sequence's subclass goes through the ABC machinery.
    if type(records) is list and len(records) == 1:  # a live pass's one line
        return (records[0].engine,), (records[0].accept_length,)
    if not isinstance(records, list) and isinstance(records, StatsBatch):
        start = max(0, len(records) - RECENT)
        return records.column(ENGINE, start), records.column(ACCEPT_LENGTH, start)
    newest = records[-RECENT:]
    return list(map(_ENGINE, newest)), list(map(_ACCEPT_LENGTH, newest))


def _stream(engine: str, lines: int, recent: list[tuple[str, float | None]]) -> Stream:
    lengths = [length for each, length in recent if each == engine and _plausible(length)]
    if not lengths:
        return Stream(engine, lines, 0)
    return Stream(engine, lines, len(lengths), min(lengths), max(lengths), fmean(lengths))


def two_levels(lengths: list[float]) -> bool:
    """Whether accept lengths, in the order logged, are two servers' taking turns: split at
    their widest gap, each side holds ``LEVEL_MIN`` windows, the gap is ``LEVEL_GAP`` wide and
    ``LEVEL_TIGHT`` times either side's own spread, and they change sides ``MIN_CHANGES``
    times (a restart to another level changes once)."""
    if len(lengths) < 2 * LEVEL_MIN:
        return False
    ordered = sorted(lengths)
    gap, cut = max((b - a, i + 1) for i, (a, b) in enumerate(pairwise(ordered)))
    low, high = ordered[:cut], ordered[cut:]
    if min(len(low), len(high)) < LEVEL_MIN or gap < LEVEL_GAP:
        return False
    if gap < LEVEL_TIGHT * max(low[-1] - low[0], high[-1] - high[0]):
        return False
    split = high[0]
    sides = [length >= split for length in lengths]
    return sum(1 for a, b in pairwise(sides) if a != b) >= MIN_CHANGES


def _plausible(length: float | None) -> TypeGuard[float]:
    """An accept length that can be true (1 to 64): a record built from hostile input may
    carry any float, and one infinity would make every level and mean of it infinite."""
    return length is not None and 1.0 <= length <= MAX_ACCEPT_LENGTH
