"""The one judgement of a node's speculation: what state it is in now, since when, and on
what evidence (docs/metrics.md, "Verdict").

The daemon, ``specwatch doctor`` and ``specwatch report`` each fold the decode windows of a
server run into :class:`Stretches` (a minute each) and hand them here as a :class:`Case`;
:func:`judge` decides every verdict, tolerance and evidence minimum once, and they only render
the :class:`Judgement` it returns, so none of them can contradict another.

- The present and the past apart: the state is about the newest ``PRESENT_SECONDS`` of
  decode windows (the alert rules' averaging window), and ``since`` is where the stretches
  showing that state began. What the run did before (a collapse that ended, an earlier
  level) is reported as ``past``, never judged as now. A slow fall from the node's own
  earlier level is a state of its own, ``drifting``.
- Evidence: an accept length is the mean over draft rounds (each window weighted by its
  drafts, as the engine's counters would give it), judged only on at least ``MIN_DRAFTS``
  rounds and ``MIN_WINDOWS`` windows; fewer is ``too_few_drafts``, with the count, never a
  collapse.
- Drafting off (adaptive speculation, a per-batch-size schedule at k = 0) is judged on the
  windows being judged: a present that is mostly off is held to the drafting-off tolerance,
  whatever the run did earlier.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache, reduce
from itertools import groupby, repeat, takewhile
from operator import add, attrgetter, itemgetter
from typing import Any, cast

from exporter.analysis import verdicts as texts
from exporter.analysis.algorithms import (
    LOWEST_FLOOR,
    UNKNOWN_METHOD,
    Standard,
    config_standard,
    floor_for,
)
from exporter.analysis.node import all_speak_for_node, speaks_for_node
from exporter.analysis.thresholds import DEFAULT, MIN_WINDOWS, Thresholds
from exporter.analysis.verdicts import Verdict
from exporter.engines import registry
from exporter.engines.record import StatsRecord, drafting_off
from exporter.engines.server_config import ServerConfig

# Every state a node can be judged in, most severe first, with its severity ("ok" for the
# two that need nothing done). The daemon exports the one that holds as
# ``specwatch_verdict{state=...}``; the set is fixed and documented in docs/metrics.md.
STATES: dict[str, str] = {
    "collapsed": "critical",
    "accept_length_low": "warning",
    "drifting": "warning",
    "slower_than_baseline": "warning",
    "drafting_off_below_baseline": "warning",
    "baseline_implausible": "warning",
    "interleaved": "warning",
    "too_few_drafts": "info",
    "no_decode": "info",
    "drafting_off": "ok",
    "healthy": "ok",
}
# The states that say the judged windows hold too little to tell a state: a stretch alone in
# one of them neither extends nor ends a state when ``since`` is sought.
_UNTOLD = frozenset({"too_few_drafts", "no_decode"})

# A stretch folds this many seconds of decode windows: the unit ``since`` is told in.
STRETCH_SECONDS = 60.0
# The present: the newest this many seconds of decode windows (the alerts' 5-minute means).
PRESENT_SECONDS = 300.0
# Stretches a run keeps (a day of minutes): enough for a drift over hours, bounded.
MAX_STRETCHES = 1440
# Draft rounds an acceptance verdict needs behind it: fewer are noise, not the drafter's level
# (n-gram on traffic that never repeats drafts a few dozen times an hour).
MIN_DRAFTS = 100
# A stretch alone speaks for ``since`` and for the past on this share of the minimum.
STRETCH_MIN_DRAFTS = MIN_DRAFTS // 5
# Drift: the present below this share of the node's own level in its first hour, on a run
# of at least ``DRIFT_RUN_SECONDS``.
DRIFT_SHARE = 0.8
DRIFT_EARLY_SECONDS = 3600.0
DRIFT_RUN_SECONDS = 7200.0
# With drafting off in at least this share of the judged windows the node is not
# speculating: its speed is held to the drafting-off tolerance (``findings.OFF_SHARE``).
OFF_SHARE = 0.5
# Episodes of the run's past worth telling: at least this long, at most this many.
EPISODE_SECONDS = 120.0
MAX_EPISODES = 5


@dataclass(slots=True)
class Load:
    """Node moments summed: their throughput and load, and the baseline at each one's load."""

    moments: int = 0  # node moments with throughput and running requests
    throughput: float = 0.0  # their summed tok/s
    running: float = 0.0  # their summed running requests
    based: int = 0  # moments with a baseline at their load
    based_throughput: float = 0.0  # tok/s of those moments
    baseline: float = 0.0  # the baseline's tok/s at their loads, summed

    def add(self, running: float, throughput: float, baseline: float | None) -> None:
        self.moments += 1
        self.throughput += throughput
        self.running += running
        if baseline:
            self.based += 1
            self.based_throughput += throughput
            self.baseline += baseline

    def add_load(self, other: Load) -> None:
        self.moments += other.moments
        self.throughput += other.throughput
        self.running += other.running
        self.based += other.based
        self.based_throughput += other.based_throughput
        self.baseline += other.baseline

    def copy(self) -> Load:
        total = Load()
        total.add_load(self)
        return total

    @property
    def speedup(self) -> float | None:
        return self.based_throughput / self.baseline if self.based and self.baseline > 0 else None

    @property
    def mean_throughput(self) -> float | None:
        if self.based:
            return self.based_throughput / self.based
        return self.throughput / self.moments if self.moments else None

    @property
    def mean_baseline(self) -> float | None:
        return self.baseline / self.based if self.based else None

    @property
    def mean_running(self) -> int | None:
        return round(self.running / self.moments) if self.moments else None


