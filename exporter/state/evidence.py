"""The evidence findings rest on: a bounded memory of recent stats records.

The daemon, ``specwatch doctor`` and ``specwatch report`` each feed one :class:`Evidence`
per server run from a live tail or a file read once; it turns into the plain
:class:`~exporter.analysis.findings.Observations` that
:func:`~exporter.analysis.findings.evaluate` judges.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import partial
from itertools import islice, repeat
from typing import Any, NamedTuple

from exporter.analysis.baseline import Baseline
from exporter.analysis.findings import DecodeSample, Observations
from exporter.analysis.judge import StateMemo, Stretch, Stretches
from exporter.analysis.node import NodeMoments
from exporter.analysis.ranks import RankAccepts
from exporter.engines.ending import Ending
from exporter.engines.record import StatsRecord
from exporter.engines.server_config import ServerConfig

# Decode windows the findings judge: the daemon's evidence keeps these, and so does each run
# of `report` and `doctor`, so all of them judge the same windows.
RECENT_WINDOWS = 20
# Recent decode windows judged per DP rank: a rank logs one every few seconds under load, so
# this is its last minute or so, as the node's own recent windows are.
RANK_WINDOWS = 10


class NodeLoad(NamedTuple):
    """A node moment the evidence closed: its running requests and throughput, and whether
    adaptive speculation had drafting off (plain decoding, no speculation to credit or blame)."""

    running: int
    throughput: float
    drafting_off: bool


class Evidence:
    """Bounded memory of recent stats records, turned into :class:`Observations` on demand.

    Keeps only the last ``max_windows`` decode windows and the last ``max_lines`` recognised /
    unrecognised outcomes, so a long-running daemon's findings follow the present (a format
    drift that stopped, a drafter that recovered) and memory stays flat. Times are seconds on
    any one clock: wall clock in the daemon, log timestamps offline.
    """

    def __init__(
        self,
        started_at: float | None = None,
        max_windows: int = RECENT_WINDOWS,
        node_loads: bool = True,
        baseline: Baseline | None = None,
    ) -> None:
        """``node_loads=False`` for a reader that never asks for :meth:`recent_speedup` (a
        target without a baseline): folding DP ranks into node moments is then skipped, and it
        is the largest part of a decode record's cost."""
        self._lock = threading.Lock()
        self._node_loads = node_loads
        # Records, not DecodeSamples: most are pushed out unseen, so they are converted only when
        # observed (per-record cost matters when a long log is caught up, see bench/).
        self._windows: deque[StatsRecord] = deque(maxlen=max_windows)
        # Node-wide (running, tok/s) of the same recent windows: DP ranks of a moment summed.
        self._loads: deque[NodeLoad] = deque(maxlen=max_windows)
        self._node = NodeMoments()
        self._outcomes: deque[bool] = deque(maxlen=10 * max_windows)
        self._started_at = started_at
        self._last_decode_at: float | None = None
        self._last_at: float | None = None  # the time of the last record read
        self._silent_prefills = 0
        self._ending: Ending | None = None
        self._ranks = RankAccepts(recent=RANK_WINDOWS)
        # The run's windows by the minute, for the judge (``analysis.judge``), with the
        # baseline at each moment's load; ``interval``: SGLang's decode log interval.
        self._stretches = Stretches()
        # The states of this run's stretches the judge decided (``Case.memo``).
        self.memo = StateMemo()
        self._baseline = baseline
        self.interval: int | None = None
        # Decode windows added so far, and the samples the last observations made with that
        # count then: a window stays among the recent ones for 20 judgements or so, and is
        # converted once; the next observations convert only the windows added since.
        self._added = 0
        self._samples: tuple[int, tuple[DecodeSample, ...]] = (0, ())
        # The configuration last named with the lines' engine, and what it was named from.
        self._engine_config: tuple[ServerConfig, str, ServerConfig] | None = None

    def add_record(self, record: StatsRecord, at: float) -> None:
        """Count one recognised stats record seen at ``at``."""
        with self._lock:
            if self._started_at is None:
                self._started_at = at
            self._last_at = at
            self._outcomes.append(True)
            if record.kind == "decode":
                self._add_decodes((record,), at)
            elif not _is_probe(record):
                self._silent_prefills += 1

    def add_records(
        self,
        records: Sequence[StatsRecord],
        at: float,
        decodes: Sequence[StatsRecord] | None = None,
        times: Sequence[float] | None = None,
    ) -> list[NodeLoad]:
        """Count recognised stats records seen together at ``at``, as ``add_record`` each;
        ``decodes``, the decode records among them, when the caller has picked them out, and
        ``times``, each decode's own time (a backlog dated by its logged times; ``at`` is
        then the last one's). The node loads the records closed, when node loads are kept.

        One lock and C-speed passes per batch: the daemon hands over each read of its log.
        """
        if not records:
            return []
        if decodes is None:
            decodes = [record for record in records if record.kind == "decode"]
        with self._lock:
            if self._started_at is None:
                self._started_at = at
            self._last_at = at
            self._outcomes.extend(repeat(True, len(records)))
            closed = self._add_decodes(decodes, at, times) if decodes else []
            self._silent_prefills += _user_prefills_after_decodes(records)
        return closed

    def _add_decodes(
        self, decodes: Sequence[StatsRecord], at: float, times: Sequence[float] | None = None
    ) -> list[NodeLoad]:
        """Remember decode windows and the node loads they close, in order (returned too),
        each at ``at`` or its own time in ``times``; windows after a traceback show it ended
        nothing."""
        self._windows.extend(decodes)
        self._added += len(decodes)
        self._ranks.add(decodes)
        ats: Iterable[float] = repeat(at) if times is None else times
        self._stretches.add_records(decodes, ats, self.interval)
        if self._ending is not None and not self._ending.final:
            self._ending = None
        self._last_decode_at = at
        self._silent_prefills = 0
        if not self._node_loads:
            return []
        closed = []
        for moment in self._node.add(decodes, repeat(at) if times is None else times):
            running, tput = moment.running, moment.throughput
            if running and tput is not None and not moment.pipelined:
                closed.append(_new_load((running, tput, moment.steps == 0)))
                base = self._baseline.at(running) if self._baseline is not None else None
                when = at if times is None or moment.at is None else moment.at
                self._stretches.add_moment(when, running, tput, base, moment.steps == 0)
        self._loads.extend(closed)
        return closed

    def stretches(self) -> tuple[Stretch, ...]:
        """The run's stretches so far, oldest first (copies)."""
        with self._lock:
            return self._stretches.items()

    def recent_speedup(self, baseline: Baseline | None) -> float | None:
        """Mean node throughput over mean baseline of the recent windows, or ``None``.

        The windows the accept length of the findings is averaged over, so the draft-token
        advice rests on one period, and on the same figures ``doctor`` and ``report`` use for
        a steady log (``analysis.breakeven.advise``).
        """
        if baseline is None:
            return None
        with self._lock:
            loads = tuple(load for load in self._loads if baseline.covers(load.running))
        base = sum(baseline.at(load.running) for load in loads)
        return sum(load.throughput for load in loads) / base if loads and base > 0 else None

    def add_unrecognized(self) -> None:
        with self._lock:
            self._outcomes.append(False)

    def add_ending(self, ending: Ending) -> None:
        """A line of the server's end (see ``engines.ending``), folded into what came before."""
        with self._lock:
            self._ending = ending if self._ending is None else self._ending.merged(ending)

    @property
    def ending(self) -> Ending | None:
        """How the run ended, as far as its lines said; None while it serves."""
        with self._lock:
            return self._ending

    def observations(self, config: ServerConfig, now: float, **upstream: Any) -> Observations:
        """Inputs for :func:`evaluate` as of ``now``; ``upstream`` adds ``metrics_endpoint``,
        ``cuda_graph_share`` and ``upstream_busy`` from a scrape, and any other field of
        ``Observations`` the caller knows better (a daemon's ``log_watched``).

        Silence is counted from the later of the last decode line and the start of watching
        (lines older than that are history), to the last line read for the log's own silence,
        not to ``now``: a log caught up on long after its server stopped ends where it ends,
        and its age is staleness (the gauges say so), not decode lines missing. Running
        requests upstream are set against the time to ``now``."""
        with self._lock:
            marks = (self._last_decode_at, self._started_at)
            since = max((mark for mark in marks if mark is not None), default=now)
            last = since if self._last_at is None else self._last_at
            samples = self._decode_samples()
            if config.engine is None and self._windows:
                # No start line read (a log followed from its end): its lines say the engine.
                config = self._with_engine(config, self._windows[-1].engine)
            fields: dict[str, Any] = {
                "log_watched": self._started_at is not None,
                "prefills_without_decode": self._silent_prefills,
                "seconds_without_decode": max(0.0, last - since),
                "seconds_watched_without_decode": max(0.0, now - since),
                "stats_lines": len(self._outcomes),
                "unrecognized_lines": self._outcomes.count(False),
                "ending": self._ending,
                "ranks": self._ranks.figures(),
            }
            fields.update(upstream)
            return Observations(
                config=_with_draft_length(config, samples), windows=samples, **fields
            )

    def _with_engine(self, config: ServerConfig, engine: str) -> ServerConfig:
        """``config`` naming ``engine``: the same object while both are (a copy of a
        configuration of some forty fields cost a tenth of each judgement)."""
        kept = self._engine_config
        if kept is not None and kept[0] is config and kept[1] == engine:
            return kept[2]
        named = replace(config, engine=engine)
        self._engine_config = (config, engine, named)
        return named

    def _decode_samples(self) -> tuple[DecodeSample, ...]:
        """The recent windows as the rules read them; under the lock. Windows only join at
        the end and leave at the front (``_add_decodes``), so the last call's samples of the
        windows still recent are these windows' samples, and only the newer are converted."""
        windows, added = self._windows, self._added
        then, known = self._samples
        new = min(added - then, len(windows))
        samples = known[len(known) - (len(windows) - new) :]
        if new:
            made = map(DecodeSample.from_record, islice(windows, len(windows) - new, None))
            samples = (*samples, *made)
        self._samples = (added, samples)
        return samples


