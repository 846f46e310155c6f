"""What ``specwatch report`` found in a log: the numbers, and the plain words they add up to.

:class:`Report` is filled in one pass by :class:`~exporter.report.builder.ReportBuilder` and
rendered by :mod:`.text`, :mod:`.html` or as JSON; its wording lives here so all three agree.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from itertools import pairwise
from typing import Any

from exporter.analysis.algorithms import off_cause
from exporter.analysis.breakeven import Assessment, count_of
from exporter.analysis.findings import CRITICAL, DRAFTING_OFF_SLOW, Finding
from exporter.analysis.judge import Judgement
from exporter.analysis.ranks import RankAccept
from exporter.analysis.request_share import NO_BENEFIT_ACCEPT_LENGTH, RecentShare, logged_time
from exporter.analysis.thresholds import MIN_WINDOWS
from exporter.analysis.verdicts import Verdict
from exporter.engines import registry
from exporter.engines.server_config import ServerConfig
from exporter.report.series import Point
from exporter.state.requests import RECENT_SECONDS, REQUEST_BUCKETS


@dataclass(frozen=True, slots=True)
class AcceptStats:
    """Accept length over all decode windows that logged one."""

    windows: int
    minimum: float
    median: float
    p90: float
    mean: float
    collapsed_share: float


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """The finished requests of a log with speculation figures (SGLang ``--log-requests``):
    their accept lengths by bucket (cumulative, as ``REQUEST_BUCKETS``), those with no draft
    accepted, and the share without benefit over the log's last minutes."""

    finished: int
    speculative: int
    no_draft: int
    clipped: int
    buckets: tuple[int, ...]
    recent: RecentShare | None

    def share_upto(self, bound: float) -> float:
        """Share of the speculative requests at or below the bucket bound ``bound``."""
        if not self.speculative:
            return 0.0
        return self.buckets[REQUEST_BUCKETS.index(bound)] / self.speculative

    def distribution_line(self) -> str:
        """One line an on-call reads: where the requests' accept lengths fall."""
        if not self.speculative:
            return f"requests: {self.finished:,} finished, none with speculation figures"
        upto = {bound: self.share_upto(bound) for bound in _LINE_BOUNDS}
        parts = [f"1.0: {upto[1.0]:.0%}"]
        parts += [f"{low}-{high}: {upto[high] - upto[low]:.0%}" for low, high in pairwise(upto)]
        parts.append(f"> {_LINE_BOUNDS[-1]}: {1 - upto[_LINE_BOUNDS[-1]]:.0%}")
        text = (
            f"requests: {self.finished:,} finished, {self.speculative:,} with speculation; "
            f"accept length {', '.join(parts)}; {self.no_draft:,} accepted no draft"
        )
        recent = self.recent
        if recent is not None and recent.requests and recent.first and recent.last:
            text += (
                f"; {recent.share:.0%} at <= {NO_BENEFIT_ACCEPT_LENGTH:g} in the last "
                f"{RECENT_SECONDS / 60:g} min ({recent.requests:,} requests, "
                f"{logged_time(recent.first)} to {logged_time(recent.last)})"
            )
        return text

    def to_json_dict(self) -> dict[str, Any]:
        bounds = [repr(float(bound)) for bound in REQUEST_BUCKETS]
        return {
            "finished": self.finished,
            "speculative": self.speculative,
            "no_draft_accepted": self.no_draft,
            "clipped": self.clipped,
            "accept_length_buckets": dict(zip(bounds, self.buckets, strict=True)),
            "recent": _asdict(self.recent),
        }


# The bounds the distribution line reads: 1.0, no benefit, the low range, the normal range.
_LINE_BOUNDS = (1.0, NO_BENEFIT_ACCEPT_LENGTH, 1.5, 2.5)