@dataclass(slots=True)
class Stretch:
    """The decode windows of one ``STRETCH_SECONDS`` span, folded to sums.

    Acceptance counts draft rounds: an engine that counts them (vLLM) gives them; another's
    window covers its log interval of batches of its running requests. Speed counts node
    moments (DP ranks summed), each with the baseline at its own load, apart for moments
    drafting and moments with drafting off: each is judged by its own tolerance.
    """

    start: float
    end: float
    windows: int = 0  # decode windows with drafting on and an accept length
    drafts: float = 0.0  # draft rounds behind them
    accepted: float = 0.0  # draft tokens accepted in those rounds (the bonus token left out)
    off: int = 0  # decode windows with drafting off
    drafting: Load = field(default_factory=Load)  # moments drafting
    plain: Load = field(default_factory=Load)  # moments with drafting off

    def copy(self) -> Stretch:
        return Stretch(
            self.start,
            self.end,
            self.windows,
            self.drafts,
            self.accepted,
            self.off,
            self.drafting.copy(),
            self.plain.copy(),
        )

    @property
    def accept_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None


class Stretches:
    """A run's decode windows as stretches of ``STRETCH_SECONDS``, the newest
    ``MAX_STRETCHES`` kept. Not thread-safe: its owner locks (``state.evidence``)."""

    def __init__(self, seconds: float = STRETCH_SECONDS, keep: int = MAX_STRETCHES) -> None:
        self._seconds = seconds
        self._items: deque[Stretch] = deque(maxlen=keep)
        # The copies ``items`` hands out, kept: only a stretch changed since is copied again,
        # so a judge sees the same objects for the stretches that did not change (a day of
        # them is 1,440 copies a judgement otherwise), and ``StateMemo`` knows them again.
        self._copies: deque[Stretch | None] = deque(maxlen=keep)
        self._recopy = 0  # the newest stretches changed since the last ``items``, a count
        self._at = 0.0  # the newest time seen
        # The newest time of each kind (windows, moments): one without a time of its own is
        # placed there, whatever the other kind did meanwhile.
        self._last = {True: 0.0, False: 0.0}

    def _stretch(self, at: float | None, window: bool) -> Stretch:
        """The stretch ``at`` falls in, to be changed (copied again by the next ``items``).
        A time in the newest stretch, nearly every one of a log read in order, is placed here
        as :meth:`_back` would place it, without its call: a report hands over one a window."""
        items = self._items
        if at is not None and items:
            newest = items[-1]
            if newest.start <= at < newest.start + self._seconds:
                self._last[window] = max(at, self._last[window])
                self._at = max(at, self._at)
                newest.end = max(newest.end, at)
                self._recopy = self._recopy or 1
                return newest
        back = self._back(at, window)
        self._recopy = max(self._recopy, back)
        return self._items[-back]

    def _back(self, at: float | None, window: bool) -> int:
        """Where the stretch ``at`` falls in is, counted from the newest (1). Windows and node
        moments of one read arrive apart (a moment closes after its windows), so an earlier
        time goes to its own stretch, or the first one after it where a gap holds no stretch
        of its own."""
        items = self._items
        if at is None:
            at = self._last[window]
        else:
            self._last[window] = max(at, self._last[window])
        if items and at < items[-1].start:
            later = 1
            for back, stretch in enumerate(reversed(items), 1):
                if stretch.start <= at:
                    return back if at < stretch.start + self._seconds else later
                later = back
            return len(items)
        self._at = max(at, self._at)
        if items and at < items[-1].start + self._seconds:
            items[-1].end = max(items[-1].end, at)
            return 1
        items.append(Stretch(at, at))
        self._copies.append(None)
        self._recopy += 1  # the changed ones are one further from the newest now
        return 1

    def add_window(
        self, at: float | None, drafts: float | None, accepted: float | None, off: bool
    ) -> None:
        """One decode window: its draft rounds and accepted draft tokens, or drafting off."""
        counted = None if drafts is None or accepted is None else (drafts, accepted)
        self._add_windows(at, [(counted, off)])

    def add_records(
        self, records: Sequence[StatsRecord], ats: Iterable[float | None], interval: int | None
    ) -> None:
        """Decode windows in order, each at its time in ``ats``, as :meth:`add_window` of
        each (:func:`_record_counts` at the configured log ``interval``, else its engine's
        own); lines that repeat another scheduler's figures are left out
        (``speaks_for_node``). The stretch is looked up once
        per run of equal times: a busy node's DP ranks log one window each per second."""
        if len(records) == 1:  # a live pass's one window: no groups to make
            record = records[0]
            if speaks_for_node(record):
                every = interval or _log_interval(record.engine)
                off = bool(record.extra) and drafting_off(record)
                self._add_window(next(iter(ats)), _record_counts(record, every), off)
            return
        every = _one_interval(records, interval)
        speak = all_speak_for_node(records)
        windows = (
            (at, (_record_counts(record, every), bool(record.extra) and drafting_off(record)))
            for at, record in zip(ats, records, strict=False)
            if speak or speaks_for_node(record)
        )
        self._add_grouped(windows)

    def add_columns(
        self,
        ats: Iterable[float | None],
        lengths: Sequence[float | None],
        running: Sequence[int | None],
        engine: str,
        interval: int | None,
    ) -> None:
        """Decode windows as :meth:`add_records` of their records, from a batch's columns
        (each window's time, accept length and running requests): windows that all speak for
        the node, none with drafting off, none with counts of its own, of one ``engine``.
        Their counts are :func:`_record_counts`'s: rounds of the log interval's batches."""
        every = interval or _log_interval(engine)
        ats = list(ats)
        if not every:  # no counts: each time's stretch is only placed
            for at, _ in groupby(ats):
                self._stretch(at, True)
            return
        drafts = [float((requests or 1) * every) for requests in running]
        if None in lengths or min(drafts, default=1.0) <= 0:  # some windows count no round
            counts: list[tuple[float, float] | None] = [
                None if length is None else (rounds, (length - 1.0) * rounds)
                for length, rounds in zip(lengths, drafts, strict=True)
            ]
            self._add_grouped(zip(ats, zip(counts, repeat(False)), strict=True))
            return
        known = cast("Sequence[float]", lengths)  # no None among them
        accepted = [(length - 1.0) * rounds for length, rounds in zip(known, drafts, strict=True)]
        start = 0
        for at, group in groupby(ats):  # every window drafted: each time's, summed in order
            end = start + len(list(group))
            stretch = self._stretch(at, True)
            stretch.windows += end - start
            stretch.drafts = reduce(add, drafts[start:end], stretch.drafts)
            stretch.accepted = reduce(add, accepted[start:end], stretch.accepted)
            start = end

    def _add_grouped(
        self, windows: Iterable[tuple[float | None, tuple[tuple[float, float] | None, bool]]]
    ) -> None:
        """Windows in order, each (time, (counts, drafting off)): the stretch is looked up
        once per run of equal times, and the windows of consecutive times that fall in one
        stretch are summed into it together (a backlog dated by its logged times has a time
        a second)."""
        current: Stretch | None = None
        pending: list[tuple[tuple[float, float] | None, bool]] = []
        for at, group in groupby(windows, itemgetter(0)):
            stretch = self._stretch(at, True)
            if stretch is not current:
                if current is not None:
                    _sum_into(current, pending)
                current, pending = stretch, []
            pending.extend(map(itemgetter(1), group))
        if current is not None:
            _sum_into(current, pending)

    def _add_windows(
        self, at: float | None, windows: list[tuple[tuple[float, float] | None, bool]]
    ) -> None:
        """Windows at one time into its stretch (``_sum_into``)."""
        _sum_into(self._stretch(at, True), windows)

    def _add_window(self, at: float | None, counts: tuple[float, float] | None, off: bool) -> None:
        """:meth:`_add_windows` of one window."""
        stretch = self._stretch(at, True)
        stretch.off += off
        if not off and counts and counts[0] > 0:
            stretch.windows += 1
            stretch.drafts += counts[0]
            stretch.accepted += counts[1]

    def add_moment(
        self,
        at: float | None,
        running: float | None,
        throughput: float | None,
        baseline: float | None,
        off: bool,
    ) -> None:
        """One node moment: its load and throughput, and the baseline at that load."""
        if not running or throughput is None:
            return
        stretch = self._stretch(at, False)
        (stretch.plain if off else stretch.drafting).add(running, throughput, baseline)

    def items(self) -> tuple[Stretch, ...]:
        """Copies of the stretches, oldest first: the same copies as the last call's for the
        stretches that did not change since (callers never change them)."""
        items, copies = self._items, self._copies
        for back in range(1, min(self._recopy, len(items)) + 1):
            copies[-back] = items[-back].copy()
        self._recopy = 0
        return tuple(copies)  # type: ignore[arg-type]  # every one copied by now


