"""One server run of a report: its windows counted, sampled and judged alone."""

from __future__ import annotations

import random
from collections.abc import Sequence

from exporter.analysis.findings import ending_summary
from exporter.analysis.judge import Judgement, Stretches
from exporter.analysis.ranks import RankAccepts
from exporter.analysis.verdicts import RunFigures
from exporter.engines.batch import StatsBatch
from exporter.engines.record import StatsRecord, logged_seconds
from exporter.engines.server_config import ServerConfig
from exporter.report.bands import BANDS, BandAccumulator
from exporter.report.reservoir import Reservoir
from exporter.report.summary import BandStats, RunSummary
from exporter.state.evidence import RECENT_WINDOWS, Evidence

FINDINGS_SAMPLE = 2000
EVIDENCE_BATCH = 4096  # records a run holds before handing the evidence those that matter


class Run:
    """One server run (from a ``server_args`` line to the next): what it did, judged alone.

    A restart may change the flags or the draft, so windows of one run are never averaged
    with another's, and findings and advice judge the newest run under its own config.
    """

    def __init__(self, started_at: float | None = None) -> None:
        self.started_at = started_at
        self.first_time: float | None = None
        self.last_time: float | None = None
        # Records, not DecodeSamples: most are replaced unseen, so they are converted at the end.
        self.sample = Reservoir[StatsRecord](FINDINGS_SAMPLE, random.Random(0))
        self.windows = 0
        self.unrecognized = 0
        self.accept_sum = 0.0
        self.accept_count = 0
        self.drafting_off = 0  # decode windows adaptive speculation ran with drafting off
        # Its engine logged a form older than any per-batch-size schedule (OLD_SPEC_FORM).
        self.old_spec_form = False
        # Logged by pipeline stages: no baseline fits a micro-batch's running requests.
        self.pipelined = False
        self.bands = [BandAccumulator() for _ in BANDS]
        self.ranks = RankAccepts()  # the whole run's, by DP rank
        self.stretches = Stretches()  # its decode windows by the minute, for the judge
        # Records not yet handed to the evidence: see ``evidence``.
        self.unfed: list[StatsRecord] = []
        self._batched = 0  # records of the batches already handed over
        self._passed = 0  # records held back from ``unfed``: none of them can matter
        self._evidence = Evidence(max_windows=RECENT_WINDOWS, node_loads=False)

    @property
    def stats_lines(self) -> int:
        return self._batched + self._passed + len(self.unfed) + self.unrecognized

    def hold(self, records: Sequence[StatsRecord]) -> None:
        """Keep records for the evidence until a batch of them is worth handing over; of
        ``records``, only those :meth:`feed_evidence` can hand over: the run's first, and
        those from the ``RECENT_WINDOWS``-th decode from their end on. It passes over every
        record before that within the batch, whatever follows, so those are only counted
        (and a chunk reader's batch builds no record for them)."""
        unfed = self.unfed
        start = recent_start(records)
        if start:
            if not (self._batched or self._passed or unfed):  # the run's first record
                unfed.append(records[0])
                self._passed -= 1
            self._passed += start
            unfed.extend(records[start:])
        else:
            unfed.extend(records)
        if len(unfed) + self._passed >= EVIDENCE_BATCH:
            self.feed_evidence()

    def add_windows(self, decodes: Sequence[StatsRecord]) -> None:
        """Count decode windows, and sample those due: every window has the same chance to be
        judged, and the others are not even looked at."""
        before = self.windows
        self.windows += len(decodes)
        sample = self.sample
        while sample.due <= self.windows:
            sample.keep(decodes[sample.due - before - 1])

    def add_unrecognized(self) -> None:
        self.unrecognized += 1
        self._evidence.add_unrecognized()

    @property
    def evidence(self) -> Evidence:
        """The run's evidence, as if it had been handed every record so far."""
        self.feed_evidence()
        return self._evidence

    def feed_evidence(self) -> None:
        """Hand the evidence the unfed records that can still matter, and forget them all.

        Evidence keeps the run's first time, its last ``RECENT_WINDOWS`` decode windows and what
        follows the newest (the silent prefills); a report reads nothing else of it (it counts
        the lines itself and keeps no recent loads). So of each batch only the first record of
        the run and the records from the ``RECENT_WINDOWS``-th decode from the end on can
        change what is read: the others would be pushed out or reset by those.
        """
        unfed = self.unfed
        if not unfed:
            return
        start = recent_start(unfed)
        if not self._batched and start:
            self._add_evidence(unfed[0])
        for record in unfed[start:]:
            self._add_evidence(record)
        self._batched += len(unfed) + self._passed
        self._passed = 0
        unfed.clear()

    def _add_evidence(self, record: StatsRecord) -> None:
        at = logged_seconds(record.time)
        self._evidence.add_record(record, at if at is not None else 0.0)

    @property
    def accept_length(self) -> float | None:
        return self.accept_sum / self.accept_count if self.accept_count else None

    def dominant(self, has_baseline: bool) -> BandStats | None:
        """The band the node spent most windows in: its usual load, which verdicts judge."""
        busiest = max(
            ((label, acc) for (label, _, _), acc in zip(BANDS, self.bands, strict=True)),
            key=lambda item: item[1].windows,
        )
        label, acc = busiest
        return acc.result(label, has_baseline) if acc.windows else None

    def figures(self, has_baseline: bool, baseline_option: str | None) -> RunFigures:
        band = self.dominant(has_baseline)
        return RunFigures(
            windows=self.accept_count,
            accept_length=self.accept_length,
            throughput=band.compared_throughput if band else None,
            baseline=band.mean_baseline if band else None,
            running=band.median_running if band else None,
            baseline_option=baseline_option,
            drafting_off=self.drafting_off,
        )

    def summary(
        self, figures: RunFigures, judgement: Judgement, config: ServerConfig
    ) -> RunSummary:
        ending = self.evidence.ending
        return RunSummary(
            algorithm=config.algorithm,
            draft_model=config.draft_model_path,
            num_draft_tokens=config.num_draft_tokens,
            engine=config.engine,
            started_at=self.started_at,
            first_time=self.first_time,
            last_time=self.last_time,
            decode_windows=self.windows,
            accept_length=figures.accept_length,
            running=figures.running,
            throughput=figures.throughput,
            baseline=figures.baseline,
            speedup=figures.speedup,
            verdicts=judgement.verdicts,
            judgement=judgement,
            drafting_off=self.drafting_off,
            ranks=self.ranks.figures(),
            ended=None if ending is None else ending_summary(ending, bool(self.windows)),
            pipelined=self.pipelined,
        )


def recent_start(records: Sequence[StatsRecord]) -> int:
    """Where the last ``RECENT_WINDOWS`` decode windows of ``records`` begin (0 if fewer);
    a chunk reader's batch finds it by its lines' kinds, with no record built."""
    if isinstance(records, StatsBatch):
        return records.recent_start(RECENT_WINDOWS)
    decodes = 0
    for index in range(len(records) - 1, -1, -1):
        if records[index].kind == "decode":
            decodes += 1
            if decodes == RECENT_WINDOWS:
                return index
    return 0
