"""The HTML report's charts as a reader sees them: lines broken where the server did not
decode, restarts marked where they happened, thresholds inside the plot with their labels.

The log is written in SGLang's line formats: a server run at 12 then 40 running requests with
ten idle minutes between, a restart an hour after the first start, then a collapsed drafter.
"""

from __future__ import annotations

import base64
import io
import math
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from PIL import Image

from exporter.analysis.baseline import Baseline
from exporter.analysis.thresholds import DEFAULT
from exporter.cli import main
from exporter.report import build_report
from exporter.report.html import charts
from tests.support.loglines import T0, decode, startup
from tests.support.requests import finish_line
from tests.support.tools import require_tool

# matplotlib (and numpy) only where a test reads a chart: imported at module level, every
# test run's workers paid their import (about a CPU-second each) to collect this file.
if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D

BASELINE_TOK_S = 700.0
EXPECTED_ACCEPT = 3.8  # above every accept length in the log: its line must widen the chart
RESTART = T0.replace(hour=1)  # the second run's server_args line (startup() stamps +0 s)
IDLE_FROM, IDLE_TO = 300, 900  # seconds after T0 with no decode window


def restart_log() -> list[str]:
    first = startup()  # server_args at T0, max running requests 48
    first += [decode(60 + 2 * i, 3.2, 0.8, running=12, tput=900) for i in range(121)]
    first += [decode(900 + 2 * i, 3.0, 0.7, running=40, queued=8, tput=1800) for i in range(100)]
    second = [line.replace("[2026-02-23 00:", "[2026-02-23 01:") for line in startup()]
    second += [decode(3660 + 2 * i, 1.0, 0.0, running=40, tput=500) for i in range(90)]
    return first + second


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    path.write_text("\n".join(restart_log()) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def restart_charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Axes]:
    """The charts of :func:`restart_log`, drawn once for the tests that only look at them."""
    path = tmp_path_factory.mktemp("restart") / "server.log"
    path.write_text("\n".join(restart_log()) + "\n", encoding="utf-8")
    return drawn(path)


def drawn(log: Path) -> dict[str, Axes]:
    """The report's charts of ``log`` by title, with the reference values the CLI would get."""
    report = build_report(
        [str(log)], Baseline.from_tok_s(BASELINE_TOK_S), expected_accept_length=EXPECTED_ACCEPT
    )
    return {title: figure.axes[0] for title, figure in charts(report)}


def x_values(line: Line2D) -> list[float]:
    """A line's x values (matplotlib date numbers on time charts) as plain floats."""
    import numpy as np

    return [float(x) for x in np.asarray(line.get_xdata(orig=False), dtype=float)]


def y_values(line: Line2D) -> list[float]:
    import numpy as np

    return [float(y) for y in np.asarray(line.get_ydata(), dtype=float)]


def data_line(axes: Axes, label: str) -> tuple[list[float], list[float]]:
    """x (matplotlib date numbers) and y of the data line ``label``."""
    (line,) = [line for line in axes.get_lines() if line.get_label() == label]
    return x_values(line), y_values(line)


def seconds(x: float) -> float:
    from matplotlib.dates import num2date

    moment: datetime = num2date(x)
    return (moment - T0.replace(tzinfo=timezone.utc)).total_seconds()


TIME_CHARTS = {
    "Accept length over time": "accept length",
    "Throughput vs baseline over time": "with speculation",
    "Running and queued requests over time": "running",
}