def _sum_into(stretch: Stretch, windows: list[tuple[tuple[float, float] | None, bool]]) -> None:
    """Windows, each (counts, drafting off), into ``stretch``, summed in order (a float sum
    depends on it)."""
    drafted = [counts for counts, off in windows if not off and counts and counts[0] > 0]
    stretch.off += sum(off for _, off in windows)
    if drafted:
        stretch.windows += len(drafted)
        stretch.drafts = reduce(add, map(itemgetter(0), drafted), stretch.drafts)
        stretch.accepted = reduce(add, map(itemgetter(1), drafted), stretch.accepted)


def _record_counts(record: StatsRecord, interval: int | None) -> tuple[float, float] | None:
    """A decode window's draft rounds and accepted draft tokens: counted where the engine
    counts them (vLLM), else its log interval of batches (``interval`` as configured, else
    its engine's own) of the window's running requests at its mean accept length; with no
    interval, an engine that did not count the rounds had at most one a drafted token. None
    for a window without an accept length, or with nothing to count its rounds by.
    One call per window: a catch-up hands over hundreds of thousands."""
    counts = record.draft_counts
    if counts is not None and counts.drafts is not None and counts.accepted_tokens is not None:
        return float(counts.drafts), float(counts.accepted_tokens)
    length = record.accept_length
    if length is None:
        return None
    every = interval or _log_interval(record.engine)
    if every:
        rounds = float((record.running_requests or 1) * every)
    elif counts is not None and counts.draft_tokens:
        rounds = float(counts.draft_tokens)
    else:
        return None
    return rounds, (length - 1.0) * rounds


def _one_interval(records: Sequence[StatsRecord], interval: int | None) -> int | None:
    """``interval``, else the log interval of the one engine that wrote ``records`` (looked up
    once, not per window, as :func:`_record_counts` would); else ``interval`` as given."""
    if interval or not records:
        return interval
    engine = records[0].engine
    if len(set(map(_ENGINE, records))) != 1:
        return interval
    return _log_interval(engine)


_ENGINE = attrgetter("engine")


def _log_interval(engine: str) -> int | None:
    """The decode rounds between two stats lines of ``engine`` where nothing configured says."""
    own = registry.BY_NAME.get(engine)
    return None if own is None else own.decode_log_interval


@dataclass(frozen=True, slots=True)
class Method:
    """The speculative method the windows were drafted by, as far as anything said it.

    ``algorithm`` None: nothing said it (vLLM's ``/metrics`` does not name its method); then
    only what holds for every method is judged (a collapse, the lowest floor of all, speed).
    ``standard`` None for an algorithm specwatch has no standard for: speed only.
    """

    engine: str | None = None
    algorithm: str | None = None
    standard: Standard | None = None
    steps: int | None = None  # draft steps, which cap the floor
    source: str | None = None  # where the method was learnt ("log", "server_info", ...)

    @property
    def known(self) -> bool:
        return self.algorithm is not None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "algorithm": self.algorithm,
            "family": self.standard.family if self.standard is not None else None,
            "known": self.known,
            "source": self.source,
        }


