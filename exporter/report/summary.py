"""What ``specwatch report`` found in a log: the numbers, and the plain words they add up to.

:class:`Report` is filled in one pass by :class:`~exporter.report.builder.ReportBuilder` and
rendered by :mod:`.text`, :mod:`.html` or as JSON; its wording lives here so all three agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from exporter.analysis.breakeven import Assessment
from exporter.analysis.findings import Finding
from exporter.engines.server_config import ServerConfig
from exporter.report.series import Point


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
class BandStats:
    """Throughput against the baseline for the windows of one concurrency band."""

    label: str
    windows: int
    median_running: int
    mean_throughput: float
    mean_baseline: float | None

    @property
    def speedup(self) -> float | None:
        """Mean throughput over mean baseline of the same windows (``None`` without baseline)."""
        if not self.mean_baseline:
            return None
        return self.mean_throughput / self.mean_baseline


@dataclass(frozen=True, slots=True)
class Report:
    """The folded result of one ``specwatch report`` run."""

    files: tuple[str, ...]
    lines: int
    decode_windows: int
    prefill_windows: int
    unrecognized_lines: int
    skipped_lines: dict[str, int]
    first_time: float | None
    last_time: float | None
    dp_ranks: int
    accept: AcceptStats | None
    cuda_graph_share: float | None
    bands: tuple[BandStats, ...]
    overall: BandStats | None
    dominant: BandStats | None
    baseline: str | None
    expected_accept_length: float | None
    config: ServerConfig
    server_starts: int  # server_args lines: more than one means restarts within the log
    latest_start: float | None  # when the newest of several runs started
    breakeven: Assessment | None  # for the newest run
    findings: tuple[Finding, ...]  # for the newest run
    # At or below: a collapsed window (the alerts' threshold, from --mixin-config or shipped).
    collapsed_accept_length: float
    series: tuple[Point, ...] = field(repr=False)
    restarts: tuple[float, ...] = ()  # server starts after decode windows of an earlier run

    @property
    def span_seconds(self) -> float | None:
        if self.first_time is None or self.last_time is None:
            return None
        return self.last_time - self.first_time

    @property
    def headline(self) -> str:
        """The answer in plain words: is speculation faster than running without it?"""
        band = self.dominant
        if band is None:
            return "No decode stats windows with running requests were found in the log."
        load = f"{_tok_s(band.mean_throughput)} tok/s at {band.median_running} running"
        if band.speedup is None or band.mean_baseline is None:
            return (
                f"Speculation does {load}; no baseline was given to compare with "
                "(--baseline-tok-s, --baseline-curve or --baseline-bench)."
            )
        return f"{_compared(band.speedup)}, {load} vs {_tok_s(band.mean_baseline)} tok/s baseline"

    def verdicts(self) -> list[str]:
        """Plain-language conclusions beyond the headline, most important first."""
        out: list[str] = []
        accept = self.accept
        if accept is not None and accept.median <= self.collapsed_accept_length:
            out.append(
                f"Accept length is collapsed (median {accept.median:.2f}): the target rejects "
                "almost every draft token, so each round costs a draft pass for nothing."
            )
        expected = self.expected_accept_length
        if accept is not None and expected is not None and accept.median < expected:
            out.append(
                f"Accept length median {accept.median:.2f} is below the expected "
                f"{expected:.2f} ({accept.median / expected:.0%} of it)."
            )
        if self.breakeven is not None:
            out.append(f"Draft tokens: {self.breakeven.explanation}")
        return out

    def to_json_dict(self) -> dict[str, Any]:
        """Machine-readable summary (the chart series is left out)."""
        return {
            "files": list(self.files),
            "lines": self.lines,
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
            "bands": [_band_dict(b) for b in self.bands],
            "overall": _band_dict(self.overall) if self.overall else None,
            "headline": self.headline,
            "verdicts": self.verdicts(),
            "baseline": self.baseline,
            "expected_accept_length": self.expected_accept_length,
            "config": self.config.to_json_dict(),
            "server_starts": self.server_starts,
            "latest_start": _iso(self.latest_start),
            "breakeven": _asdict(self.breakeven),
            "findings": [f.to_json_dict() for f in self.findings],
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


def ratio(value: float) -> str:
    """``0.38x``, ``1.8x``: two significant digits, as people say speedups."""
    return f"{value:.2g}x"


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
