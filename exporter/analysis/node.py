"""The node's load at one moment: every data-parallel rank's share summed.

With DP attention each rank logs its own decode line, with its own running requests and its
own share of the throughput. A baseline describes the whole node, so it must be compared with
the sum over ranks at the node's total concurrency; one rank's line against it reads as a
node several times slower than it is. The daemon sums its fresh windows with
:func:`node_totals`; offline readers fold a log with :class:`NodeMoments` the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import NamedTuple

from exporter.analysis.thresholds import STALE_AFTER
from exporter.engines.record import SPEC_STEPS, StatsRecord, drafting_off


class Moment(NamedTuple):
    """Node-wide decode figures of one moment; ``at`` in seconds, when the log says."""

    at: float | None
    accept_length: float | None  # mean over the ranks that logged one
    running: int | None
    throughput: float | None
    queued: int | None
    # Draft steps adaptive speculation had in force (a line of its own: adaptive runs no DP
    # attention); None where not stamped.
    steps: int | None = None
    # Logged by a pipeline stage (SGLang's --pp-size): its ``#running-req`` is one
    # micro-batch's (the running batch is split into one per stage, more with
    # --pp-async-batch-depth) while its throughput is the whole pipeline's, so no baseline at
    # that load says how fast the node is.
    pipelined: bool = False


# What a moment reads of one rank's line, in this order: its time, throughput, running and
# queued requests, accept length (None where drafting was off), whether drafting was off, and
# whether a pipeline stage logged it. Kept per rank instead of the line, a moment's sums are
# taken over columns in C (``zip`` of the ranks' entries), not a loop over the ranks.
Entry = tuple[float | None, float | None, int | None, int | None, float | None, bool, bool]


def _entry(at: float | None, record: StatsRecord) -> Entry:
    off = bool(record.extra) and drafting_off(record)
    return (
        at,
        record.gen_throughput,
        record.running_requests,
        record.queued_requests,
        None if off else record.accept_length,
        off,
        record.pp_rank is not None,
    )


def node_totals(records: Iterable[StatsRecord]) -> tuple[float | None, int | None]:
    """Throughput and running requests summed over ranks; ``None`` where any rank lacks it."""
    moment = _summed([_entry(None, record) for record in records])
    return moment.throughput, moment.running


def _summed(entries: list[Entry], stale_after: float = STALE_AFTER) -> Moment:
    """The moment of the ranks' entries, at the newest time among them, leaving out lines
    older than ``stale_after`` then: sums in the ranks' order, ``None`` where any rank lacks
    one, and the mean accept length over the ranks that logged one (drafting on). Columns
    summed in C: a report takes a moment every few lines of a busy log."""
    if not entries:
        return Moment(None, None, None, None, None)
    ats, tputs, running, queued, lengths, offs, pipes = zip(*entries, strict=True)
    known = ats if None not in ats else [at for at in ats if at is not None]
    now = max(known) if known else None
    if now is not None and now - min(known) > stale_after:
        entries = [
            entry for entry in entries if entry[0] is None or not now - entry[0] > stale_after
        ]
        if not entries:
            return Moment(now, None, None, None, None)
        _, tputs, running, queued, lengths, offs, pipes = zip(*entries, strict=True)
    off = offs.count(True)
    if None in lengths:
        lengths = tuple(length for length in lengths if length is not None)
    return _new_moment(
        (
            now,
            sum(lengths) / len(lengths) if lengths else None,
            None if None in running else sum(running),
            None if None in tputs else sum(tputs, 0.0),
            None if None in queued else sum(queued),
            0 if off == len(entries) else None,
            True in pipes,
        )
    )


# A Moment of all its fields, built in C (``tuple.__new__``), not by its ``__new__`` in Python.
_new_moment = partial(tuple.__new__, Moment)


def _own_moment(at: float | None, record: StatsRecord) -> Moment:
    """The moment of a line that speaks for the whole node alone."""
    steps = record.extra.get(SPEC_STEPS)
    return _new_moment(
        (
            at,
            None if steps == 0 else record.accept_length,
            record.running_requests,
            record.gen_throughput,
            record.queued_requests,
            steps,
            record.pp_rank is not None,
        )
    )


def speaks_for_node(record: StatsRecord) -> bool:
    """Whether a rank's line describes the node (or its DP rank's share of it).

    With every scheduler printing (``--enable-metrics-for-all-schedulers``) TP ranks other
    than 0 repeat their group's figures; only TP0 counts, as in the daemon. With pipeline
    parallelism every stage prints the micro-batches all stages run, the last stage's accepted
    drafts relayed to the others: only the first stage counts, the one on the node that
    serves the API and ``/metrics``.
    """
    return (record.pp_rank or 0) == 0 and (
        record.dp_rank is not None or record.tp_rank in (None, 0)
    )


def all_speak_for_node(records: Sequence[StatsRecord]) -> bool:
    """Whether :func:`speaks_for_node` holds for every one of ``records``, found in two C
    passes: a DP-attention node's lines all name their DP rank and no pipeline stage, and a
    batch of them then costs no call per line."""
    return None not in map(_DP_RANK, records) and not any(map(_PP_RANK, records))


_DP_RANK = attrgetter("dp_rank")
_PP_RANK = attrgetter("pp_rank")


class NodeMoments:
    """Folds one log's decode lines into node moments, as the daemon sees them.

    Lines that repeat another scheduler's figures are left out first (:func:`speaks_for_node`).
    A moment of DP ranks closes when a rank logs again: by then every rank has had its turn.
    It sums each rank's newest line, leaving out ranks silent for more than ``stale_after``
    seconds, as the daemon's fresh windows do. A line without a DP rank is a moment of its
    own.
    """

    def __init__(self, stale_after: float = STALE_AFTER) -> None:
        self._stale_after = stale_after
        self._newest: dict[int, Entry] = {}
        # This round's lines, joining ``_newest`` when it closes: one dict store per line.
        self._round: dict[int, Entry] = {}

    def add(self, records: Iterable[StatsRecord], times: Iterable[float | None]) -> list[Moment]:
        """Take decode lines in order, each with its time in seconds; the moments they made,
        in order. Many lines a call: a call per line cost more than its moment."""
        if type(records) is list and len(records) == 1:  # a live pass's one line
            record = records[0]
            if not speaks_for_node(record):
                return []
            at = next(iter(times))
            if record.dp_rank is None:
                return [_own_moment(at, record)]
            closed = [self._moment()] if record.dp_rank in self._round else []
            self._round[record.dp_rank] = _entry(at, record)
            return closed
        moments: list[Moment] = []
        round_ = self._round
        if isinstance(records, (list, Sequence)) and all_speak_for_node(records):
            for record, at in zip(records, times, strict=False):  # every line has a DP rank
                rank = record.dp_rank
                if rank in round_:
                    moments.append(self._moment())
                round_[rank] = _entry(at, record)
            return moments
        for record, at in zip(records, times, strict=False):  # ``times`` may be ``repeat``
            if not speaks_for_node(record):
                continue
            rank = record.dp_rank
            if rank is not None:
                if rank in round_:
                    moments.append(self._moment())
                round_[rank] = _entry(at, record)
            else:
                moments.append(_own_moment(at, record))
        return moments

    def add_columns(
        self,
        ranks: Sequence[int],
        times: Sequence[float | None],
        throughputs: Sequence[float | None],
        running: Sequence[int | None],
        queued: Sequence[int | None],
        lengths: Sequence[float | None],
    ) -> list[Moment]:
        """:meth:`add` of decode lines given by column, each naming its DP rank and no
        pipeline stage and keeping no extras (a DP-attention node's plain lines, read by
        column): no record is read, an entry per line is built in C."""
        moments: list[Moment] = []
        round_ = self._round
        no = repeat(False)
        entries = zip(times, throughputs, running, queued, lengths, no, no, strict=False)
        for rank, entry in zip(ranks, entries, strict=False):
            if rank in round_:
                moments.append(self._moment())
            round_[rank] = entry
        return moments

    def flush(self) -> Moment | None:
        """The moment still open (at the end of a log or a run), then forget every rank."""
        moment = self._moment() if self._round else None
        self._newest.clear()
        return moment

    def _moment(self) -> Moment:
        """The moment of the round so far, which it closes."""
        newest = self._newest
        newest.update(self._round)
        self._round.clear()
        return _summed(list(newest.values()), self._stale_after)