def method_of(config: ServerConfig, source: str | None) -> Method:
    """The method ``config`` names, learnt from ``source`` (None: nothing named it)."""
    return _method(
        config.engine,
        config.algorithm,
        config_standard(config),
        config.num_steps,
        source if config.algorithm is not None else None,
    )


@lru_cache(maxsize=256)
def _method(
    engine: str | None,
    algorithm: str | None,
    standard: Standard | None,
    steps: int | None,
    source: str | None,
) -> Method:
    """One object per method: a run's ``StateMemo`` compares the method of every judgement
    with the last one's, at once when it is the same object."""
    return Method(engine, algorithm, standard, steps, source)


@dataclass(frozen=True, slots=True)
class SpeedBaseline:
    """What a speedup is measured against, and who said it: ``source`` "configured" (a flag
    or key, named by ``option``); other sources (the fleet, the node's own past, its
    drafting-off windows) hand the judge the same shape."""

    source: str = "configured"
    option: str | None = None


@dataclass(frozen=True, slots=True)
class Case:
    """Everything one judgement rests on, as plain values."""

    # The server run's, oldest first: their starts and their ends increase (``Stretches``).
    stretches: Sequence[Stretch]
    method: Method = Method()
    expected_accept_length: float | None = None
    thresholds: Thresholds = DEFAULT
    baseline: SpeedBaseline | None = None  # None: no baseline, no speed judged
    pipelined: bool = False  # a stage's running requests are one micro-batch's: no speed
    probes: bool = True  # windows drafting amid drafting-off ones are adaptive's probes
    # What the figures were measured over, when not the log's decode windows (doctor --url).
    basis: str | None = None
    # Whether the windows' drafts are counted; a gauge's mean (SGLang's /metrics) is not, and
    # stands on its own.
    counted: bool = True
    # The time judged at, on the windows' clock (the daemon's wall clock): windows older than
    # the present are the past, and a node without newer ones has no decode to judge. None:
    # the newest window's time (a log read whole).
    now: float | None = None
    # Whether the windows are two servers' lines in one log (``state.streams``), so no one
    # server's: then nothing is judged of them.
    interleaved: bool = False
    # The states of stretches judged before, kept by whoever judges one run again and again
    # (the daemon): a stretch that has not changed is not judged again. None: judged afresh.
    memo: StateMemo | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Episode:
    """A stretch of the run's past in a state other than its present one."""

    state: str
    start: float
    end: float
    accept_length: float | None

    def text(self) -> str:
        length = "" if self.accept_length is None else f" (accept length {self.accept_length:.2f})"
        return f"{self.state.replace('_', ' ')} {_clock(self.start)} to {_clock(self.end)}{length}"


@dataclass(frozen=True, slots=True)
class Judgement:
    """The node's state now, since when, on what, and what the run did before."""

    state: str
    since: float | None
    span: tuple[float, float] | None  # first and last time of the judged windows
    windows: int  # decode windows with drafting on judged
    drafts: float  # their draft rounds
    off_windows: int  # decode windows with drafting off among them
    accept_length: float | None  # draft-weighted mean of the judged windows
    speedup: float | None  # of the judged moments, against the baseline at their loads
    throughput: float | None
    baseline: float | None
    running: int | None
    verdicts: tuple[Verdict, ...]
    method: Method = Method()
    past: tuple[Episode, ...] = ()
    notes: tuple[str, ...] = ()  # what was not judged, and why, in plain words
    baseline_source: str | None = None

    @property
    def severity(self) -> str:
        return STATES[self.state]

    @property
    def verdict(self) -> Verdict | None:
        """The verdict that names the state, when one does."""
        return next((v for v in self.verdicts if v.code == _CODES.get(self.state)), None)

    @property
    def mixed(self) -> bool:
        """Whether the judged windows are two servers' mix: none of their figures (accept
        length, speed) is either server's to show."""
        return self.state == "interleaved"

    @property
    def held_off(self) -> bool:
        """Whether the judged windows were held to the drafting-off tolerance (mostly
        drafting off): the node's speed now is that of a server not speculating."""
        slow = _CODES["drafting_off_below_baseline"]
        return self.state in ("drafting_off", slow) or any(v.code == slow for v in self.verdicts)

    @property
    def sizes_drafts(self) -> bool:
        """Whether the judged windows may size the drafts (a draft count, draft steps by
        load): not two servers' mix, which is neither's."""
        return not self.mixed

    @property
    def span_text(self) -> str:
        return "no decode window" if self.span is None else span_text(*self.span)

    @property
    def head(self) -> str:
        """The state in a few words: its verdict's summary, or what the state means."""
        verdict = self.verdict
        return verdict.summary if verdict is not None else _STATE_WORDS[self.state]

    def judged_on(self) -> str:
        """What the state rests on and since when, as a sentence."""
        if self.state == "interleaved":  # two servers' windows: read, none judged
            count = self.windows + self.off_windows
            return f"None of the newest {count} decode windows ({self.span_text}) is judged."
        drafts = f", {self.drafts:,.0f} draft rounds" if self.windows else ""
        since = f"; {self.state.replace('_', ' ')} since {_clock(self.since)}" if self.since else ""
        return (
            f"Judged on the newest {self.windows + self.off_windows} decode windows "
            f"({self.span_text}{drafts}){since}."
        )

    def summary(self) -> str:
        """One line: the state, since when, over what."""
        return f"{self.state}: {self.head}. {self.judged_on()}"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "severity": self.severity,
            "since": _iso(self.since),
            "span": None if self.span is None else [_iso(at) for at in self.span],
            "windows": self.windows,
            "drafts": round(self.drafts),
            "drafting_off_windows": self.off_windows,
            "accept_length": self.accept_length,
            "speedup": self.speedup,
            "baseline_source": self.baseline_source,
            "method": self.method.to_json_dict(),
            "past": [
                {
                    "state": e.state,
                    "start": _iso(e.start),
                    "end": _iso(e.end),
                    "accept_length": e.accept_length,
                }
                for e in self.past
            ],
            "notes": list(self.notes),
        }


