"""One pass over a log's records, folded into a :class:`~exporter.report.summary.Report`.

Everything here is bounded in memory whatever the log size: accept lengths are logged with two
decimals, so an exact histogram keyed by hundredths gives exact quantiles; concurrency bands
keep sums; the chart series is downsampled; findings see a uniform sample of windows; at most
``MAX_RUNS`` server runs are kept.

Throughput is judged per node, as the daemon does: the lines the DP ranks log for one moment
are summed (``analysis.node``) before a baseline, a band or a chart sees them.
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import reduce
from itertools import chain, compress, groupby
from operator import add, attrgetter

from exporter.analysis.algorithms import config_standard
from exporter.analysis.baseline import Baseline
from exporter.analysis.breakeven import Assessment, advise, advise_measured
from exporter.analysis.findings import DecodeSample, Observations, evaluate
from exporter.analysis.findings.draft_tokens import position_profile
from exporter.analysis.judge import (
    MIN_DRAFTS,
    Case,
    Judgement,
    SpeedBaseline,
    judge,
    method_of,
)
from exporter.analysis.load_bands import band_of
from exporter.analysis.node import Moment, NodeMoments
from exporter.analysis.plain_speed import (
    MIN_BAND_WINDOWS,
    PlainSpeed,
    drafting_off_baseline,
)
from exporter.analysis.schedule import advise_bands, schedule_text
from exporter.analysis.thresholds import DEFAULT, MIN_WINDOWS, Thresholds
from exporter.analysis.verdicts import implausible
from exporter.engines import ending
from exporter.engines.batch import (
    ACCEPT_LENGTH,
    CUDA_GRAPH,
    DP_RANK,
    DRAFT_COUNTS,
    ENGINE,
    EXTRA,
    GEN_THROUGHPUT,
    PP_RANK,
    QUEUED,
    RUNNING,
    TIME,
    KindColumns,
    StatsBatch,
)
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
from exporter.report.bands import BANDS, BandAccumulator, band_index, quantile
from exporter.report.run import Run
from exporter.report.series import Downsampler
from exporter.report.summary import AcceptStats, BandStats, Report, RequestSummary, RunSummary
from exporter.state.requests import NO_REQUESTS, RequestStats
from exporter.state.runs import RunTracker
from exporter.state.streams import StreamWatch

SERIES_FIELDS = ("accept_length", "gen_throughput", "baseline", "running", "queued")
MAX_RUNS = 100  # a crash-looping server restarts thousands of times; the newest runs tell
ACCEPT_VALUES = 4096  # distinct accept lengths counted as logged before they are binned


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
        self.configured = baseline
        # Node moments with drafting off, by load band: a baseline where none is configured.
        self._drafting_off = PlainSpeed()
        self._learned: Baseline | None = None
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
        self._bands = [BandAccumulator() for _ in BANDS]
        self._overall = BandAccumulator()
        self._dp_ranks: set[int] = set()  # of decode windows
        self._series = Downsampler(SERIES_FIELDS)
        self._runs = RunTracker()
        # The servers writing the log, told apart: two at once are judged as neither.
        self._streams = StreamWatch()
        self._run = Run()
        self._done: deque[RunSummary] = deque(maxlen=MAX_RUNS)
        self._node = NodeMoments()
        self._held: list[StatsRecord] = []  # records not folded yet: see ``_fold_held``
        self._batch: StatsBatch | None = None  # a chunk reader's batch, held alone
        self._engine: str | None = None  # of the newest stats line
        # Finished requests, timed by their logged time: "recent" is the log's last minutes.
        self._requests = RequestStats()
        self._request_at = 0.0
        self._held_requests: list[RequestRecord] = []  # not folded yet, as ``_held``

    # RecordSink -------------------------------------------------------------------------
    def on_lines(self, count: int) -> None:
        self._fold_held()
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self._hold_batch()
        self._held.append(record)

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        if not records:
            return
        if isinstance(records, StatsBatch) and not self._held and self._batch is None:
            self._batch = records  # folded from its columns, if nothing else is held with it
            return
        self._hold_batch()
        self._held.extend(records)

    def _hold_batch(self) -> None:
        """The batch held, as records: another call of records follows it."""
        if self._batch is not None:
            self._held.extend(self._batch)
            self._batch = None

    def on_unrecognized(self, reason: str) -> None:
        self._fold_held()
        self.unrecognized += 1
        self._run.add_unrecognized()

    def on_skipped(self, reason: str) -> None:
        self._fold_held()
        self.skipped[reason] += 1

    def on_event(self, line: LogLine) -> None:
        self._fold_held()
        self._streams.observe(line)
        config = self._runs.config  # the closing run's, before a new start replaces it
        if self._runs.observe(line):
            self._close_run(config)
            self._run = Run(logged_seconds(line.time))
            self._series.restart(self._run.started_at)
        end = ending.parse(line.message, line.time)
        if end is not None:
            self._run.evidence.add_ending(end)

    def on_request(self, record: RequestRecord) -> None:
        self._held_requests.append(record)

    # Folding ------------------------------------------------------------------------------
    def _fold_held(self) -> None:
        """Fold the records held since the last call of another kind, all at once."""
        if self._batch is not None:
            batch, self._batch = self._batch, None
            self._fold_batch(batch)
        if self._held:
            held, self._held = self._held, []
            self._fold(held)
        if self._held_requests:
            self._fold_requests()

    def _fold_requests(self) -> None:
        """Finished requests, timed by their logged time (or the previous one's): the
        requests of one logged second in one call, as one call each would count them."""
        held, self._held_requests = self._held_requests, []
        for time, same_time in groupby(held, _TIME):
            self._request_at = logged_seconds(time) or self._request_at
            self._requests.add(list(same_time), self._request_at)

    def _fold(self, records: list[StatsRecord]) -> None:
        """Fold records of one run in a few passes over them, most in C, to the same result
        as one by one: a call per record and field cost more than the folding itself."""
        records = list(self._runs.stamped(records))
        self._streams.add(records)
        self._engine = records[-1].engine
        self._run.hold(records)
        seconds = self._place(list(map(_TIME, records)))
        decodes = [record for record in records if record.kind == "decode"]
        self.prefill_windows += len(records) - len(decodes)
        if decodes:
            self._add_decodes(decodes, list(map(seconds.__getitem__, map(_TIME, decodes))))

    def _fold_batch(self, batch: StatsBatch) -> None:
        """:meth:`_fold` of a chunk reader's batch, from its columns: no record is built but
        the few the evidence, the streams' watch and the findings' sample keep. Where its
        decode lines are not a DP-attention node's plain ones (each names its DP rank and no
        pipeline stage, and keeps no extras or counts), or speculation is adaptive (each
        window is stamped with its steps), it is folded as records."""
        decodes = batch.decodes
        if self._runs.stamped(batch) is not batch or not _plain_ranks(decodes):
            self._fold(list(batch))
            return
        self._streams.add(batch)
        self._engine = batch[-1].engine
        self._run.hold(batch)
        seconds = self._place_batch(batch)
        self.prefill_windows += batch.prefills.rows
        if decodes.rows:
            self._add_decode_columns(decodes, list(map(seconds.__getitem__, decodes.column(TIME))))

    def _place(self, times: Sequence[str | None]) -> dict[str | None, float | None]:
        """Seconds of each time the records logged (``times``, in line order), read once per
        distinct text (the lines of a second share it), and kept as the log's and the run's
        first and last time seen."""
        seconds = {time: logged_seconds(time) for time in dict.fromkeys(times)}
        first = next((at for at in seconds.values() if at is not None), None)
        if first is not None:
            last = next(at for at in map(seconds.__getitem__, reversed(times)) if at is not None)
            self._seen(first, last)
        return seconds

    def _place_batch(self, batch: StatsBatch) -> dict[str | None, float | None]:
        """:meth:`_place` of a batch's lines, from each kind's column of times: in line
        order only where the first or last line's time does not read."""
        kinds = (batch.decodes.column(TIME), batch.prefills.column(TIME))
        seconds = {time: logged_seconds(time) for time in dict.fromkeys(chain(*kinds))}
        first, last = seconds[batch.value(TIME, 0)], seconds[batch.value(TIME, -1)]
        if first is None or last is None:
            return self._place(batch.column(TIME))
        self._seen(first, last)
        return seconds

    def _seen(self, first: float, last: float) -> None:
        """The first and last time of a read, into the log's and the run's."""
        if self.first_time is None:
            self.first_time = first
        self.last_time = last
        run = self._run
        if run.first_time is None:
            run.first_time = first
        run.last_time = last

    def _add_decodes(self, decodes: list[StatsRecord], ats: list[float | None]) -> None:
        self.decode_windows += len(decodes)
        run = self._run
        run.add_windows(decodes)
        # Most windows carry no extras: those that do are picked out in C, once.
        extras = list(compress(decodes, map(_EXTRA, decodes)))
        off = drafting_off_count(extras)
        run.drafting_off += off
        if not run.old_spec_form:
            run.old_spec_form = any(OLD_SPEC_FORM in r.extra for r in extras)
        if off:
            accepts = [
                value
                for record in decodes
                if (value := record.accept_length) is not None and not drafting_off(record)
            ]
        else:
            accepts = list(map(_ACCEPT_LENGTH, decodes))
            if None in accepts:
                accepts = [value for value in accepts if value is not None]
        run.stretches.add_records(decodes, ats, self._runs.config.decode_log_interval)
        ranks = set(map(_DP_RANK, decodes))
        if accepts:
            self._fold_accepts(accepts)
            if not ranks <= {None}:
                run.ranks.add(decodes)
        graphed = [r for r in extras if r.cuda_graph is not None]
        devices = (r.extra.get("graph_device", "cuda") for r in graphed)
        self._count_graphs(list(map(_CUDA_GRAPH, decodes)), devices, len(graphed))
        self._dp_ranks |= ranks - {None}
        self._add_moments(self._node.add(decodes, ats))

    def _add_decode_columns(self, decodes: KindColumns, ats: list[float | None]) -> None:
        """:meth:`_add_decodes` of a batch's decode rows, from their columns: rows that each
        name a DP rank and no pipeline stage, and keep no extras or counts (``_plain_ranks``)."""
        self.decode_windows += decodes.rows
        run = self._run
        run.add_windows(decodes)
        lengths = accepts = decodes.column(ACCEPT_LENGTH)
        if None in accepts:
            accepts = [value for value in accepts if value is not None]
        running = decodes.column(RUNNING)
        engine = decodes.constants[ENGINE]
        interval = self._runs.config.decode_log_interval
        run.stretches.add_columns(ats, lengths, running, engine, interval)
        dp = decodes.column(DP_RANK)
        ranks = set(dp)
        if accepts:
            self._fold_accepts(accepts)
            run.ranks.add_lengths(dp, lengths)
        self._count_graphs(decodes.column(CUDA_GRAPH), (), 0)
        self._dp_ranks |= ranks
        tputs, queued = decodes.column(GEN_THROUGHPUT), decodes.column(QUEUED)
        self._add_moments(self._node.add_columns(dp, ats, tputs, running, queued, lengths))

    def _fold_accepts(self, accepts: Sequence[float]) -> None:
        """Decode windows' accept lengths, in order, into the histogram and the run's mean."""
        run = self._run
        self._accept_values.update(accepts)
        if len(self._accept_values) > ACCEPT_VALUES:
            self._bin_accept_lengths()
        # One by one, in order: a float sum depends on the order (``sum`` may not keep it).
        run.accept_sum = reduce(add, accepts, run.accept_sum)
        run.accept_count += len(accepts)

    def _count_graphs(
        self, graphs: Sequence[bool | None], devices: Iterable[str], graphed: int
    ) -> None:
        """Decode windows' CUDA-graph flags, and the devices named by the ``graphed`` of them
        that keep extras; a window that names none ran on CUDA."""
        self._graph_on += graphs.count(True)
        self._graph_off += graphs.count(False)
        self._graph_devices.update(devices)
        if len(graphs) - graphs.count(None) > graphed:
            self._graph_devices.add("cuda")

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
            self._add_moments([moment])

    def _add_moments(self, moments: list[Moment]) -> None:
        """Node-wide windows, in order: into the bands, the run's load and the chart series."""
        run, bands, overall, series = self._run, self._bands, self._overall, self._series
        run_bands, stretches = run.bands, run.stretches
        baseline = self.baseline
        for moment in moments:
            at, accept_length, running, tput, queued, steps, pipelined = moment
            # A pipeline stage's running requests are one micro-batch's: no baseline fits them.
            run.pipelined = run.pipelined or pipelined
            curve = None if pipelined else baseline
            if steps == 0 and not pipelined:
                self._learn(running, tput)
                baseline = self.baseline
                if self.configured is None:
                    curve = None  # what drafting-off windows taught is not judged by itself
            base = curve.at(running) if curve and running and curve.covers(running) else None
            if running and tput is not None:
                index = band_index(running)
                overall.add(running, tput, base)
                bands[index].add(running, tput, base)
                run_bands[index].add(running, tput, base)
                run_bands[index].add_drafting(moment, base)
            stretches.add_moment(at, running, tput, None if pipelined else base, steps == 0)
            if at is not None:
                series.add(at, (accept_length, tput, base, running, queued))

    @property
    def baseline(self) -> Baseline | None:
        """The configured baseline, else the one learned so far from drafting-off windows,
        as the daemon learns it (``state.speed``): windows before it was learned are not
        judged, each after it at the loads it covers."""
        return self.configured or self._learned

    def _learn(self, running: int | None, tput: float | None) -> None:
        """Fold a drafting-off moment; the curve is drawn again when a band reaches the
        windows it needs, then every 64 moments (a busy log has hundreds of thousands)."""
        if self.configured is not None or not running or tput is None:
            return
        speed = self._drafting_off
        speed.add(running, tput)
        band = speed.bands[band_of(running)].windows
        if band == MIN_BAND_WINDOWS or (band > MIN_BAND_WINDOWS and band % 64 == 0):
            self._learned = drafting_off_baseline(speed)

    def _close_run(self, config: ServerConfig) -> Judgement | None:
        """The run so far is over (a restart, or the end of the log); judge it by the
        standard of its own algorithm. Its judgement, or None for a run of no line."""
        self._flush_node()
        run = self._run
        if not run.stats_lines and run.started_at is None:
            return None
        figures = run.figures(self.baseline is not None, self.baseline_option)
        # A run whose start line was not read takes its engine from its stats lines.
        config = replace(config, engine=config.engine or self._engine)
        judgement = judge(self.case(run, config))
        self._done.append(run.summary(figures, judgement, config))
        return judgement

    def case(self, run: Run, config: ServerConfig) -> Case:
        """What the judge judges of ``run``: its stretches, under its own configuration."""
        baseline = None
        if self.baseline is not None:
            baseline = SpeedBaseline(self.baseline.kind, self.baseline_option)
        return Case(
            interleaved=self.interleaved,
            stretches=run.stretches.items(),
            method=method_of(config, "log"),
            expected_accept_length=self.expected_accept_length,
            thresholds=self.thresholds,
            baseline=baseline,
            pipelined=run.pipelined or config.pipelined,
            probes=config.probes,
        )

    # Results --------------------------------------------------------------------------------
    @property
    def interleaved(self) -> bool:
        """Whether two servers write the log now (``state.streams``)."""
        return self._streams.interleaving() is not None

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
            interleaving=self._streams.interleaving(),
        )

    def request_summary(self) -> RequestSummary | None:
        """The log's finished requests, when it holds any."""
        self._fold_held()
        snap = self._requests.snapshot(self._request_at)
        if not snap.finished:
            return None
        counts = snap.classes.get(None, NO_REQUESTS)
        return RequestSummary(
            snap.finished, counts.count, counts.no_draft, snap.clipped, counts.buckets, snap.recent
        )

    def breakeven(self, config: ServerConfig, judged: Judgement | None) -> Assessment | None:
        """One draft-token count for the newest run, ``judged`` so; none where the judge says
        its windows size no drafts, under adaptive speculation, which runs no one count (its
        steps follow the batch size), nor from too few windows to judge."""
        self._fold_held()
        if judged is None or not judged.sizes_drafts:
            return None
        if config.adaptive or self._run.accept_count < MIN_WINDOWS:
            return None
        if sum(stretch.drafts for stretch in self._run.stretches.items()) < MIN_DRAFTS:
            return None  # too few drafts to judge the drafter: none to size it by either
        rates = position_profile(self.observations(config).windows)
        if rates is not None and config.num_draft_tokens == len(rates) + 1:
            return advise_measured(rates, self.advice_speedup(), config.engine or self._engine)
        engine = config.engine or self._engine
        return advise(
            self._run.accept_length, config.num_draft_tokens, self.advice_speedup(), engine
        )

    def schedule(self, config: ServerConfig, judged: Judgement | None) -> str | None:
        """The newest run's draft steps that pay per concurrency band, in its engine's terms
        (``analysis.schedule``), where the judge says its windows size drafts; chains only."""
        self._fold_held()
        if judged is None or not judged.sizes_drafts or config.eagle_topk not in (None, 1):
            return None
        # No schedule from a speed that is no evidence (a baseline that cannot be right), nor
        # for a drafter that accepts nothing: its fix is the drafter, not its step count.
        figures = self._run.figures(self.baseline is not None, self.baseline_option)
        length = self._run.accept_length
        if implausible(figures) or (
            length is not None and length <= self.thresholds.collapsed_accept_length
        ):
            return None
        bands = zip(BANDS, self._run.bands, strict=True)
        rates = position_profile(self.observations(config).windows)
        drafting = [acc.drafting_figures(band) for band, acc in bands]
        advice = advise_bands(drafting, config.num_steps, rates)
        standard = config_standard(config)
        adaptive = bool(config.adaptive)
        by_load = not self._run.old_spec_form
        return schedule_text(advice, self._engine, standard, config.algorithm, adaptive, by_load)

    def finish(self, files: tuple[str, ...]) -> Report:
        """The report over everything seen; call once, at the end of the log."""
        self._fold_held()
        has_baseline = self.baseline is not None
        config = self.config
        self._flush_node()
        findings = evaluate(self.observations(config))
        newest_bands = _band_results(self._run.bands, has_baseline)
        newest = self._close_run(config)
        breakeven = self.breakeven(config, newest)
        schedule = self.schedule(config, newest)
        bands = _band_results(self._bands, has_baseline)
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
            baseline_source=self.baseline.kind if self.baseline else None,
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
            newest_bands=newest_bands,
        )


