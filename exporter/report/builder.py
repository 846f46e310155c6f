"""One pass over a log's records, folded into a :class:`~exporter.report.summary.Report`.

Everything here is bounded in memory whatever the log size: accept lengths are logged with two
decimals, so an exact histogram keyed by hundredths gives exact quantiles; concurrency bands
keep sums; the chart series is downsampled; findings see a uniform sample of windows.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

from exporter.analysis.baseline import Baseline
from exporter.analysis.breakeven import Assessment, assess
from exporter.analysis.findings import DecodeSample, Finding, evaluate
from exporter.analysis.thresholds import DEFAULT, Thresholds
from exporter.engines.record import StatsRecord, logged_seconds
from exporter.engines.server_config import ConfigTracker, ServerConfig
from exporter.engines.sglang import LogLine
from exporter.engines.sglang_startup import ServerArgsEvent, parse_event
from exporter.report.series import Downsampler
from exporter.report.summary import AcceptStats, BandStats, Report
from exporter.state.evidence import Evidence

# (label, lowest, highest running requests); the top band is open-ended.
BANDS: tuple[tuple[str, int, int | None], ...] = (
    ("1", 1, 1),
    ("2-7", 2, 7),
    ("8-31", 8, 31),
    ("32-63", 32, 63),
    ("64+", 64, None),
)
SERIES_FIELDS = ("accept_length", "gen_throughput", "baseline", "running", "queued")
FINDINGS_SAMPLE = 2000


class _BandAccumulator:
    __slots__ = ("baseline_sum", "running", "throughput_sum", "windows")

    def __init__(self) -> None:
        self.windows = 0
        self.throughput_sum = 0.0
        self.baseline_sum = 0.0
        self.running: Counter[int] = Counter()

    def add(self, running: int, throughput: float, baseline: float | None) -> None:
        self.windows += 1
        self.throughput_sum += throughput
        self.baseline_sum += baseline or 0.0
        self.running[running] += 1

    def result(self, label: str, has_baseline: bool) -> BandStats:
        return BandStats(
            label=label,
            windows=self.windows,
            median_running=_quantile(self.running, 0.5),
            mean_throughput=self.throughput_sum / self.windows,
            mean_baseline=self.baseline_sum / self.windows if has_baseline else None,
        )


class _LatestRun:
    """What findings and draft-token advice judge: the newest server run in the log.

    A log can hold several runs (a restart with other flags or another draft). The config
    tracker describes only the newest one, so windows of older runs must not be judged
    against it, as ``specwatch doctor`` does not either.
    """

    def __init__(self, started_at: float | None = None) -> None:
        self.started_at = started_at
        self.evidence = Evidence()
        self.sample: list[DecodeSample] = []
        self.windows = 0
        self.stats_lines = 0
        self.unrecognized = 0
        self.accept_sum = 0.0
        self.accept_count = 0
        self.load = _BandAccumulator()
        self._random = random.Random(0)

    def add_record(self, record: StatsRecord, at: float | None) -> None:
        self.stats_lines += 1
        self.evidence.add_record(record, at if at is not None else 0.0)

    def add_unrecognized(self) -> None:
        self.stats_lines += 1
        self.unrecognized += 1
        self.evidence.add_unrecognized()

    def add_decode(self, record: StatsRecord) -> None:
        """Reservoir sampling: every window has the same chance to inform the findings."""
        self.windows += 1
        if record.accept_length is not None:
            self.accept_sum += record.accept_length
            self.accept_count += 1
        if len(self.sample) < FINDINGS_SAMPLE:
            self.sample.append(DecodeSample.from_record(record))
            return
        slot = self._random.randrange(self.windows)
        if slot < FINDINGS_SAMPLE:
            self.sample[slot] = DecodeSample.from_record(record)

    def speedup(self) -> float | None:
        return self.load.result("run", True).speedup if self.load.windows else None

    def breakeven(self, num_draft_tokens: int | None) -> Assessment | None:
        if not self.accept_count or num_draft_tokens is None or num_draft_tokens < 2:
            return None
        return assess(self.accept_sum / self.accept_count, num_draft_tokens, self.speedup())

    def findings(self, config: ServerConfig, now: float) -> list[Finding]:
        """The findings engine over the run: all outcomes counted, windows sampled."""
        obs = replace(
            self.evidence.observations(config, now),
            windows=tuple(self.sample),
            stats_lines=self.stats_lines,
            unrecognized_lines=self.unrecognized,
            speedup=self.speedup(),
        )
        return evaluate(obs)


class ReportBuilder:
    """A ``RecordSink`` for ``exporter.parse.pipeline.LineProcessor`` that folds a whole log."""

    def __init__(
        self,
        baseline: Baseline | None = None,
        expected_accept_length: float | None = None,
        thresholds: Thresholds = DEFAULT,
    ) -> None:
        self.baseline = baseline
        self.expected_accept_length = expected_accept_length
        self.thresholds = thresholds
        self.lines = 0
        self.decode_windows = 0
        self.prefill_windows = 0
        self.unrecognized = 0
        self.skipped: Counter[str] = Counter()
        self.first_time: float | None = None
        self.last_time: float | None = None
        self._accept_hundredths: Counter[int] = Counter()
        self._graph = Counter[bool]()
        self._bands = [_BandAccumulator() for _ in BANDS]
        self._overall = _BandAccumulator()
        self._dp_ranks: set[int] = set()
        self._series = Downsampler(SERIES_FIELDS)
        self._tracker = ConfigTracker()
        self._run = _LatestRun()
        self._server_starts = 0
        self._last_time_text: str | None = None
        self._last_at = 0.0

    # RecordSink -------------------------------------------------------------------------
    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        at = self._place(record.time)
        self._run.add_record(record, at)
        if record.kind == "decode":
            self._add_decode(record, at)
        else:
            self.prefill_windows += 1

    def on_unrecognized(self, reason: str) -> None:
        self.unrecognized += 1
        self._run.add_unrecognized()

    def on_skipped(self, reason: str) -> None:
        self.skipped[reason] += 1

    def on_event(self, line: LogLine) -> None:
        event = parse_event(line.message)
        if isinstance(event, ServerArgsEvent):
            self._server_starts += 1
            self._run = _LatestRun(logged_seconds(line.time))
            self._series.restart(self._run.started_at)
        if event is not None:
            self._tracker.observe(event, rank=(line.dp_rank, line.tp_rank))

    # Folding ------------------------------------------------------------------------------
    def _place(self, time: str | None) -> float | None:
        """Seconds of a record's time, also kept as the log's first and last time seen.

        Prefill and decode lines often share a second, so the last conversion is reused.
        """
        if time is None:
            return None
        if time == self._last_time_text:  # prefill and decode lines often share a second
            at = self._last_at
        else:
            seconds = logged_seconds(time)
            if seconds is None:
                return None
            at = self._last_at = seconds
            self._last_time_text = time
        if self.first_time is None:
            self.first_time = at
        self.last_time = at
        return at

    def _add_decode(self, record: StatsRecord, at: float | None) -> None:
        self.decode_windows += 1
        if record.dp_rank is not None:
            self._dp_ranks.add(record.dp_rank)
        if record.accept_length is not None:
            self._accept_hundredths[round(record.accept_length * 100)] += 1
        if record.cuda_graph is not None:
            self._graph[record.cuda_graph] += 1
        running, tput = record.running_requests, record.gen_throughput
        base = self.baseline.at(running) if self.baseline and running else None
        if running and tput is not None:
            self._overall.add(running, tput, base)
            self._bands[_band_index(running)].add(running, tput, base)
            self._run.load.add(running, tput, base)
        if at is not None:
            values = (record.accept_length, tput, base, running, record.queued_requests)
            self._series.add(at, tuple(None if v is None else float(v) for v in values))
        self._run.add_decode(record)

    def finish(self, files: tuple[str, ...]) -> Report:
        """The report over everything seen so far."""
        has_baseline = self.baseline is not None
        bands = tuple(
            acc.result(label, has_baseline)
            for (label, _, _), acc in zip(BANDS, self._bands, strict=True)
            if acc.windows
        )
        overall = self._overall.result("all", has_baseline) if self._overall.windows else None
        accept = _accept_stats(self._accept_hundredths, self.thresholds.collapsed_accept_length)
        config = self._tracker.config
        return Report(
            files=files,
            lines=self.lines,
            decode_windows=self.decode_windows,
            prefill_windows=self.prefill_windows,
            unrecognized_lines=self.unrecognized,
            skipped_lines=dict(self.skipped),
            first_time=self.first_time,
            last_time=self.last_time,
            dp_ranks=len(self._dp_ranks),
            accept=accept,
            cuda_graph_share=_share(self._graph),
            bands=bands,
            overall=overall,
            dominant=max(bands, key=lambda b: b.windows) if bands else None,
            baseline=self.baseline.describe() if self.baseline else None,
            expected_accept_length=self.expected_accept_length,
            config=config,
            server_starts=self._server_starts,
            latest_start=self._run.started_at if self._server_starts > 1 else None,
            breakeven=self._run.breakeven(config.num_draft_tokens),
            findings=tuple(self._run.findings(config, self.last_time or 0.0)),
            collapsed_accept_length=self.thresholds.collapsed_accept_length,
            series=tuple(self._series.points()),
            restarts=tuple(self._series.restarts),
        )


def _band_index(running: int) -> int:
    for index, (_, low, high) in enumerate(BANDS):
        if running >= low and (high is None or running <= high):
            return index
    raise ValueError(f"no band for {running} running requests")


def _accept_stats(hundredths: Counter[int], collapsed_at: float) -> AcceptStats | None:
    total = sum(hundredths.values())
    if not total:
        return None
    collapsed = sum(n for key, n in hundredths.items() if key <= collapsed_at * 100)
    return AcceptStats(
        windows=total,
        minimum=min(hundredths) / 100,
        median=_quantile(hundredths, 0.5) / 100,
        p90=_quantile(hundredths, 0.9) / 100,
        mean=sum(k * n for k, n in hundredths.items()) / total / 100,
        collapsed_share=collapsed / total,
    )


def _quantile(counts: Counter[int], q: float) -> int:
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


def _share(counts: Counter[bool]) -> float | None:
    total = counts[True] + counts[False]
    return counts[True] / total if total else None