# The verdict code of each state that has one.
_CODES = {
    "collapsed": "accept_length_collapsed",
    "accept_length_low": "accept_length_low",
    "drifting": "accept_length_drifting",
    "slower_than_baseline": "slower_than_baseline",
    "drafting_off_below_baseline": "drafting_off_below_baseline",
    "baseline_implausible": "baseline_implausible",
}
_STATE_WORDS = {
    "interleaved": (
        "two servers write to this one log, so its windows are a mix of both's, judged as "
        "neither's (finding interleaved_servers)"
    ),
    "too_few_drafts": "too few drafts to judge the drafter",
    "no_decode": "no decode window to judge",
    "drafting_off": "drafting off at this load (by design), within what keeping speculation "
    "ready costs",
    "healthy": "speculation works as it should",
}
# What the daemon logs on entering a state without a verdict of its own.
STATE_ADVICE = {
    "interleaved": (
        "give each server a log file of its own and point a target at each (finding "
        "interleaved_servers)"
    ),
    "too_few_drafts": "wait for traffic the drafter drafts for; nothing is judged until then",
    "no_decode": "nothing to do if the server is idle; else check the log path and log level",
    "drafting_off": "nothing to do: drafting comes back on when the load drops",
    "healthy": "nothing to do",
}


@dataclass(frozen=True, slots=True)
class _Figures:
    """Sums over some stretches: the present's, or one stretch's."""

    windows: int
    drafts: float
    accepted: float
    off: int
    drafting: Load
    plain: Load
    first: float | None
    last: float | None

    @property
    def accept_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def off_share(self) -> float | None:
        total = self.windows + self.off
        if total:
            return self.off / total
        moments = self.drafting.moments + self.plain.moments
        return self.plain.moments / moments if moments else None

    @property
    def mostly_off(self) -> bool:
        share = self.off_share
        return share is not None and share >= OFF_SHARE

    @property
    def load(self) -> Load:
        """The moments speed is judged on: those with drafting off when most windows had it
        off (held to the drafting-off tolerance), else those drafting."""
        return self.plain if self.mostly_off else self.drafting

    @property
    def any_load(self) -> bool:
        return bool(self.drafting.moments or self.plain.moments)


def _figures(stretches: Iterable[Stretch]) -> _Figures:
    items = list(stretches)
    drafting, plain = Load(), Load()
    for stretch in items:
        drafting.add_load(stretch.drafting)
        plain.add_load(stretch.plain)
    return _Figures(
        windows=sum(s.windows for s in items),
        drafts=sum(s.drafts for s in items),
        accepted=sum(s.accepted for s in items),
        off=sum(s.off for s in items),
        drafting=drafting,
        plain=plain,
        first=items[0].start if items else None,
        last=items[-1].end if items else None,
    )


def present(stretches: Sequence[Stretch], now: float | None = None) -> list[Stretch]:
    """The stretches of the newest ``PRESENT_SECONDS`` of decode windows, up to ``now``
    (none when the newest is older than that)."""
    if not stretches:
        return []
    newest = stretches[-1].end
    if now is not None and newest < now - PRESENT_SECONDS:
        return []
    # Ends increase (``Case.stretches``): the present is the newest few, found from the end
    # (a day of stretches is 1,440 to look through otherwise, at every judgement).
    first = len(stretches) - 1
    while first > 0 and stretches[first - 1].end > newest - PRESENT_SECONDS:
        first -= 1
    return list(stretches[first:])


def _newest_stretch(case: Case, reference: float | None) -> tuple[list[Stretch], _Figures]:
    """The windows judged as now: of the last ``PRESENT_SECONDS``, the newest minutes that
    agree (a collapse three minutes old is judged on its three minutes, not averaged with the
    healthy two before it), or all of them when those hold too few drafts; and their sums."""
    recent = present(case.stretches, case.now)
    newest: str | None = None
    start = len(recent)
    for index in range(len(recent) - 1, -1, -1):
        alone = _stretch_state(recent[index], case, reference)
        if alone in _UNTOLD:
            continue
        if newest is not None and alone != newest:
            break
        newest, start = alone, index
    agreeing = recent[start:] if newest is not None else recent
    figures = _figures(agreeing)
    if case.counted and figures.drafts < MIN_DRAFTS and figures.windows + figures.off:
        return recent, figures if len(agreeing) == len(recent) else _figures(recent)
    return agreeing, figures


def judge(case: Case) -> Judgement:
    """The node's state over the newest stretch of its windows, since when, and its past."""
    memo = case.memo
    if memo is None:
        return _judged(case)
    memo.keep_only(case.stretches)
    return memo.judgement(case)


def _judged(case: Case) -> Judgement:
    reference = _earlier_level(case)
    now, figures = _newest_stretch(case, reference)
    if case.interleaved:
        return _interleaved(case, figures)
    state, found, notes = _decide(figures, case, MIN_DRAFTS, reference)
    since = _since(case, state, reference, len(now))
    past = _past(case, state, reference, len(now))
    return Judgement(
        state=state,
        since=since,
        span=None
        if figures.first is None or figures.last is None
        else (
            figures.first,
            figures.last,
        ),
        windows=figures.windows,
        drafts=figures.drafts,
        off_windows=figures.off,
        accept_length=figures.accept_length,
        speedup=None if case.baseline is None or case.pipelined else figures.load.speedup,
        throughput=figures.load.mean_throughput,
        baseline=figures.load.mean_baseline,
        running=figures.load.mean_running,
        verdicts=tuple(found),
        method=case.method,
        past=past,
        notes=tuple(notes),
        baseline_source=case.baseline.source if case.baseline is not None else None,
    )


