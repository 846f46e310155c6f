"""One pass over a log's records, folded into a :class:`~exporter.report.summary.Report`.

Everything here is bounded in memory whatever the log size: accept lengths are logged with two
decimals, so an exact histogram keyed by hundredths gives exact quantiles; concurrency bands
keep sums; the chart series is downsampled; findings see a uniform sample of windows; at most
``MAX_RUNS`` server runs are kept.

Throughput is judged per node, as the daemon does: the lines the DP ranks log for one moment
are summed (``analysis.node``) before a baseline, a band or a chart sees them.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import reduce
from operator import add, attrgetter

from exporter.analysis.algorithms import config_standard
from exporter.analysis.baseline import Baseline
from exporter.analysis.breakeven import Assessment, advise
from exporter.analysis.findings import DecodeSample, Observations, ending_summary, evaluate
from exporter.analysis.node import Moment, NodeMoments
from exporter.analysis.ranks import RankAccepts
from exporter.analysis.schedule import BandDrafting, advise_bands, schedule_text
from exporter.analysis.thresholds import DEFAULT, Thresholds
from exporter.analysis.verdicts import RunFigures, Verdict, implausible, judge
from exporter.engines import ending
from exporter.engines.record import (
    OLD_SPEC_FORM,
    LogLine,
    RequestRecord,
    StatsRecord,
    drafting_off,
    drafting_off_count,
    logged_seconds,
)
from exporter.engines.server_config import ServerConfig
from exporter.parse.pipeline import RecordSink
from exporter.report.reservoir import Reservoir
from exporter.report.series import Downsampler
from exporter.report.summary import AcceptStats, BandStats, Report, RequestSummary, RunSummary
from exporter.state.evidence import RECENT_WINDOWS, Evidence
from exporter.state.requests import NO_REQUESTS, RequestStats
from exporter.state.runs import RunTracker

# (label, lowest, highest running requests on the node); the top band is open-ended.
BANDS: tuple[tuple[str, int, int | None], ...] = (
    ("1", 1, 1),
    ("2-7", 2, 7),
    ("8-31", 8, 31),
    ("32-63", 32, 63),
    ("64+", 64, None),
)
SERIES_FIELDS = ("accept_length", "gen_throughput", "baseline", "running", "queued")
FINDINGS_SAMPLE = 2000
EVIDENCE_BATCH = 4096  # records a run holds before handing the evidence those that matter
MAX_RUNS = 100  # a crash-looping server restarts thousands of times; the newest runs tell
ACCEPT_VALUES = 4096  # distinct accept lengths counted as logged before they are binned


class _BandAccumulator:
    __slots__ = (
        "accept_sum",
        "baseline_sum",
        "drafting",
        "off",
        "running",
        "steps",
        "throughput_sum",
        "windows",
    )

    def __init__(self) -> None:
        self.windows = 0
        self.throughput_sum = 0.0
        self.baseline_sum = 0.0
        self.running: dict[int, int] = {}  # windows by running requests (a dict is cheaper)
        # The windows that drafted: count, throughput and baseline sums; their accept length
        # and the draft steps adaptive speculation had in force.
        self.drafting = [0.0, 0.0, 0.0]
        self.accept_sum = 0.0
        self.steps: dict[int, int] = {}
        self.off = 0  # windows adaptive speculation ran with drafting off

    def add(self, running: int, throughput: float, baseline: float | None) -> None:
        self.windows += 1
        self.throughput_sum += throughput
        self.baseline_sum += baseline or 0.0
        self.running[running] = self.running.get(running, 0) + 1

    def add_drafting(self, moment: Moment, baseline: float | None) -> None:
        """The moment's speculation: its accept length, or that drafting was off."""
        if moment.steps == 0:
            self.off += 1
            return
        if moment.accept_length is None or moment.throughput is None:
            return
        self.drafting[0] += 1
        self.drafting[1] += moment.throughput
        self.drafting[2] += baseline or 0.0
        self.accept_sum += moment.accept_length
        if moment.steps is not None:
            self.steps[moment.steps] = self.steps.get(moment.steps, 0) + 1

    def drafting_figures(self, band: tuple[str, int, int | None]) -> BandDrafting:
        count, tput, base = self.drafting
        return BandDrafting(
            band=band,
            windows=int(count),
            off_windows=self.off,
            accept_length=self.accept_sum / count if count else None,
            speedup=tput / base if count and base else None,
            steps=max(self.steps, key=self.steps.__getitem__) if self.steps else None,
        )

    def result(self, label: str, has_baseline: bool) -> BandStats:
        return BandStats(
            label=label,
            windows=self.windows,
            median_running=_quantile(self.running, 0.5),
            mean_throughput=self.throughput_sum / self.windows,
            mean_baseline=self.baseline_sum / self.windows if has_baseline else None,
        )