@dataclass(frozen=True, slots=True)
class BandStats:
    """Throughput against the baseline for the node windows of one concurrency band."""

    label: str
    windows: int
    median_running: int
    mean_throughput: float
    mean_baseline: float | None
    # Mean throughput of the windows the baseline spoke for, where it spoke for some only (a
    # baseline learned from drafting-off windows judges neither those nor earlier ones).
    judged_throughput: float | None = None

    @property
    def compared_throughput(self) -> float:
        """The throughput the baseline is compared with: of the windows it spoke for."""
        return self.mean_throughput if self.judged_throughput is None else self.judged_throughput

    @property
    def speedup(self) -> float | None:
        """Mean throughput over mean baseline of the same windows (``None`` without baseline)."""
        if not self.mean_baseline:
            return None
        return self.compared_throughput / self.mean_baseline


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One server run (start to restart), judged on its own: span, accept length, speed."""

    started_at: float | None  # its server_args line; None for a log that starts mid-run
    first_time: float | None
    last_time: float | None
    decode_windows: int
    accept_length: float | None  # mean
    running: int | None  # median node running requests at its usual load
    throughput: float | None  # mean node tok/s there
    baseline: float | None
    speedup: float | None
    verdicts: tuple[Verdict, ...]
    ranks: tuple[RankAccept, ...] = ()  # accept length by DP rank, where ranks log their own
    drafting_off: int = 0  # decode windows adaptive speculation ran with drafting off
    # Its speculative setup, from its own startup lines: a restart may change any of them.
    algorithm: str | None = None
    draft_model: str | None = None
    num_draft_tokens: int | None = None
    engine: str | None = None  # the engine whose start line told the setup
    # How it ended (a crash, a traceback), as the crash finding says it; None: it did not.
    ended: str | None = None
    # Logged by pipeline stages (--pp-size): its speed is not compared with a baseline.
    pipelined: bool = False
    # Its state over its newest windows, since when, and its past (``analysis.judge``).
    judgement: Judgement | None = None

    def setup(self, with_engine: bool = False) -> str:
        """``EAGLE3, 4 draft tokens, draft /models/x``: what this run speculated with; with
        the engine's name first (``vLLM EAGLE3, ...``) when runs of several engines are told."""
        engine = registry.BY_NAME.get(self.engine or "") if with_engine else None
        parts = [f"{engine.title} " if engine else ""]
        parts[0] += self.algorithm or "algorithm unknown"
        if self.num_draft_tokens is not None:
            parts.append(count_of(self.num_draft_tokens, self.engine))
        if self.draft_model:
            parts.append(f"draft {self.draft_model}")
        return ", ".join(parts)

    @property
    def off_note(self) -> str:
        """What adaptive speculation did, in the words an on-call reads: empty if nothing."""
        if not self.drafting_off:
            return ""
        return (
            f"speculation off ({off_cause(self.engine)}) in {self.drafting_off} of "
            f"{self.decode_windows} decode windows"
        )

    @property
    def mostly_off(self) -> bool:
        """The judge held its newest windows to the drafting-off tolerance: the node's speed
        now is that of a server not speculating."""
        return self.judgement is not None and self.judgement.held_off

    @property
    def costly_off(self) -> bool:
        """Judged too slow even for a server with drafting off."""
        return DRAFTING_OFF_SLOW in self.codes

    @property
    def codes(self) -> frozenset[str]:
        """Its verdicts, and its end: a run that crashed differs from one that did not."""
        ended = {"ended"} if self.ended else set()
        return frozenset(v.code for v in self.verdicts) | ended

    @property
    def baseline_implausible(self) -> bool:
        return "baseline_implausible" in self.codes

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "started_at": _iso(self.started_at),
            "first_time": _iso(self.first_time),
            "last_time": _iso(self.last_time),
            "decode_windows": self.decode_windows,
            "accept_length": self.accept_length,
            "running": self.running,
            "throughput": self.throughput,
            "baseline": self.baseline,
            "speedup": self.speedup,
            "verdicts": [v.to_json_dict() for v in self.verdicts],
            "drafting_off_windows": self.drafting_off,
            "dp_ranks": [asdict(rank) for rank in self.ranks],
            "algorithm": self.algorithm,
            "draft_model": self.draft_model,
            "num_draft_tokens": self.num_draft_tokens,
            "engine": self.engine,
            "ended": self.ended,
            "verdict": self.judgement.to_json_dict() if self.judgement else None,
        }


