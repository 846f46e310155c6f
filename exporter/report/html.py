"""``report --html``: one self-contained page with charts drawn by matplotlib.

matplotlib is the optional extra ``specwatch[report]``: the exporter itself must stay small on
serving nodes, so it is imported only here, only when a page is asked for. Charts are embedded
as base64 PNG so the page can be mailed or attached to a ticket as a single file.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from exporter.report.summary import COLLAPSED_ACCEPT_LENGTH, Report
from exporter.report.text import render_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes

EXTRA = "specwatch[report]"


class MissingExtra(RuntimeError):
    """matplotlib is not installed; the message says which extra provides it."""


def require_matplotlib() -> Any:
    """matplotlib's ``Figure`` on the Agg backend; :class:`MissingExtra` when not installed."""
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtra(
            f"--html needs matplotlib: install the optional extra with pip install '{EXTRA}'"
        ) from exc
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def render_html(report: Report) -> str:
    """The whole page; raises :class:`MissingExtra` without matplotlib."""
    figure_class = require_matplotlib()
    charts = [(title, _png(figure_class, title, draw, report)) for title, draw in _CHARTS]
    figures = "\n".join(
        f'<figure><h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" '
        f'src="data:image/png;base64,{data}"></figure>'
        for title, data in charts
        if data is not None
    )
    return _PAGE.format(
        title=html.escape(f"specwatch report: {', '.join(report.files)}"),
        headline=html.escape(report.headline),
        figures=figures,
        summary=html.escape(render_text(report)),
    )


def _png(
    figure_class: Any, title: str, draw: Callable[[Axes, Report], bool], report: Report
) -> str | None:
    """Draw one chart; ``None`` when the log holds nothing to plot for it."""
    figure = figure_class(figsize=(10, 3.6), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    if not draw(axes, report):
        return None
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="best")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _time_axis(axes: Axes) -> None:
    """Readable dates on the x axis whatever the span (minutes or weeks)."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))


def _series(report: Report, name: str) -> tuple[list[datetime], list[float]]:
    times, values = [], []
    for point in report.series:
        value = point.values.get(name)
        if value is not None:
            times.append(datetime.fromtimestamp(point.time, tz=timezone.utc))
            values.append(value)
    return times, values


def _over_time(
    axes: Axes, report: Report, ylabel: str, lines: tuple[tuple[str, str, str, str], ...]
) -> bool:
    """Plot ``(series, label, color, linestyle)`` lines against time; ``False`` (nothing
    drawn) when the first, main series is empty, since the others only make sense next to it."""
    for index, (name, label, color, linestyle) in enumerate(lines):
        times, values = _series(report, name)
        if not values and index == 0:
            return False
        if values:
            # matplotlib's stubs type x as numbers only; its date units convert datetimes.
            x: Any = times
            axes.plot(x, values, label=label, color=color, linestyle=linestyle)
    axes.set_ylabel(ylabel)
    _time_axis(axes)
    axes.set_ylim(bottom=0)
    return True


def _accept_length(axes: Axes, report: Report) -> bool:
    line = (("accept_length", "accept length", "tab:blue", "-"),)
    if not _over_time(axes, report, "tokens per verify round", line):
        return False
    axes.axhline(COLLAPSED_ACCEPT_LENGTH, color="tab:red", linestyle=":", label="collapsed")
    if report.expected_accept_length is not None:
        axes.axhline(
            report.expected_accept_length, color="tab:green", linestyle="--", label="expected"
        )
    return True


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
    return _over_time(axes, report, "requests", lines)


def _bands(axes: Axes, report: Report) -> bool:
    bands = report.bands
    if not bands:
        return False
    positions = range(len(bands))
    axes.bar(
        [p - 0.2 for p in positions],
        [b.mean_throughput for b in bands],
        0.4,
        label="with speculation",
    )
    if report.baseline is not None:
        baseline = [b.mean_baseline or 0.0 for b in bands]
        axes.bar([p + 0.2 for p in positions], baseline, 0.4, color="tab:gray", label="baseline")
    axes.set_xticks(list(positions), [f"{b.label} running" for b in bands])
    axes.set_ylabel("mean generated tok/s")
    return True


_CHARTS: tuple[tuple[str, Callable[[Axes, Report], bool]], ...] = (
    ("Accept length over time", _accept_length),
    ("Throughput vs baseline over time", _throughput),
    ("Throughput vs baseline by concurrency band", _bands),
    ("Running and queued requests over time", _queue),
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
pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; }}
</style>
</head>
<body>
<h1>specwatch report</h1>
<p class="headline">{headline}</p>
{figures}
<h2>Summary</h2>
<pre>{summary}</pre>
</body>
</html>
"""