def _interleaved(case: Case, figures: _Figures) -> Judgement:
    """Windows of two servers read as one: their mean is neither's, so no accept length,
    speed or state of the drafter is given, only what was judged over."""
    span = None if figures.first is None or figures.last is None else (figures.first, figures.last)
    return Judgement(
        state="interleaved",
        since=None,
        span=span,
        windows=figures.windows,
        drafts=figures.drafts,
        off_windows=figures.off,
        accept_length=None,
        speedup=None,
        throughput=None,
        baseline=None,
        running=None,
        verdicts=(),
        method=case.method,
        baseline_source=case.baseline.source if case.baseline is not None else None,
    )


def _decide(
    figures: _Figures, case: Case, min_drafts: float, reference: float | None
) -> tuple[str, list[Verdict], list[str]]:
    """The state the figures show, the verdicts behind it (most severe first) and notes on
    what was not judged.

    The verdicts' words name the judged span (``RunFigures.windows_text``), which nothing
    else reads: it is written only where a verdict is given (a healthy node, most of them,
    and a stretch's state alone give none), since dates in words cost as much as the rest
    of a decision."""
    total = figures.windows + figures.off
    if total == 0 and not figures.any_load:
        return "no_decode", [], ["no decode window in the judged span"]
    accept, speed, notes = _verdicts(figures, case, min_drafts, reference, worded=False)
    if accept is not None or speed is not None:  # their texts, with the span in words
        accept, speed, notes = _verdicts(figures, case, min_drafts, reference, worded=True)
    if accept is not None and accept.code == _CODES["collapsed"] and speed is not None:
        # The collapse is why it is slow (its verdict says how slow): one page, no ticket
        # beside it, as the alert rules have it. A baseline that cannot be right still says so.
        speed = speed if speed.code == _CODES["baseline_implausible"] else None
    found = sorted(
        (v for v in (accept, speed) if v is not None),
        key=lambda v: _ORDER.index(_STATE_OF[v.code]),
    )
    if found:
        return _STATE_OF[found[0].code], found, notes
    if any(note.startswith(_TOO_FEW) for note in notes):
        return "too_few_drafts", [], notes
    if figures.mostly_off:
        return "drafting_off", [], notes
    return "healthy", [], notes


def _verdicts(
    figures: _Figures, case: Case, min_drafts: float, reference: float | None, worded: bool
) -> tuple[Verdict | None, Verdict | None, list[str]]:
    """The acceptance and speed verdicts of the figures, and the notes on what was not
    judged; ``worded``: as :func:`_run_figures`."""
    notes: list[str] = []
    run = _run_figures(figures, case, worded)
    accept = _acceptance(figures, case, min_drafts, reference, run, notes)
    return accept, _speed(figures, case, run, notes), notes


_ORDER = tuple(STATES)
_STATE_OF = {code: state for state, code in _CODES.items()}
_TOO_FEW = "too few drafts"


def _run_figures(figures: _Figures, case: Case, worded: bool = True) -> texts.RunFigures:
    """The judged figures in the shape the verdicts' texts are written for; without
    ``worded``, without the judged span in words (for deciding, not for telling)."""
    option = case.baseline.option if case.baseline is not None else None
    measured = None
    if worded:
        measured = f"{figures.windows + figures.off} decode windows"
        told = []
        if figures.windows and case.counted:
            told.append(f"{figures.drafts:,.0f} draft rounds")
        if figures.first is not None and figures.last is not None:
            told.append(span_text(figures.first, figures.last))
        if told:
            measured += f" ({', '.join(told)})"
    return texts.RunFigures(
        windows=figures.windows,
        accept_length=figures.accept_length,
        throughput=figures.load.mean_throughput if figures.load.based else None,
        baseline=figures.load.mean_baseline,
        running=figures.load.mean_running,
        baseline_option=option,
        drafting_off=figures.off,
        basis=case.basis,
        windows_text=measured,
    )


def _acceptance(
    figures: _Figures,
    case: Case,
    min_drafts: float,
    reference: float | None,
    run: texts.RunFigures,
    notes: list[str],
) -> Verdict | None:
    """Collapsed, low or drifting, on enough drafts; None when none holds or it cannot be
    told (a note then says why)."""
    if figures.mostly_off and case.probes:
        return None  # adaptive's probes: the finding adaptive_drafter_given_up judges them
    length = figures.accept_length
    if length is None:
        return None
    if figures.windows < MIN_WINDOWS or (case.counted and figures.drafts < min_drafts):
        notes.append(
            f"{_TOO_FEW}: {figures.drafts:,.0f} draft rounds in {figures.windows} decode "
            f"windows (accept length {length:.2f}); at least {min_drafts:,.0f} rounds and "
            f"{MIN_WINDOWS} windows are needed to judge the drafter"
        )
        return None
    method = case.method
    standard = method.standard if method.known else UNKNOWN_METHOD
    if standard is None:
        return None  # an algorithm without a standard: speed only (finding algorithm_unknown)
    t = case.thresholds
    if length <= t.collapsed_accept_length:
        return texts.collapsed(run, t, standard)
    floor = floor_for(standard, method.steps) if method.known else LOWEST_FLOOR
    limit = t.low_accept_limit(case.expected_accept_length, floor)
    drift = _drift_text(length, reference)
    if limit is not None and length < limit:
        return texts.low(run, case.expected_accept_length, limit, standard, t, drift)
    if reference is not None and length < DRIFT_SHARE * reference:
        return texts.drifting(run, reference, DRIFT_SHARE, standard)
    return None


def _drift_text(length: float, reference: float | None) -> str:
    if reference is None or length >= DRIFT_SHARE * reference:
        return ""
    return f"; down from {reference:.2f} in the run's first hour"


