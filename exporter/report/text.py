"""The terminal summary: the headline first, then the evidence behind it."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from datetime import datetime, timezone

from exporter.analysis.breakeven import count_of
from exporter.analysis.ranks import RankAccept
from exporter.engines.server_config import ServerConfig
from exporter.report.summary import BandStats, Report, RunSummary, ratio

WIDTH = 100


def render_text(report: Report) -> str:
    """Plain text (no colour) so the output can be pasted into an issue or a chat."""
    sections = [
        [report.headline],
        _overview(report),
        _accept(report),
        _requests(report),
        _bands(report),
        _runs(report),
        _conclusions(report),
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines) + "\n"


def _overview(report: Report) -> list[str]:
    names = ("standard input" if name == "-" else name for name in report.files)
    lines = [f"Log: {', '.join(names)}"]
    span = report.span_seconds
    if span is not None:
        lines.append(
            f"Time span: {_when(report.first_time)} to {_when(report.last_time)} "
            f"({_duration(span)})"
        )
    lines.append(
        f"Lines: {report.lines:,}; decode windows: {report.decode_windows:,}; "
        f"prefill batches: {report.prefill_windows:,}"
    )
    if report.unrecognized_lines or report.skipped_lines:
        skipped = ", ".join(f"{n:,} {reason}" for reason, n in sorted(report.skipped_lines.items()))
        lines.append(
            f"Unrecognised stats lines: {report.unrecognized_lines:,}"
            + (f"; skipped lines: {skipped}" if skipped else "")
        )
    config = report.config
    if config.algorithm or config.num_draft_tokens:
        lines.append(
            f"Speculation: {config.algorithm or 'unknown algorithm'}, "
            + (
                count_of(config.num_draft_tokens, config.engine)
                if config.num_draft_tokens
                else "? draft tokens"
            )
            + _draft(config)
            + (
                f"; adaptive speculation, {config.active_steps} steps at the end of the log"
                f"{' (drafting off)' if config.active_steps == 0 else ''}"
                if config.adaptive and config.active_steps is not None
                else ""
            )
        )
    if report.dp_ranks > 1:
        lines.append(
            f"Data-parallel ranks: {report.dp_ranks} (the lines of one moment are summed into "
            "node throughput and running requests)"
        )
    if report.latest_start is not None:
        lines.append(
            f"Server starts: {report.server_starts}; the headline, verdicts, findings and "
            f"draft-token advice describe the last run, from {_when(report.latest_start)}"
        )
    if report.baseline:
        lines.append(f"Baseline: {report.baseline}")
    return lines


def _accept(report: Report) -> list[str]:
    accept = report.accept
    lines = []
    if accept is not None:
        lines.append(
            f"Accept length: min {accept.minimum:.2f}, median {accept.median:.2f}, "
            f"p90 {accept.p90:.2f} over {accept.windows:,} windows"
        )
        lines.append(
            f"Collapsed windows (accept length <= {report.collapsed_accept_length:g}): "
            f"{accept.collapsed_share:.0%}"
        )
    if report.newest is not None and len(report.newest.ranks) > 1:
        lines.append("Accept length by DP rank (newest run):")
        lines += [_rank_line(rank, report.collapsed_accept_length) for rank in report.newest.ranks]
    if report.cuda_graph_share is not None:
        graph = "Graph" if report.graph_device is None else f"{report.graph_device.upper()} graph"
        lines.append(f"{graph} used in {report.cuda_graph_share:.0%} of decode windows")
    return lines


def _requests(report: Report) -> list[str]:
    """Where the finished requests' own accept lengths fall: what the windows average hides."""
    if report.requests is None:
        return []
    line = report.requests.distribution_line()
    return _wrapped(line[0].upper() + line[1:], "")


def _rank_line(rank: RankAccept, collapsed: float) -> str:
    state = "  collapsed" if rank.accept_length <= collapsed else ""
    windows = f"{rank.windows:,} windows"
    return f"  DP rank {rank.dp_rank:>3}: {rank.accept_length:.2f} over {windows}{state}"


