"""``python -m exporter.demo.pictures OUT``: pictures of the shipped dashboards, from a real run.

No Grafana runs here, so the pictures are drawn the way Grafana would draw the panels: the
demo's stack (simulated SGLang server, ``specwatch run``, a real Prometheus with the shipped
rules) plays its scenario, then every time-series and stat panel of each dashboard in
``dashboards/`` has its own queries run over that span through Prometheus' range API, with
Grafana's variables expanded as Grafana expands them, and charted with matplotlib under the
panel's title. What is drawn is what the dashboards' queries return; only the styling is not
Grafana's. ``make dashboard-pictures`` regenerates them (needs Prometheus, a few minutes).
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from exporter.demo.stack import Demo
from exporter.mixin.dashboards.queries import expand

DASHBOARDS = {"specwatch-node": "node", "specwatch-fleet": "fleet"}
CHARTED = ("timeseries", "stat")
# The recovery scenario collapses, restarts with a good drafter and recovers in about two
# minutes; the pictures show all of it.
PLAY_SECONDS = 150.0
STEP_SECONDS = 2
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def query_range(prometheus: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    """The matrix Prometheus returns for ``expr``; an error is no series (said on stderr)."""
    params = urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": STEP_SECONDS}
    )
    try:
        with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{params}", timeout=30) as r:
            result: list[dict[str, Any]] = json.load(r)["data"]["result"]
            return result
    except (OSError, ValueError, KeyError) as exc:
        print(f"query failed ({exc}): {expr[:120]}", file=sys.stderr)
        return []


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format filled in."""
    text = _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template or "")
    return text or ", ".join(f"{k}={v}" for k, v in labels.items() if k != "__name__")


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board.get("panels", []) if p.get("type") in CHARTED and p.get("targets")]


def draw(board: dict[str, Any], prometheus: str, start: float, end: float, out: Path) -> None:
    """One picture of every charted panel of ``board``, in the dashboard's order."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    charted = panels(board)
    columns = 3
    rows = math.ceil(len(charted) / columns)
    figure = Figure(figsize=(4.2 * columns, 2.3 * rows), dpi=72, layout="constrained")
    figure.suptitle(f"{board['title']}: the demo's collapse and recovery (UTC)", fontsize=11)
    for index, panel in enumerate(charted):
        axes = figure.add_subplot(rows, columns, index + 1)
        axes.set_title(panel["title"], fontsize=9)
        drawn = 0
        for target in panel["targets"]:
            expr = expand(target["expr"], "1m")
            for series in query_range(prometheus, expr, start, end):
                drawn += 1
                times = [
                    datetime.fromtimestamp(float(t), tz=timezone.utc) for t, _ in series["values"]
                ]
                values = [float(v) for _, v in series["values"]]
                x: Any = times
                axes.plot(
                    x,
                    values,
                    linewidth=1,
                    label=legend(target.get("legendFormat", ""), series["metric"]),
                )
        span: Any = (_utc(start), _utc(end))
        axes.set_xlim(*span)
        # Whole seconds over a short run: "%H:%M" alone repeats a minute under every tick.
        form = "%H:%M:%S" if end - start <= 15 * 60 else "%H:%M"
        axes.xaxis.set_major_formatter(DateFormatter(form, tz=timezone.utc))
        axes.xaxis.set_major_locator(MaxNLocator(4))
        axes.tick_params(labelsize=7)
        axes.grid(True, alpha=0.3)
        handles = axes.get_legend_handles_labels()[0]
        if handles and len(handles) <= 4:
            axes.legend(fontsize=6, loc="best", frameon=False)
        if not drawn:  # as Grafana says it: the query returned no series over the span
            axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
    figure.savefig(out, format="png")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m exporter.demo.pictures OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    boards = {name: json.loads(Path(f"dashboards/{name}.json").read_text()) for name in DASHBOARDS}
    with tempfile.TemporaryDirectory(prefix="specwatch-pictures-") as workdir:
        demo = Demo(Path(workdir), "recovery")
        try:
            if not demo.start() or demo.prometheus_url is None:
                print("the demo's stack did not start with Prometheus", file=sys.stderr)
                return 1
            start = time.time()
            time.sleep(PLAY_SECONDS)
            end = time.time()
            for name, short in DASHBOARDS.items():
                path = out / f"{short}.png"
                draw(boards[name], demo.prometheus_url, start, end, path)
                print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
        finally:
            demo.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
