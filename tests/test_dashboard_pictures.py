"""The pictures of the dashboards in docs/: where a reader looks for them, said for what they
are, small, and drawn from exactly the panels the shipped dashboards have."""

from __future__ import annotations

import json

from PIL import Image

from exporter.demo.pictures import DASHBOARDS, legend, panels
from tests.support.docs import README, doc
from tests.support.tools import REPO

PICTURES = REPO / "docs" / "dashboards"


def test_each_dashboard_has_a_small_picture_the_docs_show_and_explain() -> None:
    metrics = doc("metrics.md")
    total = 0
    for short in DASHBOARDS.values():
        picture = PICTURES / f"{short}.png"
        with Image.open(picture) as image:
            assert image.format == "PNG"
            assert image.width >= 600
        total += picture.stat().st_size
        assert f"](dashboards/{short}.png)" in metrics
    assert total < 400 << 10, "a few hundred KB in all: the repository carries them"
    assert "make dashboard-pictures" in metrics and "real Prometheus" in metrics
    assert "(docs/metrics.md#dashboards)" in README.read_text(encoding="utf-8")


def test_every_time_series_and_stat_panel_is_drawn() -> None:
    for name in DASHBOARDS:
        board = json.loads((REPO / "dashboards" / f"{name}.json").read_text(encoding="utf-8"))
        kinds = {p["type"] for p in board["panels"]}
        charted = panels(board)
        assert {p["type"] for p in charted} == {"timeseries", "stat"} & kinds
        assert len(charted) == sum(p["type"] in ("timeseries", "stat") for p in board["panels"])


def test_legends_are_filled_in_as_grafana_fills_them() -> None:
    labels = {"instance": "node-7:9477", "target": "sglang-0", "code": "x"}
    assert legend("{{instance}} {{ target }}", labels) == "node-7:9477 sglang-0"
    assert legend("", {"__name__": "m", "target": "a"}) == "target=a"