def _draft(config: ServerConfig) -> str:
    """The draft by its name (the model path's last two parts, a hub id), its architecture
    beside it: "draft LlamaForCausalLMEagle3" names a kind, not the model that was served."""
    name = (
        "/".join(config.draft_model_path.rstrip("/").split("/")[-2:])
        if config.draft_model_path
        else None
    )
    kind = config.draft_architecture
    if name and kind:
        return f", draft {name} ({kind})"
    return f", draft {name or kind}" if name or kind else ""


def _bands(report: Report) -> list[str]:
    if not report.bands:
        return []
    with_baseline = report.baseline is not None
    header = f"{'running':>9} {'windows':>9} {'tok/s':>9}"
    header += f" {'baseline':>9} {'speedup':>8}" if with_baseline else ""
    together = f", the {len(report.runs)} runs together" if len(report.runs) > 1 else ""
    title = f"Node throughput by concurrency band (running requests on the node{together}):"
    lines = [title, header]
    lines += [_band_row(band, with_baseline) for band in report.bands]
    return lines


def _band_row(band: BandStats, with_baseline: bool) -> str:
    row = f"{band.label:>9} {band.windows:>9,} {band.mean_throughput:>9,.0f}"
    if with_baseline and band.mean_baseline is not None and band.speedup is not None:
        row += f" {band.mean_baseline:>9,.0f} {ratio(band.speedup):>8}"
    return row


def _runs(report: Report) -> list[str]:
    """One line per server run, when there were several: a collapse is not averaged away."""
    if len(report.runs) < 2:
        return []
    lines = [f"Server runs ({len(report.runs)}):"]
    lines += _wrapped_all(run_line(run, report.engines_differ) for run in report.runs)
    return lines


def run_line(run: RunSummary, with_engine: bool = False) -> str:
    """One server run in a line: its span and setup (what a restart changed, its engine too
    when ``with_engine``), accept length, speed and what was judged."""
    setup = run.setup(with_engine)
    span = f"{_when(run.first_time or run.started_at)} to {_when(run.last_time)} ({setup})"
    if run.accept_length is None and not run.drafting_off:
        return f"{span}: no decode windows"
    if run.judgement is not None and run.judgement.mixed:
        return f"{span}: {run.judgement.head}"  # its figures are two servers' mix
    text = span
    if run.accept_length is not None:
        text += f": accept length {run.accept_length:.2f}"
    if run.drafting_off:
        text += f"{',' if run.accept_length is not None else ':'} {run.off_note}"
    if run.throughput is not None:
        text += f", {run.throughput:,.0f} tok/s at {run.running} running"
    if run.speedup is not None:
        text += f", {ratio(run.speedup)}"
    judged = "; ".join([*(v.summary for v in run.verdicts), *filter(None, [run.ended])])
    judged = judged or "nothing wrong"
    return f"{text}: {judged}"


def _wrapped_all(texts: Iterable[str]) -> list[str]:
    return [line for text in texts for line in _wrapped(text, "- ")]


def _conclusions(report: Report) -> list[str]:
    lines: list[str] = []
    for conclusion in report.conclusions():
        lines += _wrapped(conclusion, "- ")
    if report.findings:
        lines.append("Findings:")
        for finding in report.findings:
            lines += _wrapped(f"{finding.summary}. {finding.seen}", f"  [{finding.severity}] ")
            lines += _wrapped(f"Fix: {finding.fix}", " " * 4)
    elif report.decode_windows:
        lines.append("Findings: none")
    return lines


def _wrapped(text: str, lead: str) -> list[str]:
    return textwrap.wrap(
        text, WIDTH, initial_indent=lead, subsequent_indent=" " * len(lead), break_long_words=False
    )


def _when(at: float | None) -> str:
    if at is None:
        return "?"
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