class _Run:
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
        self.bands = [_BandAccumulator() for _ in BANDS]
        self.ranks = RankAccepts()  # the whole run's, by DP rank
        # Records not yet handed to the evidence: see ``evidence``.
        self.unfed: list[StatsRecord] = []
        self._batched = 0  # records of the batches already handed over
        self._evidence = Evidence(max_windows=RECENT_WINDOWS, node_loads=False)

    @property
    def stats_lines(self) -> int:
        return self._batched + len(self.unfed) + self.unrecognized

    def hold(self, records: list[StatsRecord]) -> None:
        """Keep records for the evidence until a batch of them is worth handing over."""
        unfed = self.unfed
        unfed.extend(records)
        if len(unfed) >= EVIDENCE_BATCH:
            self.feed_evidence()

    def add_windows(self, decodes: list[StatsRecord]) -> None:
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
        start = _recent_start(unfed)
        if not self._batched and start:
            self._add_evidence(unfed[0])
        for record in unfed[start:]:
            self._add_evidence(record)
        self._batched += len(unfed)
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
            throughput=band.mean_throughput if band else None,
            baseline=band.mean_baseline if band else None,
            running=band.median_running if band else None,
            baseline_option=baseline_option,
            drafting_off=self.drafting_off,
        )

    def summary(
        self, figures: RunFigures, verdicts: list[Verdict], config: ServerConfig
    ) -> RunSummary:
        ending = self.evidence.ending
        return RunSummary(
            algorithm=config.algorithm,
            draft_model=config.draft_model_path,
            num_draft_tokens=config.num_draft_tokens,
            started_at=self.started_at,
            first_time=self.first_time,
            last_time=self.last_time,
            decode_windows=self.windows,
            accept_length=figures.accept_length,
            running=figures.running,
            throughput=figures.throughput,
            baseline=figures.baseline,
            speedup=figures.speedup,
            verdicts=tuple(verdicts),
            drafting_off=self.drafting_off,
            ranks=self.ranks.figures(),
            ended=None if ending is None else ending_summary(ending, bool(self.windows)),
        )