@pytest.mark.parametrize(("title", "label"), TIME_CHARTS.items())
def test_no_line_is_drawn_across_the_idle_spell_or_the_restart(
    restart_charts: dict[str, Axes], title: str, label: str
) -> None:
    xs, ys = data_line(restart_charts[title], label)
    restart = (RESTART - T0).total_seconds()
    joined = [
        (seconds(x0), seconds(x1))
        for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:], strict=False)
        if not (math.isnan(y0) or math.isnan(y1))
    ]
    assert joined, "the runs themselves are drawn as lines"
    for start, end in joined:
        assert not start < IDLE_FROM + 60 < IDLE_TO - 60 < end, (start, end)
        assert not start < restart < end, (start, end)
    # Data on every side of both breaks: the breaks cut the line, they do not hide the runs.
    times = [seconds(x) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
    assert min(times) < IDLE_FROM < IDLE_TO < max(t for t in times if t < restart) < restart
    assert max(times) > restart


@pytest.mark.parametrize("title", TIME_CHARTS)
def test_the_restart_is_marked_at_its_server_args_line(
    restart_charts: dict[str, Axes], title: str
) -> None:
    from matplotlib.dates import date2num

    axes = restart_charts[title]
    restart = float(date2num(RESTART.replace(tzinfo=timezone.utc)))
    verticals = [
        x_values(line)[0]
        for line in axes.get_lines()
        if y_values(line) == [0, 1] and len(set(x_values(line))) == 1
    ]
    # One mark: the first server_args line opens the log, it restarts nothing.
    assert verticals == [pytest.approx(restart)]
    assert "restart" in [text.get_text() for text in axes.texts]


@pytest.mark.parametrize(
    ("title", "value", "label"),
    [
        ("Accept length over time", DEFAULT.collapsed_accept_length, "collapsed"),
        ("Accept length over time", EXPECTED_ACCEPT, "expected"),  # above all accept lengths
        ("Running and queued requests over time", 48, "max running"),  # above 40 running
    ],
)
def test_reference_lines_and_their_labels_are_inside_the_chart(
    restart_charts: dict[str, Axes], title: str, value: float, label: str
) -> None:
    axes = restart_charts[title]
    bottom, top = axes.get_ylim()
    assert bottom <= value < top
    horizontals = [tuple(y_values(line)) for line in axes.get_lines()]
    assert (value, value) in horizontals
    (text,) = [text for text in axes.texts if text.get_text().startswith(label)]
    figure = axes.figure
    figure.canvas.draw()
    box = text.get_window_extent()
    page = figure.bbox
    assert page.x0 <= box.x0 < box.x1 <= page.x1  # not cut off at the image's edge
    plot = axes.get_window_extent()
    assert plot.y0 <= (box.y0 + box.y1) / 2 <= plot.y1  # beside its line, within the plot


# Marks each image with what the browser made of it, for --dump-dom to show.
PROBE = """<script>
window.addEventListener("load", () => {
  for (const img of document.images) {
    const box = img.getBoundingClientRect();
    img.dataset.seen = [img.complete, img.naturalWidth, img.naturalHeight, box.width].join(",");
  }
});
</script>
"""
TAB_BLUE, RESTART_PURPLE, REFERENCE_RED = (31, 119, 180), (148, 103, 189), (214, 39, 40)


def test_the_running_cap_line_is_the_nodes_when_dp_ranks_are_summed(tmp_path: Path) -> None:
    """The series sums the DP ranks of a moment, so the per-rank cap is drawn times the ranks."""
    lines = startup()  # max running requests 48 per rank
    for i in range(60):
        for rank in (0, 1):
            line = decode(60 + 2 * i, 3.0, 0.7, running=40, tput=900)
            lines.append(line.replace(" TP0]", f" DP{rank} TP{rank}]"))
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    axes = drawn(path)["Running and queued requests over time"]
    running = data_line(axes, "running")[1]
    assert max(running) == pytest.approx(80)  # both ranks' 40
    horizontals = [tuple(y_values(line)) for line in axes.get_lines()]
    assert (96.0, 96.0) in horizontals
    labels = [text.get_text() for text in axes.texts]
    assert "max running\n48 x 2 ranks" in labels


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page``, bounded in time; root needs --no-sandbox."""
    command = [
        require_tool("chromium"),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1100,2600",
        "--virtual-time-budget=5000",
        *args,
        page.as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def near(counts: dict[tuple[int, ...], int], colour: tuple[int, int, int]) -> int:
    """Pixels of about ``colour``: thin lines are antialiased into the white around them."""
    return sum(
        n
        for seen, n in counts.items()
        if sum(abs(a - b) for a, b in zip(seen, colour, strict=True)) < 60
    )


@pytest.mark.e2e
def test_the_page_shows_its_charts_in_a_browser(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    flags = ["--baseline-tok-s", str(BASELINE_TOK_S), "--expected-accept-length", "3.8"]
    assert main(["report", str(log), *flags, "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")

    probed = tmp_path / "probed.html"
    probed.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = chromium(probed, tmp_path / "profile-dom", "--dump-dom").stdout
    seen = re.findall(r'<img alt="([^"]+)"[^>]*data-seen="([^"]+)"', dom)
    assert [alt for alt, _ in seen] == [
        "Accept length over time",
        "Throughput vs baseline over time",
        "Throughput vs baseline by concurrency band",
        "Running and queued requests over time",
    ]
    for alt, state in seen:
        complete, width, height, shown = state.split(",")
        assert complete == "true" and int(width) > 0 and int(height) > 0, alt
        assert float(shown) > 500, alt  # laid out across the page, not shrunk to nothing

    shot = tmp_path / "page.png"
    chromium(page, tmp_path / "profile-shot", f"--screenshot={shot}")
    pixels = Image.open(shot).convert("RGB")
    counts: dict[tuple[int, ...], int] = {}
    for n, colour in pixels.getcolors(maxcolors=1 << 20) or []:
        assert isinstance(colour, tuple)  # an RGB image's colours are triples
        counts[colour] = n
    assert len(counts) > 200  # text, axes and lines, not a blank page
    # What a reader looks for: the data lines, the restart mark and a threshold line.
    for colour in (TAB_BLUE, RESTART_PURPLE, REFERENCE_RED):
        assert near(counts, colour) > 100, colour

    # The embedded charts themselves decode as the PNGs they claim to be.
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', text):
        chart = Image.open(io.BytesIO(base64.b64decode(data)))
        assert chart.format == "PNG" and chart.size == (1000, 360)


def test_a_baseline_above_all_throughput_is_inside_the_chart_and_named(log: Path) -> None:
    report = build_report([str(log)], Baseline.from_tok_s(5000))  # the log peaks at 1800 tok/s
    (axes,) = [
        figure.axes[0]
        for title, figure in charts(report)
        if title == "Throughput vs baseline over time"
    ]
    _, ys = data_line(axes, "baseline (same load)")
    assert {y for y in ys if not math.isnan(y)} == {5000.0}
    assert axes.get_ylim()[1] > 5000
    legend = axes.get_legend()
    assert legend is not None
    assert "baseline (same load)" in [text.get_text() for text in legend.get_texts()]
    figure = axes.figure
    figure.canvas.draw()
    box, page = legend.get_window_extent(), figure.bbox
    assert page.x0 <= box.x0 < box.x1 <= page.x1 and page.y0 <= box.y0 < box.y1 <= page.y1


def test_a_lone_window_between_idle_spells_is_drawn_as_a_dot(tmp_path: Path) -> None:
    lines = startup()
    lines += [decode(60 + 2 * i, 3.2, 0.8, running=12) for i in range(10)]
    lines.append(decode(500, 2.0, 0.3, running=1))  # one request, alone between idle spells
    lines += [decode(900 + 2 * i, 3.2, 0.8, running=12) for i in range(10)]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    axes = drawn(log)["Accept length over time"]
    dots = [line for line in axes.get_lines() if line.get_marker() == "o"]
    assert [
        [(seconds(x), y) for x, y in zip(x_values(line), y_values(line), strict=True)]
        for line in dots
    ] == [[(500.0, 2.0)]]


REQUESTS_CHART = "Accept length per finished request"


def test_the_requests_chart_shows_the_share_the_windows_hide(tmp_path: Path) -> None:
    """Windows at 2.4, and 15 of 100 requests at 1.0: their bar stands out in red."""
    lines = startup() + [decode(60 + 2 * i, 2.4, 0.47, running=40, tput=1800) for i in range(30)]
    for i in range(100):
        length = 1.0 + 1 / 40 if i % 20 < 3 else 2.7
        lines.append(finish_line(length, 40, json_format=i % 2 == 0, level=i % 4))
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    axes = drawn(path)[REQUESTS_CHART]

    from matplotlib.patches import Rectangle

    patches = [patch for patch in axes.patches if isinstance(patch, Rectangle)]
    assert len(patches) == len(axes.patches)  # bars only
    bars = {
        tick.get_text(): (patch.get_height(), patch.get_facecolor())
        for tick, patch in zip(axes.get_xticklabels(), patches, strict=True)
    }
    assert bars["1.0-1.05"][0] == pytest.approx(15)
    assert bars["2.5-3"][0] == pytest.approx(85)
    assert bars["1.0-1.05"][1] != bars["2.5-3"][1]
    shown = axes.get_legend()
    assert shown is not None
    legend = [text.get_text() for text in shown.get_texts()]
    assert legend == ["no benefit", "100 requests, windows averaged 2.40"]


def test_a_log_without_request_lines_has_no_requests_chart(restart_charts: dict[str, Axes]) -> None:
    assert REQUESTS_CHART not in restart_charts


def test_the_band_chart_shows_the_newest_run_never_the_runs_pooled(
    restart_charts: dict[str, Axes],
) -> None:
    """The first run made 1,800 tok/s at 40 running, the collapsed second one 500: pooled,
    the band read about 1,200, a speed neither run had."""
    axes = restart_charts["Throughput vs baseline by concurrency band"]
    ticks = [tick.get_text() for tick in axes.get_xticklabels()]
    speculating = axes.containers[0]  # the first bars drawn: throughput with speculation
    heights = [bar.get_height() for bar in speculating]
    assert dict(zip(ticks, heights, strict=True)) == {"32-63 running": pytest.approx(500.0)}
    labels = axes.get_legend_handles_labels()[1]
    assert "with speculation, newest run" in labels


@pytest.mark.parametrize("title", TIME_CHARTS)
def test_every_time_tick_reads_as_a_clock_time_in_one_format(
    restart_charts: dict[str, Axes], title: str
) -> None:
    """Not "30, 09:02, 30": seconds, a minute and seconds again on one axis."""
    axes = restart_charts[title]
    axes.figure.canvas.draw()
    ticks = [tick.get_text() for tick in axes.get_xticklabels() if tick.get_text()]
    assert len(ticks) >= 3
    assert all(re.fullmatch(r"\d\d:\d\d", tick) for tick in ticks), ticks
    assert axes.get_xlabel() == "time (UTC)"


def test_the_page_leads_with_the_verdict_and_its_fix_coloured_by_severity(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(log), "--baseline-tok-s", "700", "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    first_chart = text.index("<figure>")
    critical = text.index('<div class="judged critical">')
    assert critical < first_chart
    assert text.index("<b>Fix:</b>", critical) < first_chart
    assert re.search(r"\.critical \{\{? border-color: #c62828", text)
    # Worst first: no warning or info block comes before a critical one.
    severities = re.findall(r'<div class="judged (\w+)">', text)
    order = {"critical": 0, "warning": 1, "info": 2}
    assert severities == sorted(severities, key=order.__getitem__)


def test_the_setup_line_names_the_draft_not_only_its_kind(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("\n".join(restart_log()) + "\n", encoding="utf-8")
    report = build_report([str(path)], None)
    from exporter.report.text import render_text

    line = next(x for x in render_text(report).splitlines() if x.startswith("Speculation:"))
    draft = report.config.draft_model_path
    assert draft is not None
    assert f"draft {'/'.join(draft.rstrip('/').split('/')[-2:])}" in line