def _speed(
    figures: _Figures, case: Case, run: texts.RunFigures, notes: list[str]
) -> Verdict | None:
    """The speed verdict of the judged moments, by the tolerance of what they did: drafting
    off, or speculating."""
    if case.baseline is None:
        return None
    if case.pipelined:
        notes.append(
            "speed not compared with the baseline: a pipeline stage's running requests are "
            "one micro-batch's, its throughput the whole pipeline's"
        )
        return None
    if run.speedup is None:
        return None
    implausible = texts.baseline_implausible(run)
    if implausible is not None:
        return implausible
    if figures.mostly_off:
        return texts.drafting_off_slow(run, case.thresholds, case.method.engine)
    return texts.slower_than_baseline(run, case.thresholds)


def _earlier_level(case: Case) -> float | None:
    """The node's own accept length in its first hour, on a run long enough to drift; None
    when the run is shorter or that hour drafted too little."""
    items = case.stretches
    if not items or items[-1].end - items[0].start < DRIFT_RUN_SECONDS:
        return None
    # Starts increase (``Case.stretches``): the first hour's are the first few.
    early = _figures(takewhile(lambda s: s.start < items[0].start + DRIFT_EARLY_SECONDS, items))
    if early.drafts < MIN_DRAFTS or early.windows < MIN_WINDOWS:
        return None
    return early.accept_length


def _stretch_state(stretch: Stretch, case: Case, reference: float | None) -> str:
    memo = case.memo
    if memo is None:
        return _decide(_figures((stretch,)), case, STRETCH_MIN_DRAFTS, reference)[0]
    return memo.state(stretch, case, reference)


class StateMemo:
    """The state each stretch showed alone, remembered by the stretch's identity for one
    run's judgements: ``Stretches.items`` hands out the same copy of a stretch until it
    changes, so after a day of serving a judgement decides the newest stretch or two, not
    1,440 (each state depends only on its stretch, the case's settings and the run's early
    level). Safe to share between threads: at worst a state is decided twice."""

    _KEEP_EXTRA = 64  # forgotten copies kept before the memo is pruned

    def __init__(self) -> None:
        # The settings and early level the states were decided under, and the states, by
        # the stretch's id (the stretch kept with it, so that the id stays its own).
        self._kept: tuple[tuple[object, ...], dict[int, tuple[Stretch, str]]] = ((), {})
        # The last judgement and what it was of (``judgement``).
        self._judged: tuple[tuple[object, ...], Judgement] | None = None
        # The stretches of the last ``states`` call, their states and the settings then, and
        # where each one's run began (``runs``).
        self._states: tuple[tuple[Stretch, ...], list[str], tuple[object, ...], list[int]] = (
            (),
            [],
            (),
            [],
        )

    def state(self, stretch: Stretch, case: Case, reference: float | None) -> str:
        _, states = self._under(case, reference)
        known = states.get(id(stretch))
        if known is not None and known[0] is stretch:
            return known[1]
        state = _decide(_figures((stretch,)), case, STRETCH_MIN_DRAFTS, reference)[0]
        states[id(stretch)] = (stretch, state)
        return state

    def _under(
        self, case: Case, reference: float | None
    ) -> tuple[tuple[object, ...], dict[int, tuple[Stretch, str]]]:
        """The case's settings and early level, and the states decided under them (none yet
        when these changed since); another thread judging under other settings meanwhile
        changes neither."""
        context = (*_settings(case), reference)
        kept, states = self._kept
        if kept != context:
            states = {}
            self._kept = (context, states)
        return context, states

    def states(self, case: Case, reference: float | None) -> Sequence[str]:
        """The state of each of ``case``'s stretches: those of the last call's for its
        stretches that are still the same (all but the newest, between two judgements of a
        live run), so a day of stretches is not looked up one by one at every judgement."""
        return self.runs(case, reference)[0]

    def runs(self, case: Case, reference: float | None) -> tuple[Sequence[str], Sequence[int]]:
        """``states``, and where each stretch's run began: the index of the first of the
        stretches in a row that show its state (those that tell nothing, ``_UNTOLD``, passed
        over), -1 for one that tells nothing. Kept as the states are, so the run of a day of
        one state is not walked at every judgement (``_since``, ``_past``)."""
        items = tuple(case.stretches)
        last_items, last_states, last_context, last_firsts = self._states
        context, _ = self._under(case, reference)
        if items is last_items and context == last_context:
            return last_states, last_firsts  # the same judgement asks twice
        same = 0
        if last_context == context and last_items:
            for keep in (len(last_items) - 1, len(last_items) - 2):
                if 0 < keep <= len(items) and items[:keep] == last_items[:keep]:
                    same = keep
                    break
        states = [*last_states[:same], *(self.state(s, case, reference) for s in items[same:])]
        firsts = last_firsts[:same]
        told = _told_before(states, same)
        for index in range(same, len(states)):
            state = states[index]
            if state in _UNTOLD:
                firsts.append(-1)
                continue
            firsts.append(firsts[told] if told >= 0 and states[told] == state else index)
            told = index
        self._states = (items, states, context, firsts)
        return states, firsts

    def judgement(self, case: Case) -> Judgement:
        """The last judgement again while its case is the same but for the moment (a scrape
        that finds no new decode window since the last): the moment only matters where the
        newest stretch leaves the present, which is part of what is compared."""
        items = tuple(case.stretches)
        gone = bool(items) and case.now is not None and items[-1].end < case.now - PRESENT_SECONDS
        key = (items, gone, *_settings(case), case.interleaved)
        last = self._judged
        if last is not None and last[0] == key:
            return last[1]
        judged = _judged(case)
        self._judged = (key, judged)
        return judged

    def keep_only(self, stretches: Sequence[Stretch]) -> None:
        """Forget the stretches no longer judged (replaced by newer copies), now and then."""
        kept, states = self._kept
        if len(states) > len(stretches) + self._KEEP_EXTRA:
            current = {id(stretch) for stretch in stretches}
            pruned = {key: value for key, value in states.items() if key in current}
            self._kept = (kept, pruned)