# A NodeLoad of all its fields, built in C (``tuple.__new__``), not by its ``__new__`` in Python.
_new_load = partial(tuple.__new__, NodeLoad)


def _with_draft_length(config: ServerConfig, windows: Sequence[DecodeSample]) -> ServerConfig:
    """The draft length the windows show (vLLM logs one acceptance per drafted position) when
    nothing else told it: ``k`` drafted tokens are SGLang's ``num_steps`` of a chain, and
    ``k + 1`` verified positions its ``num_draft_tokens``."""
    if config.num_steps is not None or config.num_draft_tokens is not None:
        return config
    for window in reversed(windows):
        if window.accept_rate_by_position:
            drafted = len(window.accept_rate_by_position)
            return replace(config, num_steps=drafted, eagle_topk=1, num_draft_tokens=drafted + 1)
    return config


def _user_prefills_after_decodes(records: Sequence[StatsRecord]) -> int:
    """Prefills of user traffic after the last decode of ``records`` (all, without one)."""
    count = 0
    for record in reversed(records):
        if record.kind == "decode":
            break
        if not _is_probe(record):
            count += 1
    return count


def _is_probe(record: StatsRecord) -> bool:
    """Health checks and warm-up prefill one token; they are not user traffic."""
    return record.new_tokens is not None and record.new_tokens <= 1
