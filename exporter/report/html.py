"""``report --html``: one self-contained page with charts drawn by matplotlib.

matplotlib is the optional ``report`` extra (``pip install '.[report]'`` in the checkout):
the exporter itself must stay small on serving nodes, so it is imported only here, only when
a page is asked for. Charts are embedded as base64 PNG so the page can be mailed or attached
to a ticket as a single file.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from exporter.analysis.findings import SEVERITY_ORDER, Finding
from exporter.analysis.request_share import NO_BENEFIT_ACCEPT_LENGTH
from exporter.analysis.verdicts import Verdict
from exporter.report.summary import Report
from exporter.report.text import render_text
from exporter.state.requests import REQUEST_BUCKETS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# specwatch is installed from its checkout (it is not on PyPI, and a name there could be
# anyone's): the extra is named as pip takes it in that folder.
EXTRA = ".[report]"


class MissingExtra(RuntimeError):
    """matplotlib is not installed; the message says which extra provides it."""


def require_matplotlib() -> Any:
    """matplotlib's ``Figure`` on the Agg backend; :class:`MissingExtra` when not installed."""
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtra(
            "--html needs matplotlib, which specwatch's report extra installs: in the "
            f"specwatch checkout, pip install '{EXTRA}' inside its venv, or pipx install "
            f"--force '{EXTRA}'"
        ) from exc
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def render_html(report: Report) -> str:
    """The whole page; raises :class:`MissingExtra` without matplotlib."""
    figures = "\n".join(
        f'<figure><h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" '
        f'src="data:image/png;base64,{_png(figure)}"></figure>'
        for title, figure in charts(report)
    )
    return _PAGE.format(
        title=html.escape(f"specwatch report: {', '.join(report.files)}"),
        headline=html.escape(report.headline),
        judged=_judged(report),
        figures=figures,
        summary=html.escape(render_text(report)),
    )


def _judged(report: Report) -> str:
    """The newest run's verdicts and findings, worst first, each with what to do: what a
    reader opens the page for, so it comes before the charts, coloured by severity."""
    items: list[Verdict | Finding] = [*report.verdicts, *report.findings]
    if not items:
        return '<p class="judged ok">Nothing to fix: no verdict or finding holds.</p>'
    blocks = []
    for item in sorted(items, key=lambda i: SEVERITY_ORDER[i.severity]):
        severity = html.escape(item.severity)
        blocks.append(
            f'<div class="judged {severity}"><p><span class="severity">'
            f"{severity.upper()}</span> {html.escape(item.summary)}</p>"
            f'<p class="fix"><b>Fix:</b> {html.escape(item.fix)}</p>'
            f'<p class="seen">Seen: {html.escape(item.seen)} Why: {html.escape(item.why)}</p>'
            "</div>"
        )
    return "\n".join(blocks)


def charts(report: Report) -> list[tuple[str, Figure]]:
    """``(title, figure)`` of each chart the log has data for; :class:`MissingExtra` without
    matplotlib."""
    figure_class = require_matplotlib()
    drawn = []
    figure = None
    for title, draw in _CHARTS:
        if figure is None:
            figure = figure_class(figsize=(10, 3.6), dpi=100)
            # Fixed margins: the time axes of all charts line up on the page, and the right
            # margin holds the reference lines' labels, off the data.
            figure.subplots_adjust(left=0.09, right=0.87, top=0.88, bottom=0.13)
            axes = figure.add_subplot()
        if not draw(axes, report):
            # A chart without data draws nothing: its blank figure is the next chart's (an
            # axes costs about as much to make as a chart's lines to draw).
            continue
        # The page heads each chart with its title; the legend sits above the plot, never
        # over a line a reader has to follow.
        axes.grid(True, alpha=0.3)
        handles = axes.get_legend_handles_labels()[0]
        if handles:
            axes.legend(
                loc="lower left",
                bbox_to_anchor=(0.0, 1.0),
                ncols=len(handles),
                fontsize="small",
                frameon=False,
            )
        drawn.append((title, figure))
        figure = None
    return drawn


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _time_axis(axes: Axes, span: float) -> None:
    """Every tick a whole clock time in one format, chosen by the ``span`` in seconds: a
    concise formatter's "30, 09:02, 30" (seconds, then a minute, then seconds) reads as three
    different scales on one axis."""
    from matplotlib.dates import AutoDateLocator, DateFormatter

    if span <= 15 * 60:
        form = "%H:%M:%S"
    elif span <= 36 * 3600:
        form = "%H:%M"
    else:
        form = "%b %d %H:%M"
    # At most 8 ticks: past 15 minutes no tick falls between whole minutes.
    locator = AutoDateLocator(minticks=3, maxticks=8)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(DateFormatter(form, tz=timezone.utc))
    axes.set_xlabel("time (UTC)", fontsize="small")