def _settings(case: Case) -> tuple[object, ...]:
    """What of ``case`` a stretch's state is decided under, but its early level: the fields
    ``StateMemo`` compares to know its states and its last judgement still hold."""
    return (
        case.method,
        case.expected_accept_length,
        case.thresholds,
        case.baseline,
        case.pipelined,
        case.probes,
        case.basis,
        case.counted,
    )


def _states(case: Case, reference: float | None) -> Sequence[str]:
    """The state each of the case's stretches shows alone, oldest first."""
    if case.memo is not None:
        return case.memo.states(case, reference)
    return [_stretch_state(stretch, case, reference) for stretch in case.stretches]


def _told_before(states: Sequence[str], end: int) -> int:
    """The index of the newest of ``states[:end]`` that tells a state; -1 when none does."""
    index = end - 1
    while index >= 0 and states[index] in _UNTOLD:
        index -= 1
    return index


def _since(case: Case, state: str, reference: float | None, present_count: int) -> float | None:
    """Where the run of stretches showing ``state`` began: walking back from the newest, a
    stretch in another state ends it, one that tells nothing neither ends nor extends it."""
    items = case.stretches
    if not items:
        return None
    if state in _UNTOLD:
        recent = present(items, case.now)
        return recent[0].start if recent else items[-1].end
    if case.memo is not None:  # the runs kept: no walk back through them
        states, firsts = case.memo.runs(case, reference)
        told = _told_before(states, len(states))
        if told >= 0 and states[told] == state:
            return items[firsts[told]].start
        return items[-max(present_count, 1)].start
    since = None
    for stretch, alone in zip(reversed(items), reversed(_states(case, reference)), strict=True):
        if alone in _UNTOLD:
            continue
        if alone != state:
            break
        since = stretch.start
    return since if since is not None else items[-max(present_count, 1)].start


def _past(
    case: Case, state: str, reference: float | None, present_count: int
) -> tuple[Episode, ...]:
    """The run's earlier episodes in a state other than ``state`` (a collapse that ended),
    each at least ``EPISODE_SECONDS`` long; the newest ``MAX_EPISODES``."""
    if case.memo is not None:
        return _past_of_runs(case, state, reference, present_count, case.memo)
    items = list(case.stretches)[: len(case.stretches) - present_count]
    states = _states(case, reference)[: len(items)]
    episodes: list[Episode] = []
    current: list[Stretch] = []
    current_state = ""

    def close() -> None:
        if current and current_state not in (state, "healthy", "drafting_off"):
            end = current[-1].end
            if end - current[0].start >= EPISODE_SECONDS:
                length = _figures(current).accept_length
                episodes.append(Episode(current_state, current[0].start, end, length))

    for stretch, alone in zip(items, states, strict=True):
        if alone in _UNTOLD:
            continue
        if alone != current_state:
            close()
            current, current_state = [], alone
        current.append(stretch)
    close()
    return tuple(episodes[-MAX_EPISODES:])


def _past_of_runs(
    case: Case, state: str, reference: float | None, present_count: int, memo: StateMemo
) -> tuple[Episode, ...]:
    """``_past`` from the runs the memo keeps, newest first, until ``MAX_EPISODES`` are
    found: a run of one state is passed at once, not stretch by stretch."""
    items = case.stretches
    states, firsts = memo.runs(case, reference)
    episodes: list[Episode] = []
    last = _told_before(states, len(items) - present_count)
    while last >= 0 and len(episodes) < MAX_EPISODES:
        first, shown = firsts[last], states[last]
        if shown not in (state, "healthy", "drafting_off"):
            end = items[last].end
            if end - items[first].start >= EPISODE_SECONDS:
                told = (items[i] for i in range(first, last + 1) if states[i] not in _UNTOLD)
                length = _figures(told).accept_length
                episodes.append(Episode(shown, items[first].start, end, length))
        last = _told_before(states, first)
    return tuple(reversed(episodes))


def one_stretch(
    at: float,
    windows: int,
    accept_length: float | None,
    drafts: float | None,
    running: float | None,
    throughput: float | None,
    baseline: float | None,
    off: bool,
) -> Stretch:
    """A stretch of figures read at once (a scrape's gauges or two scrapes' counters)."""
    stretch = Stretch(at, at)
    if off:
        stretch.off = max(windows, 1)
    elif accept_length is not None:
        # A gauge's mean, its rounds not counted, weighs one (``Case.counted`` False).
        stretch.windows = windows
        stretch.drafts = drafts if drafts is not None else 1.0
        stretch.accepted = (accept_length - 1.0) * stretch.drafts
    if running and throughput is not None:
        (stretch.plain if off else stretch.drafting).add(running, throughput, baseline)
    return stretch


def span_text(first: float, last: float) -> str:
    """``2026-03-01 14:05:10 to 14:10:02 UTC``: a span of windows, its date said once."""
    start, end = (datetime.fromtimestamp(at, tz=timezone.utc) for at in (first, last))
    if start.date() == end.date():
        return f"{start:%Y-%m-%d %H:%M:%S} to {end:%H:%M:%S} UTC"
    return f"{start:%Y-%m-%d %H:%M:%S} to {end:%Y-%m-%d %H:%M:%S} UTC"


def _clock(at: float) -> str:
    """A time as an on-call reads it beside a log: ``2026-03-01 14:05 UTC``."""
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _iso(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, tz=timezone.utc).replace(tzinfo=None).isoformat()


__all__ = [
    "MIN_DRAFTS",
    "PRESENT_SECONDS",
    "STATES",
    "Case",
    "Episode",
    "Judgement",
    "Method",
    "SpeedBaseline",
    "StateMemo",
    "Stretch",
    "Stretches",
    "judge",
]