class ReportBuilder(RecordSink):
    """A ``RecordSink`` for ``exporter.parse.pipeline.LineProcessor`` that folds a whole log.

    Records are held until the next call of another kind (or a result is asked for) and then
    folded together, so the sink still sees every call in order: a batch of a read costs a
    few passes over it instead of a dozen calls per record, the bulk of a report's folding.

    ``baseline_option`` names where the baseline came from (``--baseline-curve``), so a
    verdict that it looks wrong can say which setting to fix.
    """

    def __init__(
        self,
        baseline: Baseline | None = None,
        expected_accept_length: float | None = None,
        baseline_option: str | None = None,
        thresholds: Thresholds = DEFAULT,
    ) -> None:
        self.baseline = baseline
        self.expected_accept_length = expected_accept_length
        self.baseline_option = baseline_option
        self.thresholds = thresholds
        self.lines = 0
        self.decode_windows = 0
        self.prefill_windows = 0
        self.unrecognized = 0
        self.skipped: Counter[str] = Counter()
        self.first_time: float | None = None
        self.last_time: float | None = None
        # Accept lengths as logged, counted in C, binned into hundredths now and then.
        self._accept_values: Counter[float] = Counter()
        self._accept_hundredths: Counter[int] = Counter()
        self._graph_on = 0  # decode windows that ran a CUDA graph
        self._graph_off = 0
        self._graph_devices: set[str] = set()  # the devices the graph flags name
        self._bands = [_BandAccumulator() for _ in BANDS]
        self._overall = _BandAccumulator()
        self._dp_ranks: set[int] = set()  # of decode windows
        self._series = Downsampler(SERIES_FIELDS)
        self._runs = RunTracker()
        self._run = _Run()
        self._done: deque[RunSummary] = deque(maxlen=MAX_RUNS)
        self._node = NodeMoments()
        self._held: list[StatsRecord] = []
        self._engine: str | None = (
            None  # of the newest stats line  # records not folded yet: see ``on_record``
        )
        # Finished requests, timed by their logged time: "recent" is the log's last minutes.
        self._requests = RequestStats()
        self._request_at = 0.0

    # RecordSink -------------------------------------------------------------------------
    def on_lines(self, count: int) -> None:
        self._fold_held()
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self._held.append(record)

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self._held.extend(records)

    def on_unrecognized(self, reason: str) -> None:
        self._fold_held()
        self.unrecognized += 1
        self._run.add_unrecognized()

    def on_skipped(self, reason: str) -> None:
        self._fold_held()
        self.skipped[reason] += 1

    def on_event(self, line: LogLine) -> None:
        self._fold_held()
        config = self._runs.config  # the closing run's, before a new start replaces it
        if self._runs.observe(line):
            self._close_run(config)
            self._run = _Run(logged_seconds(line.time))
            self._series.restart(self._run.started_at)
        end = ending.parse(line.message, line.time)
        if end is not None:
            self._run.evidence.add_ending(end)

    def on_request(self, record: RequestRecord) -> None:
        self._request_at = logged_seconds(record.time) or self._request_at
        self._requests.add((record,), self._request_at)

    # Folding ------------------------------------------------------------------------------
    def _fold_held(self) -> None:
        """Fold the records held since the last call of another kind, all at once."""
        if self._held:
            held, self._held = self._held, []
            self._fold(held)

    def _fold(self, records: list[StatsRecord]) -> None:
        """Fold records of one run in a few passes over them, most in C, to the same result
        as one by one: a call per record and field cost more than the folding itself."""
        records = list(self._runs.stamped(records))
        self._engine = records[-1].engine
        self._run.hold(records)
        seconds = self._place(records)
        decodes = [record for record in records if record.kind == "decode"]
        self.prefill_windows += len(records) - len(decodes)
        if decodes:
            self._add_decodes(decodes, list(map(seconds.__getitem__, map(_TIME, decodes))))

    def _place(self, records: list[StatsRecord]) -> dict[str | None, float | None]:
        """Seconds of each time the records logged, read once per distinct text (the lines of
        a second share it), and kept as the log's and the run's first and last time seen."""
        seconds = {time: logged_seconds(time) for time in dict.fromkeys(map(_TIME, records))}
        first = next((at for at in seconds.values() if at is not None), None)
        if first is None:
            return seconds
        times = map(_TIME, reversed(records))
        last = next(at for at in map(seconds.__getitem__, times) if at is not None)
        if self.first_time is None:
            self.first_time = first
        self.last_time = last
        run = self._run
        if run.first_time is None:
            run.first_time = first
        run.last_time = last
        return seconds

    def _add_decodes(self, decodes: list[StatsRecord], ats: list[float | None]) -> None:
        self.decode_windows += len(decodes)
        run = self._run
        run.add_windows(decodes)
        off = drafting_off_count(decodes)
        run.drafting_off += off
        if not run.old_spec_form:
            run.old_spec_form = any(OLD_SPEC_FORM in r.extra for r in decodes if r.extra)
        accepts = [
            value
            for record in decodes
            if (value := record.accept_length) is not None and not (off and drafting_off(record))
        ]
        ranks = set(map(_DP_RANK, decodes))
        if accepts:
            self._accept_values.update(accepts)
            if len(self._accept_values) > ACCEPT_VALUES:
                self._bin_accept_lengths()
            # One by one, in order: a float sum depends on the order (``sum`` may not keep it).
            run.accept_sum = reduce(add, accepts, run.accept_sum)
            run.accept_count += len(accepts)
            if not ranks <= {None}:
                run.ranks.add(decodes)
        graphs = list(map(_CUDA_GRAPH, decodes))
        self._graph_on += graphs.count(True)
        self._graph_off += graphs.count(False)
        self._graph_devices.update(
            r.extra.get("graph_device", "cuda") for r in decodes if r.cuda_graph is not None
        )
        self._dp_ranks |= ranks - {None}
        for moment in self._node.add(decodes, ats):
            self._add_moment(moment)

    def _bin_accept_lengths(self) -> Counter[int]:
        """Every accept length counted so far, by hundredths."""
        hundredths = self._accept_hundredths
        for value, count in self._accept_values.items():
            hundredths[round(value * 100)] += count
        self._accept_values.clear()
        return hundredths

    def _flush_node(self) -> None:
        """The DP ranks' open moment belongs to the run that logged it."""
        moment = self._node.flush()
        if moment is not None:
            self._add_moment(moment)

    def _add_moment(self, moment: Moment) -> None:
        """One node-wide window: into the bands, the run's load and the chart series."""
        at, accept_length, running, tput, queued, _ = moment
        base = self.baseline.at(running) if self.baseline and running else None
        if running and tput is not None:
            index = _band_index(running)
            self._overall.add(running, tput, base)
            self._bands[index].add(running, tput, base)
            self._run.bands[index].add(running, tput, base)
            self._run.bands[index].add_drafting(moment, base)
        if at is not None:
            self._series.add(at, (accept_length, tput, base, running, queued))

    def _close_run(self, config: ServerConfig) -> None:
        """The run so far is over (a restart, or the end of the log); judge it by the
        standard of its own algorithm."""
        self._flush_node()
        run = self._run
        if run.stats_lines or run.started_at is not None:
            figures = run.figures(self.baseline is not None, self.baseline_option)
            standard = config_standard(config)
            verdicts = judge(
                figures, self.expected_accept_length, self.thresholds, standard, config.num_steps
            )
            self._done.append(run.summary(figures, verdicts, config))

    # Results --------------------------------------------------------------------------------
    @property
    def config(self) -> ServerConfig:
        """The newest run's configuration, from its startup lines."""
        return self._runs.config

    def advice_speedup(self) -> float | None:
        """The newest run's speedup, unless its baseline is implausible (then no evidence)."""
        self._fold_held()
        figures = self._run.figures(self.baseline is not None, self.baseline_option)
        return None if implausible(figures) else figures.speedup

    def observations(self, config: ServerConfig) -> Observations:
        """What the findings engine judges of the newest run, under ``config``."""
        self._fold_held()
        run = self._run
        return replace(
            run.evidence.observations(config, self.last_time or 0.0),
            windows=tuple(map(DecodeSample.from_record, run.sample.items)),
            stats_lines=run.stats_lines,
            unrecognized_lines=run.unrecognized,
            speedup=self.advice_speedup(),
            accept_length=run.accept_length,
            requests=self._requests.snapshot(self._request_at).recent,
            ranks=run.ranks.figures(),
            thresholds=self.thresholds,
        )

    def request_summary(self) -> RequestSummary | None:
        """The log's finished requests, when it holds any."""
        snap = self._requests.snapshot(self._request_at)
        if not snap.finished:
            return None
        counts = snap.classes.get(None, NO_REQUESTS)
        return RequestSummary(
            snap.finished, counts.count, counts.no_draft, snap.clipped, counts.buckets, snap.recent
        )

    def breakeven(self, config: ServerConfig) -> Assessment | None:
        """One draft-token count for the run; none under adaptive speculation, which runs no
        one count (its steps follow the batch size)."""
        self._fold_held()
        if config.adaptive:
            return None
        return advise(self._run.accept_length, config.num_draft_tokens, self.advice_speedup())

    def schedule(self, config: ServerConfig) -> str | None:
        """The newest run's draft steps that pay per concurrency band, in its engine's terms
        (``analysis.schedule``); chains only."""
        self._fold_held()
        if config.eagle_topk not in (None, 1):
            return None
        bands = zip(BANDS, self._run.bands, strict=True)
        advice = advise_bands([acc.drafting_figures(band) for band, acc in bands], config.num_steps)
        engine = self._engine or "sglang"
        standard = config_standard(config)
        adaptive = bool(config.adaptive)
        by_load = not self._run.old_spec_form
        return schedule_text(advice, engine, standard, config.algorithm, adaptive, by_load)

    def finish(self, files: tuple[str, ...]) -> Report:
        """The report over everything seen; call once, at the end of the log."""
        self._fold_held()
        has_baseline = self.baseline is not None
        config = self.config
        self._flush_node()
        findings = evaluate(self.observations(config))
        breakeven = self.breakeven(config)
        schedule = self.schedule(config)
        self._close_run(config)
        bands = tuple(
            acc.result(label, has_baseline)
            for (label, _, _), acc in zip(BANDS, self._bands, strict=True)
            if acc.windows
        )
        overall = self._overall.result("all", has_baseline) if self._overall.windows else None
        return Report(
            files=files,
            lines=self.lines,
            decode_windows=self.decode_windows,
            prefill_windows=self.prefill_windows,
            stats_lines=self.decode_windows + self.prefill_windows + self.unrecognized,
            unrecognized_lines=self.unrecognized,
            skipped_lines=dict(self.skipped),
            first_time=self.first_time,
            last_time=self.last_time,
            dp_ranks=len(self._dp_ranks),
            accept=_accept_stats(self._bin_accept_lengths(), self.thresholds),
            cuda_graph_share=_share(self._graph_on, self._graph_off),
            graph_device=_one_device(self._graph_devices),
            bands=bands,
            overall=overall,
            baseline=self.baseline.describe() if self.baseline else None,
            expected_accept_length=self.expected_accept_length,
            config=config,
            server_starts=self._runs.starts,
            runs=tuple(self._done),
            breakeven=breakeven,
            schedule=schedule,
            findings=tuple(findings),
            series=tuple(self._series.points()),
            restarts=tuple(self._series.restarts),
            collapsed_accept_length=self.thresholds.collapsed_accept_length,
            requests=self.request_summary(),
            written_at=_written_at(files),
        )


