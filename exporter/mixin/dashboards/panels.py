"""Panel constructors with the house defaults: datasource, description, unit, thresholds.

Every panel goes through one of these, so no panel can be built without a description or a
unit, and all use the templated datasource.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm

from exporter.mixin.dashboards.common import DS, runbook, steps


def _legend() -> cb.VizLegendOptions:
    return (
        cb.VizLegendOptions()
        .display_mode(cm.LegendDisplayMode.TABLE)
        .placement(cm.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "min", "max"])
    )


def graph(
    title: str,
    description: str,
    unit: str,
    targets: list[pb.Dataquery],
    thresholds: db.ThresholdsConfig,
    *,
    width: int = 12,
    height: int = 8,
    alerts: tuple[str, ...] = (),
) -> timeseries.Panel:
    """A time series with its thresholds drawn as dashed lines (the lines users compare to)."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .links(runbook(*alerts))
        .datasource(DS)
        .unit(unit)
        .thresholds(thresholds)
        .thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED))
        .line_width(1)
        .fill_opacity(10)
        .span_nulls(False)
        .legend(_legend())
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.NONE))
        .height(height)
        .span(width)
    )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def single(
    title: str,
    description: str,
    unit: str,
    target: pb.Dataquery,
    thresholds: db.ThresholdsConfig,
    *,
    width: int = 4,
    height: int = 5,
    alerts: tuple[str, ...] = (),
) -> stat.Panel:
    """A big number of the newest value, coloured by its thresholds."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .links(runbook(*alerts))
        .datasource(DS)
        .with_target(target)
        .unit(unit)
        .thresholds(thresholds)
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.AREA)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .height(height)
        .span(width)
    )


def timeline(
    title: str,
    description: str,
    target: pb.Dataquery,
    mappings: list[dm.ValueMap],
    *,
    width: int = 12,
    height: int = 6,
    alerts: tuple[str, ...] = (),
) -> statetimeline.Panel:
    """A state timeline for 0/1 flags, the words and colours coming from value mappings."""
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .links(runbook(*alerts))
        .datasource(DS)
        .with_target(target)
        .unit("bool_on_off")
        .mappings(mappings)
        .thresholds(steps((None, "text")))
        .show_value(cm.VisibilityMode.AUTO)
        .merge_values(True)
        .line_width(0)
        .fill_opacity(80)
        .height(height)
        .span(width)
    )


def grid(
    title: str,
    description: str,
    unit: str,
    targets: list[pb.Dataquery],
    hidden: list[str],
    *,
    width: int = 12,
    height: int = 8,
    alerts: tuple[str, ...] = (),
) -> table.Panel:
    """A table of instant results, one row per series, without the columns nobody reads.

    Several queries are merged first into one row per shared label set (e.g. per instance),
    then the hidden columns are dropped.
    """
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .links(runbook(*alerts))
        .datasource(DS)
        .unit(unit)
        .thresholds(steps((None, "text")))
        .cell_height(cm.TableCellHeight.SM)
        .show_header(True)
        .height(height)
        .span(width)
    )
    for target in targets:
        panel = panel.with_target(target)
    if len(targets) > 1:
        panel = panel.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
    organize = {"excludeByName": dict.fromkeys(hidden, True), "renameByName": {}}
    return panel.with_transformation(dm.DataTransformerConfig(id_val="organize", options=organize))


def heat(
    title: str, description: str, target: pb.Dataquery, *, width: int = 24, height: int = 9
) -> heatmap.Panel:
    """A heatmap of pre-bucketed histogram rates (buckets come from Prometheus, not Grafana)."""
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(target)
        .unit("short")
        .calculate(False)
        .y_axis(
            heatmap.YAxisConfig().unit("short").axis_label("accept length (bucket upper bound)")
        )
        .cell_values(heatmap.CellValues().unit("cps"))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(hm.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .fill("dark-orange")
            .scale(hm.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
            .reverse(False)
        )
        .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE))
        .show_legend()
        .tooltip(heatmap.HeatmapTooltip().mode(cm.TooltipDisplayMode.SINGLE).y_histogram(True))
        .height(height)
        .span(width)
    )