def _band_results(accumulators: list[BandAccumulator], has_baseline: bool) -> tuple[BandStats, ...]:
    """The bands that saw windows, in order."""
    return tuple(
        acc.result(label, has_baseline)
        for (label, _, _), acc in zip(BANDS, accumulators, strict=True)
        if acc.windows
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
_EXTRA = attrgetter("extra")
_ACCEPT_LENGTH = attrgetter("accept_length")


def _plain_ranks(decodes: KindColumns) -> bool:
    """Whether a batch's decode rows each name a DP rank and no pipeline stage, and keep no
    extras and no counts of their own: a DP-attention node's, every one speaking for the node
    (``analysis.node``), none with drafting off."""
    if not decodes.rows:
        return True
    plain = decodes.same(EXTRA) and not decodes.constants[EXTRA]
    plain = plain and decodes.same(DRAFT_COUNTS) and decodes.constants[DRAFT_COUNTS] is None
    return (
        plain
        and None not in decodes.column(DP_RANK)
        and decodes.column(PP_RANK).count(None) == decodes.rows
    )


def _one_device(devices: set[str]) -> str | None:
    """The device whose graphs the windows name; CUDA when none says, None for several."""
    if len(devices) > 1:
        return None
    return next(iter(devices), "cuda")


def _accept_stats(hundredths: Mapping[int, int], thresholds: Thresholds) -> AcceptStats | None:
    total = sum(hundredths.values())
    if not total:
        return None
    limit = thresholds.collapsed_accept_length * 100
    collapsed = sum(n for key, n in hundredths.items() if key <= limit)
    return AcceptStats(
        windows=total,
        minimum=min(hundredths) / 100,
        median=quantile(hundredths, 0.5) / 100,
        p90=quantile(hundredths, 0.9) / 100,
        mean=sum(k * n for k, n in hundredths.items()) / total / 100,
        collapsed_share=collapsed / total,
    )


def _share(on: int, off: int) -> float | None:
    return on / (on + off) if on + off else None