def _date(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _series(report: Report, name: str) -> tuple[list[datetime], list[float]]:
    """One field's points; a NaN where an idle spell or a restart lies between two, so the
    line breaks there instead of pretending the server decoded through it."""
    times: list[datetime] = []
    values: list[float] = []
    broken = False
    for point in report.series:
        broken = broken or point.after_break
        value = point.values.get(name)
        if value is None:
            continue
        if broken and values:
            times.append(_date(point.time))
            values.append(math.nan)
        broken = False
        times.append(_date(point.time))
        values.append(value)
    return times, values


def _alone(values: list[float]) -> list[int]:
    """Indexes of points with no neighbour to draw a line to: they get a marker instead."""
    padded = [math.nan, *values, math.nan]
    return [
        i
        for i, value in enumerate(values)
        if not math.isnan(value) and math.isnan(padded[i]) and math.isnan(padded[i + 2])
    ]


# Marks sit beneath the data lines (zorder 2): running requests at the cap must still show.
_UNDER_DATA = 1.5
# (value, label, colour) of a horizontal line the data is judged against.
Reference = tuple[float, str, str]


def _over_time(
    axes: Axes,
    report: Report,
    ylabel: str,
    lines: tuple[tuple[str, str, str, str], ...],
    references: tuple[Reference, ...] = (),
) -> bool:
    """Plot ``(series, label, color, linestyle)`` lines against time, with restarts and
    ``references`` marked; ``False`` (nothing drawn) when the first, main series is empty,
    since the others only make sense next to it."""
    top = 0.0
    for index, (name, label, color, linestyle) in enumerate(lines):
        times, values = _series(report, name)
        if not values and index == 0:
            return False
        if values:
            # matplotlib's stubs type x as numbers only; its date units convert datetimes.
            x: Any = times
            axes.plot(x, values, label=label, color=color, linestyle=linestyle)
            alone = _alone(values)
            if alone:
                dots: Any = [times[i] for i in alone]
                axes.plot(dots, [values[i] for i in alone], "o", color=color, markersize=3)
            top = max(top, max(v for v in values if not math.isnan(v)))
    axes.set_ylabel(ylabel)
    span = (report.last_time or 0.0) - (report.first_time or 0.0)
    _time_axis(axes, span)
    for at in report.restarts:
        _restart(axes, at)
    for value, label, color in references:
        _reference(axes, value, label, color)
    # Room above the highest line or reference for its label; axhline alone would not widen
    # the limits, so a reference above the data would fall outside the chart.
    axes.set_ylim(0, max([top, *(value for value, _, _ in references)]) * 1.15 or 1.0)
    return True


def _restart(axes: Axes, at: float) -> None:
    from matplotlib.dates import date2num

    x = date2num(_date(at))
    axes.axvline(x, color="tab:purple", linewidth=1.2, zorder=_UNDER_DATA)
    axes.annotate(
        "restart",
        xy=(x, 1.0),
        xycoords=axes.get_xaxis_transform(),
        xytext=(3, -3),
        textcoords="offset points",
        ha="left",
        va="top",
        fontsize="small",
        color="tab:purple",
    )


def _reference(axes: Axes, value: float, label: str, color: str) -> None:
    """A threshold line, labelled at its height in the right margin, off the data."""
    axes.axhline(value, color=color, linestyle=":", linewidth=1.5, zorder=_UNDER_DATA)
    axes.annotate(
        label,
        xy=(1.0, value),
        xycoords=axes.get_yaxis_transform(),
        xytext=(4, 0),
        textcoords="offset points",
        ha="left",
        va="center",
        fontsize="small",
        color=color,
        annotation_clip=False,
    )


def _accept_length(axes: Axes, report: Report) -> bool:
    line = (("accept_length", "accept length", "tab:blue", "-"),)
    collapsed = report.collapsed_accept_length
    references = [(collapsed, f"collapsed\n{collapsed:.2f}", "tab:red")]
    if report.expected_accept_length is not None:
        expected = report.expected_accept_length
        references.append((expected, f"expected\n{expected:.2f}", "tab:green"))
    return _over_time(axes, report, "tokens per verify round", line, tuple(references))


def _throughput(axes: Axes, report: Report) -> bool:
    lines = (
        ("gen_throughput", "with speculation", "tab:blue", "-"),
        ("baseline", "baseline (same load)", "tab:gray", "--"),
    )
    return _over_time(axes, report, "generated tok/s", lines)


def _queue(axes: Axes, report: Report) -> bool:
    lines = (
        ("running", "running", "tab:blue", "-"),
        ("queued", "queued", "tab:orange", "-"),
    )
    # The series sums the DP ranks of a moment (the node); the cap is each scheduler's.
    cap = report.config.max_running_requests
    ranks = max(report.dp_ranks, 1)
    label = f"max running\n{cap}" if ranks == 1 else f"max running\n{cap} x {ranks} ranks"
    references = () if cap is None else ((float(cap * ranks), label, "tab:red"),)
    return _over_time(axes, report, "requests", lines, references)


def _bands(axes: Axes, report: Report) -> bool:
    """The newest run's throughput per band: two runs pooled (a healthy one and a collapsed
    one) would show a speed neither had."""
    several = len(report.runs) > 1
    bands = report.newest_bands if several else report.bands
    if not bands:
        return False
    positions = range(len(bands))
    axes.bar(
        [p - 0.2 for p in positions],
        [b.mean_throughput for b in bands],
        0.4,
        label="with speculation, newest run" if several else "with speculation",
    )
    if report.baseline is not None:
        baseline = [b.mean_baseline or 0.0 for b in bands]
        axes.bar([p + 0.2 for p in positions], baseline, 0.4, color="tab:gray", label="baseline")
    axes.set_xticks(list(positions), [f"{b.label} running" for b in bands])
    axes.set_ylabel("mean generated tok/s")
    return True


def _requests(axes: Axes, report: Report) -> bool:
    """The finished requests by their own accept length: a share at 1.0 that the windows'
    average hides stands out in red beside the rest."""
    requests = report.requests
    if requests is None or not requests.speculative:
        return False
    cumulative = (0, *requests.buckets, requests.speculative)
    counts = [b - a for a, b in itertools.pairwise(cumulative)]
    labels = [
        "1.0",
        *(f"{_bound(low)}-{_bound(high)}" for low, high in itertools.pairwise(REQUEST_BUCKETS)),
        f"> {_bound(REQUEST_BUCKETS[-1])}",
    ]
    shares = [100 * count / requests.speculative for count in counts]
    positions = list(range(len(shares)))
    # Bars up to the no-benefit bound, then the rest: each group one colour and one label.
    low = sum(1 for bound in REQUEST_BUCKETS if bound <= NO_BENEFIT_ACCEPT_LENGTH)
    axes.bar(positions[:low], shares[:low], 0.8, color="tab:red", label="no benefit")
    mean = f", windows averaged {report.accept.mean:.2f}" if report.accept is not None else ""
    label = f"{requests.speculative:,} requests{mean}"
    axes.bar(positions[low:], shares[low:], 0.8, color="tab:blue", label=label)
    axes.set_xticks(positions, labels, fontsize="small")
    axes.set_xlabel("accept length of the request (tokens per verify round)")
    axes.set_ylabel("% of requests")
    return True


def _ranks(axes: Axes, report: Report) -> bool:
    """The newest run's accept length by DP rank, one bar each: a collapsed rank (red) stands
    out where the node's average over time hides it."""
    run = report.newest
    if run is None or len(run.ranks) < 2:
        return False
    limit = report.collapsed_accept_length
    collapsed = [rank for rank in run.ranks if rank.accept_length <= limit]
    healthy = [rank for rank in run.ranks if rank.accept_length > limit]
    for ranks, colour, label in ((healthy, "tab:blue", "DP rank"), (collapsed, "red", "collapsed")):
        if ranks:
            axes.bar(
                [rank.dp_rank for rank in ranks],
                [rank.accept_length for rank in ranks],
                color=colour,
                label=label,
            )
    axes.set_xticks([rank.dp_rank for rank in run.ranks])
    axes.set_xlabel("DP rank")
    axes.set_ylabel("mean accept length")
    return True


def _bound(value: float) -> str:
    """A bucket bound as the text report writes it: ``1.0``, ``1.05``, ``2``."""
    return "1.0" if value == 1.0 else f"{value:g}"


# Each chart's title and its drawing on a blank axes: ``False`` when the log has no data for
# it, and then it has drawn nothing (``charts`` hands the same axes to the next one).
_CHARTS: tuple[tuple[str, Callable[[Axes, Report], bool]], ...] = (
    ("Accept length over time", _accept_length),
    ("Accept length by DP rank", _ranks),
    ("Throughput vs baseline over time", _throughput),
    ("Throughput vs baseline by concurrency band", _bands),
    ("Running and queued requests over time", _queue),
    ("Accept length per finished request", _requests),
)

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1040px; color: #222; }}
.headline {{ font-size: 1.3em; font-weight: 600; }}
figure {{ margin: 1.5em 0; }}
figure img {{ max-width: 100%; }}
h2 {{ font-size: 1.05em; margin: 0 0 0.3em; }}
pre {{ background: #f6f6f6; padding: 1em; white-space: pre-wrap; overflow-wrap: anywhere; }}
.judged {{ border-left: 0.4em solid #888; padding: 0.2em 1em; margin: 0.6em 0; }}
.judged p {{ margin: 0.4em 0; }}
.judged .severity {{ font-weight: 700; }}
.judged .seen {{ font-size: 0.9em; color: #555; }}
.critical {{ border-color: #c62828; background: #fdecea; }}
.critical .severity {{ color: #c62828; }}
.warning {{ border-color: #ef8f00; background: #fff4e0; }}
.warning .severity {{ color: #b36b00; }}
.info {{ border-color: #1565c0; background: #e8f0fb; }}
.info .severity {{ color: #1565c0; }}
.ok {{ border-color: #2e7d32; background: #e8f5e9; }}
</style>
</head>
<body>
<h1>specwatch report</h1>
<p class="headline">{headline}</p>
{judged}
{figures}
<h2>Summary</h2>
<pre>{summary}</pre>
</body>
</html>
"""
