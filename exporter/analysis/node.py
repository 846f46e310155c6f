"""The node's load at one moment: every data-parallel rank's share summed.

With DP attention each rank logs its own decode line, with its own running requests and its
own share of the throughput. A baseline describes the whole node, so it must be compared with
the sum over ranks at the node's total concurrency; one rank's line against it reads as a
node several times slower than it is. The daemon sums its fresh windows with
:func:`node_totals`; offline readers fold a log with :class:`NodeMoments` the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from exporter.engines.record import StatsRecord

# As the daemon's default ``stale_after``: a rank silent for longer is no part of the moment.
STALE_AFTER = 60.0


class Moment(NamedTuple):
    """Node-wide decode figures of one moment; ``at`` in seconds, when the log says."""

    at: float | None
    accept_length: float | None  # mean over the ranks that logged one
    running: int | None
    throughput: float | None
    queued: int | None


def node_totals(records: Iterable[StatsRecord]) -> tuple[float | None, int | None]:
    """Throughput and running requests summed over ranks; ``None`` where any rank lacks it."""
    tput: float | None = 0.0
    running: int | None = 0
    count = 0
    for record in records:
        count += 1
        tput = (
            None if tput is None or record.gen_throughput is None else tput + record.gen_throughput
        )
        running = (
            None
            if running is None or record.running_requests is None
            else running + record.running_requests
        )
    return (tput, running) if count else (None, None)


def speaks_for_node(record: StatsRecord) -> bool:
    """Whether a rank's line describes the node (or its DP rank's share of it).

    With every scheduler printing (``--enable-metrics-for-all-schedulers``) TP ranks other
    than 0 repeat their group's figures; only TP0 counts, as in the daemon.
    """
    return record.dp_rank is not None or record.tp_rank in (None, 0)


class NodeMoments:
    """Folds one log's per-rank decode lines into node moments, as the daemon sees them.

    A moment closes when a rank logs again: by then every rank has had its turn. It sums each
    rank's newest line, leaving out ranks silent for more than ``stale_after`` seconds, as
    the daemon's fresh windows do. Lines without a DP rank are moments of their own and never
    reach this class (see the report builder).
    """

    def __init__(self, stale_after: float = STALE_AFTER) -> None:
        self._stale_after = stale_after
        self._newest: dict[int, tuple[float | None, StatsRecord]] = {}
        self._round: set[int] = set()

    def add(self, rank: int, record: StatsRecord, at: float | None) -> Moment | None:
        """Take one rank's line; the moment it closed, if any."""
        closed = None
        if rank in self._round:
            closed = self._moment()
            self._round.clear()
        self._round.add(rank)
        self._newest[rank] = (at, record)
        return closed

    def flush(self) -> Moment | None:
        """The moment still open (at the end of a log or a run), then forget every rank."""
        moment = self._moment() if self._round else None
        self._round.clear()
        self._newest.clear()
        return moment

    def _moment(self) -> Moment:
        times = [at for at, _ in self._newest.values() if at is not None]
        now = max(times) if times else None
        records = [
            record
            for at, record in self._newest.values()
            if now is None or at is None or now - at <= self._stale_after
        ]
        tput, running = node_totals(records)
        queued = [r.queued_requests for r in records]
        total_queued = None if None in queued else sum(q for q in queued if q is not None)
        lengths = [r.accept_length for r in records if r.accept_length is not None]
        accept = sum(lengths) / len(lengths) if lengths else None
        return Moment(now, accept, running, tput, total_queued)