def _written_at(files: tuple[str, ...]) -> float | None:
    """When the newest of the log files was last written (none for standard input)."""
    times: list[float] = []
    for name in files:
        if name == "-":
            continue
        try:
            times.append(os.stat(name).st_mtime)
        except OSError:
            continue
    return max(times, default=None)


_TIME = attrgetter("time")
_CUDA_GRAPH = attrgetter("cuda_graph")
_DP_RANK = attrgetter("dp_rank")


def _one_device(devices: set[str]) -> str | None:
    """The device whose graphs the windows name; CUDA when none says, None for several."""
    if len(devices) > 1:
        return None
    return next(iter(devices), "cuda")


def _recent_start(unfed: list[StatsRecord]) -> int:
    """Where the last ``RECENT_WINDOWS`` decode windows of ``unfed`` begin (0 if fewer)."""
    decodes = 0
    for index in range(len(unfed) - 1, -1, -1):
        if unfed[index].kind == "decode":
            decodes += 1
            if decodes == RECENT_WINDOWS:
                return index
    return 0


def _band_table() -> dict[int, int]:
    """The band index of every running count below the open-ended top band's lowest."""
    return {
        running: index
        for index, (_, low, high) in enumerate(BANDS)
        if high is not None
        for running in range(low, high + 1)
    }