def _no_accept_length(run: RunSummary) -> str:
    """Why the run's windows carry no accept length, in the words of the engine that logged
    them; every engine's whose log is read, while that is not known."""
    started = run.started_at is not None
    own = registry.BY_NAME.get(run.engine or "")
    if own is not None:
        return own.no_accept_length(run.algorithm, started)
    return "; ".join(e.no_accept_length(None, False) for e in registry.ENGINES if e.markers)


@dataclass(frozen=True, slots=True)
class Report:
    """The folded result of one ``specwatch report`` run."""

    files: tuple[str, ...]
    lines: int
    decode_windows: int
    prefill_windows: int
    stats_lines: int
    unrecognized_lines: int
    skipped_lines: dict[str, int]
    first_time: float | None
    last_time: float | None
    dp_ranks: int
    accept: AcceptStats | None
    cuda_graph_share: float | None
    bands: tuple[BandStats, ...]  # every run's windows together
    overall: BandStats | None
    baseline: str | None
    expected_accept_length: float | None
    config: ServerConfig
    server_starts: int  # server_args lines: more than one means restarts within the log
    runs: tuple[RunSummary, ...]  # oldest first; the newest MAX_RUNS of the log
    breakeven: Assessment | None  # for the newest run
    findings: tuple[Finding, ...]  # for the newest run
    # At or below: a collapsed window (the alerts' threshold, from --mixin-config or shipped).
    collapsed_accept_length: float
    series: tuple[Point, ...] = field(repr=False)
    restarts: tuple[float, ...] = ()  # server starts after decode windows of an earlier run
    written_at: float | None = None  # when the newest log file was last written (its mtime)
    requests: RequestSummary | None = None  # when the log holds finished-request lines
    # Draft steps that pay per concurrency band, in the engine's terms (newest run).
    schedule: str | None = None
    # The device whose graphs the decode lines name ("cuda", SGLang's "npu", "cpu", "musa");
    # None when the log names more than one.
    graph_device: str | None = "cuda"
    # The newest run's bands alone: runs of one log may differ in setup or health, and a
    # band pooling them (a healthy run and a collapsed one) describes neither.
    newest_bands: tuple[BandStats, ...] = ()

    # Where the baseline came from (analysis.baseline.SOURCES): configured, own_log, drafting_off.
    baseline_source: str | None = None

    @property
    def span_seconds(self) -> float | None:
        if self.first_time is None or self.last_time is None:
            return None
        return self.last_time - self.first_time

    @property
    def newest(self) -> RunSummary | None:
        return self.runs[-1] if self.runs else None

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """The newest run's verdicts: the server as it is now."""
        return self.newest.verdicts if self.newest else ()

    @property
    def judgement(self) -> Judgement | None:
        """The newest run's state now, since when, and its past (``analysis.judge``)."""
        return self.newest.judgement if self.newest else None

    @property
    def latest_start(self) -> float | None:
        """When the newest of several runs started."""
        return self.newest.started_at if self.newest and len(self.runs) > 1 else None

    @property
    def engines_differ(self) -> bool:
        """Whether its runs were served by more than one engine (a node moved to another)."""
        return len({run.engine for run in self.runs if run.engine}) > 1

    @property
    def earlier_runs_differ(self) -> bool:
        """Whether an earlier run was judged otherwise than the newest one."""
        newest = self.newest
        return newest is not None and any(run.codes != newest.codes for run in self.runs[:-1])

    @property
    def critical(self) -> tuple[Verdict | Finding, ...]:
        """The newest run's critical verdicts and findings: what a headline must say first."""
        judged: tuple[Verdict | Finding, ...] = (*self.verdicts, *self.findings)
        return tuple(item for item in judged if item.severity == CRITICAL)

    @property
    def headline(self) -> str:
        """The answer in plain words, about the newest run: a critical state first (a crash,
        a collapse), then whether speculation is faster than none."""
        text = self._speed_headline()
        now = self.judgement
        heads = [f.summary for f in self.findings if f.severity == CRITICAL]
        if now is not None and now.severity == CRITICAL:
            heads.insert(0, now.head)
        if heads:
            text = f"{'; '.join(heads)}. {text}"
        run = self.newest
        if run is not None and run.drafting_off:
            text = text.removesuffix(".")
            text += (
                f"; {run.off_note}: those run as plain decoding, judged by speed, not by "
                "accept length"
            )
        if self.earlier_runs_differ:
            text += f" (newest of {len(self.runs)} server runs; earlier runs differ)"
        if now is not None and now.span is not None:
            text = f"{text.removesuffix('.')}. {now.judged_on()}"
        return text

    @property
    def not_judged(self) -> str | None:
        """Why the newest run's decode windows give no verdict on speculation, when they
        cannot: none carries an accept length, or too few to be the node's state."""
        run = self.newest
        if run is None or not run.decode_windows:
            return None  # an idle server: the headline says so
        if run.judgement is not None and run.judgement.mixed:
            return run.judgement.head
        windows = f"{run.decode_windows} decode window{'' if run.decode_windows == 1 else 's'}"
        if run.accept_length is None and not run.drafting_off:
            return (
                f"{windows} in the newest server run and none with an accept length "
                f"({_no_accept_length(run)})"
            )
        if run.decode_windows >= MIN_WINDOWS:
            return None
        age = self._age(run)
        newest = f", the newest {age} ago" if age else ""
        return f"{windows}{newest}; at least {MIN_WINDOWS} are needed"

    def _age(self, run: RunSummary) -> str | None:
        """How long ago the run's newest line was written: the log's last write, less what
        the log holds after it (by the log's own clock)."""
        if self.written_at is None or run.last_time is None or self.last_time is None:
            return None
        return _duration(max(0.0, time.time() - self.written_at + self.last_time - run.last_time))

    def _speed_headline(self) -> str:
        reason = self.not_judged
        if reason is not None:
            return f"Not judged: {reason}."
        run = self.newest
        now = run.judgement if run is not None else None
        throughput = now.throughput if now is not None else None
        running = now.running if now is not None else None
        if run is None or throughput is None or running is None:
            if self.stats_lines == 0:
                return "No stats lines in the log: nothing could be judged."
            if self.config.prefill_only:
                return (
                    "A prefill server of PD disaggregation: it decodes nothing, so speculation "
                    "is judged from the logs of its decode servers."
                )
            return (
                "No decode windows with running requests in the log (an idle server): accept "
                "length and speed were not judged."
            )
        load = f"{_tok_s(throughput)} tok/s at {running} running"
        if run.pipelined or self.config.pipelined:
            return (
                f"Speculation does {load}: a pipeline stage's line counts the running "
                "requests of one micro-batch and the whole pipeline's throughput, so speed is "
                "not compared with a baseline."
            )
        assert now is not None
        speedup, baseline, accept = now.speedup, now.baseline, now.accept_length
        if speedup is None or baseline is None:
            return (
                f"Speculation does {load}; no baseline was given to compare with "
                "(--baseline-tok-s, --baseline-curve or --baseline-bench)."
            )
        versus = f"{load} vs {_tok_s(baseline)} tok/s baseline"
        if run.baseline_implausible:
            return (
                f"The baseline looks wrong, so speed is not judged: {versus} would be "
                f"{ratio(speedup)}, impossible at accept length {accept or 0:.2f}"
                if speedup > (accept or 0)
                else f"The baseline looks wrong, so speed is not judged: {versus} would be "
                f"{ratio(speedup)}, slower than any speculation"
            )
        if run.mostly_off:
            return f"{_compared_off(speedup, run.costly_off)}, {versus}"
        return f"{_compared(speedup)}, {versus}"

    def conclusions(self) -> list[str]:
        """Plain-language conclusions beyond the headline, most important first."""
        out = [f"{v.severity.upper()}: {v.summary}: {v.seen} {v.fix}" for v in self.verdicts]
        now = self.judgement
        if now is not None:
            out += [f"Not judged: {note}." for note in now.notes]
            out += [f"Earlier in this run: {episode.text()}." for episode in now.past]
        if self.breakeven is not None:
            out.append(f"Draft tokens: {self.breakeven.explanation}")
        if self.schedule is not None:
            out.append(self.schedule)
        return out

    def to_json_dict(self) -> dict[str, Any]:
        """Machine-readable summary (the chart series is left out)."""
        return {
            "files": list(self.files),
            "lines": self.lines,
            "stats_lines": self.stats_lines,
            "decode_windows": self.decode_windows,
            "prefill_windows": self.prefill_windows,
            "unrecognized_lines": self.unrecognized_lines,
            "skipped_lines": self.skipped_lines,
            "first_time": _iso(self.first_time),
            "last_time": _iso(self.last_time),
            "span_seconds": self.span_seconds,
            "dp_ranks": self.dp_ranks,
            "accept_length": _asdict(self.accept),
            "cuda_graph_share": self.cuda_graph_share,
            "graph_device": self.graph_device,
            "bands": [_band_dict(b) for b in self.bands],
            "overall": _band_dict(self.overall) if self.overall else None,
            "headline": self.headline,
            "not_judged": self.not_judged,
            "verdicts": [v.to_json_dict() for v in self.verdicts],
            "verdict": self.judgement.to_json_dict() if self.judgement else None,
            "runs": [run.to_json_dict() for run in self.runs],
            "baseline": self.baseline,
            "baseline_source": self.baseline_source,
            "expected_accept_length": self.expected_accept_length,
            "config": self.config.to_json_dict(),
            "server_starts": self.server_starts,
            "latest_start": _iso(self.latest_start),
            "breakeven": _asdict(self.breakeven),
            "schedule": self.schedule,
            "findings": [f.to_json_dict() for f in self.findings],
            "requests": self.requests.to_json_dict() if self.requests else None,
        }