_BAND_OF = _band_table()


def _band_index(running: int) -> int:
    """The band of ``running`` requests: a look-up, as every node moment asks."""
    index = _BAND_OF.get(running)
    if index is not None:
        return index
    if running >= BANDS[-1][1]:
        return len(BANDS) - 1
    raise ValueError(f"no band for {running} running requests")


def _accept_stats(hundredths: Mapping[int, int], thresholds: Thresholds) -> AcceptStats | None:
    total = sum(hundredths.values())
    if not total:
        return None
    limit = thresholds.collapsed_accept_length * 100
    collapsed = sum(n for key, n in hundredths.items() if key <= limit)
    return AcceptStats(
        windows=total,
        minimum=min(hundredths) / 100,
        median=_quantile(hundredths, 0.5) / 100,
        p90=_quantile(hundredths, 0.9) / 100,
        mean=sum(k * n for k, n in hundredths.items()) / total / 100,
        collapsed_share=collapsed / total,
    )


def _quantile(counts: Mapping[int, int], q: float) -> int:
    """Nearest-rank quantile of a histogram: the smallest value with ``q`` of the mass at or
    below it."""
    total = sum(counts.values())
    rank = max(1, math.ceil(q * total - 1e-9))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return max(counts)


def _share(on: int, off: int) -> float | None:
    return on / (on + off) if on + off else None