def _compared(speedup: float) -> str:
    """``speedup`` in plain words: which way, and by how much throughput."""
    change = round(abs(speedup - 1) * 100)
    if change == 0:
        return f"Speculation is as fast as the baseline ({ratio(speedup)})"
    word, amount = ("slower", "less") if speedup < 1 else ("faster", "more")
    return (
        f"Speculation is {word} than the baseline: {change}% {amount} throughput ({ratio(speedup)})"
    )


def _compared_off(speedup: float, costly: bool) -> str:
    """``speedup`` of a run that mostly did not draft: no speculation to be slower or faster,
    only the cost of keeping it ready, tolerated unless ``costly`` (the verdict says so)."""
    change = round((1 - speedup) * 100)
    head = f"With drafting off the node runs {abs(change)}% {'below' if change > 0 else 'above'}"
    if change == 0:
        head = "With drafting off the node runs at"
    text = f"{head} the baseline ({ratio(speedup)})"
    if change <= 0:
        return text
    if costly:
        return f"{text}, far more than keeping speculation ready should cost"
    return f"{text}, within what keeping speculation ready costs"


def _duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3 h 5 min``, ``2 days``: as an on-call says an age."""
    minutes, hours = seconds / 60, seconds / 3600
    if seconds < 120:
        return f"{seconds:.0f} s"
    if minutes < 120:
        return f"{minutes:.0f} min"
    if hours < 48:
        return f"{int(hours)} h {int(minutes % 60)} min"
    return f"{hours / 24:.0f} days"


def ratio(value: float) -> str:
    """``0.38x``, ``1.8x``, ``1.0x``: two significant digits, as people say speedups (``1x``
    beside "1% more throughput" would read as exactly the baseline)."""
    text = f"{value:.2g}"
    return f"{text}.0x" if len(text) == 1 else f"{text}x"


def _tok_s(value: float) -> str:
    return f"{value:,.0f}"


def _iso(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, tz=timezone.utc).replace(tzinfo=None).isoformat()


def _asdict(value: Any) -> dict[str, Any] | None:
    return asdict(value) if value is not None else None


def _band_dict(band: BandStats) -> dict[str, Any]:
    return {**asdict(band), "speedup": band.speedup}
