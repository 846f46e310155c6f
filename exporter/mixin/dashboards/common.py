"""Pieces both dashboards share: variables, selectors, thresholds, links and finding texts.

One place builds every label selector, so the lint tests can trust that each query carries the
``job`` and ``instance`` matchers the dashboard-linter rules ask for, and a metric rename is a
one-line change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from exporter.analysis import algorithms
from exporter.analysis.findings import EXPLANATIONS
from exporter.analysis.thresholds import STALE_AFTER
from exporter.mixin_config import MixinConfig

# The mixin config of the rendering in progress: its selector, cluster label, tags, uids and
# runbook address reach every query and link without threading it through each panel.
_CONFIG: ContextVar[MixinConfig] = ContextVar("mixin_config")
_DEFAULT = MixinConfig()
RATE = "$__rate_interval"
# The exporter's default `stale_after`: per-window gauges vanish after this many seconds.
STALE_AFTER_S = int(STALE_AFTER)

# What a dashboard row function returns: a row header or a panel builder of any type.
Item = db.Row | cogbuilder.Builder[dm.Panel]

# The SDK defaults links and annotation toggles to "inControlsMenu" (tucked into a dropdown);
# leaving placement out keeps Grafana's default: shown above the panels, where on-call looks.
ABOVE_PANELS: str = None  # type: ignore[assignment]

# Grafana substitutes the datasource variable; nothing names a concrete datasource uid.
DS = cm.DataSourceRef(type_val="prometheus", uid="${datasource}")

JOB = 'job=~"$job"'
INSTANCE = 'instance=~"$instance"'
TARGET = 'target=~"$target"'
DP_RANK = 'dp_rank=~"$dp_rank"'
FLEET_SCOPE: tuple[str, ...] = (JOB, INSTANCE)
NODE_SCOPE: tuple[str, ...] = (JOB, INSTANCE, TARGET)
# Per-window gauges are the only series the engine may split per data-parallel rank.
WINDOW_SCOPE: tuple[str, ...] = (*NODE_SCOPE, DP_RANK)

UP_DOWN = {"0": ("down", "red"), "1": ("up", "green")}
SEVERITY_COLOR: dict[str, str] = {"critical": "red", "warning": "orange", "info": "blue"}


@contextmanager
def rendering(config: MixinConfig) -> Iterator[MixinConfig]:
    """Build dashboards for ``config`` inside this block."""
    token = _CONFIG.set(config)
    try:
        yield config
    finally:
        _CONFIG.reset(token)


def mixin() -> MixinConfig:
    return _CONFIG.get(_DEFAULT)


def node_uid() -> str:
    return f"{mixin().dashboard_uid_prefix}-node"


def fleet_uid() -> str:
    return f"{mixin().dashboard_uid_prefix}-fleet"


def cluster() -> tuple[str, ...]:
    """The cluster matcher, when the config says several clusters share one Prometheus."""
    config = mixin()
    label = config.cluster_label  # the variable is named after the label
    return (f'{label}=~"${label}"',) if config.multi_cluster else ()


def sel(metric: str, scope: Sequence[str], *extra: str) -> str:
    """``metric`` limited to the user's selector, the dashboard's variables and ``extra``."""
    matchers = ", ".join((*mixin().matchers(), *cluster(), *scope, *extra))
    return f"{metric}{{{matchers}}}"


def rate(metric: str, scope: Sequence[str], *extra: str) -> str:
    """Per-second rate over Grafana's ``$__rate_interval`` (never a fixed window)."""
    return f"rate({sel(metric, scope, *extra)}[{RATE}])"


def histogram_buckets(metric: str, scope: Sequence[str], *by: str) -> str:
    """A heatmap's buckets of the histogram ``metric``: the classic one's ``_bucket`` rates
    summed by ``le`` (and ``by``), or, where Prometheus 3 stores it as a native histogram
    (``convert_classic_histograms_to_nhcb``) and ``_bucket`` is gone, the native one summed
    alike, which Grafana draws as the same cells."""
    classic = ", ".join((*by, "le"))
    native = f"sum by ({', '.join(by)})" if by else "sum"
    return (
        f"sum by ({classic}) ({rate(f'{metric}_bucket', scope)})\n"
        f"or\n{native} ({rate(metric, scope)})"
    )


def query(expr: str, legend: str = "", ref: str = "A") -> pb.Dataquery:
    """A range query on the templated datasource."""
    return pb.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref).datasource(DS)


def table_query(expr: str, ref: str = "A") -> pb.Dataquery:
    """An instant query shaped as a table: one row per series, labels as columns."""
    return query(expr, ref=ref).instant().format(pm.PromQueryFormat.TABLE)


def steps(*pairs: tuple[float | None, str]) -> db.ThresholdsConfig:
    """Absolute thresholds from (value, colour) pairs; the first value is the base (None)."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in pairs])
    )


Steps = tuple[tuple[float | None, str], ...]


def accept_length_steps() -> Steps:
    """Red at or below collapse, orange below the floor of the drafters most nodes run (each
    algorithm has its own floor: the alerts read it from specwatch_accept_length_floor)."""
    t = mixin().thresholds
    floor = algorithms.MOST_COMMON.floor
    return ((None, "red"), (t.collapsed_accept_length, "orange"), (floor, "green"))


def speedup_green(slower: float) -> float:
    """Where a speedup turns green: a tenth above the slower-than-baseline line."""
    return round(slower * 1.1, 3)


def speedup_steps() -> Steps:
    """Red below the slower-than-baseline line, green from a tenth above it."""
    slower = mixin().thresholds.slower_than_baseline_speedup
    return ((None, "red"), (slower, "orange"), (speedup_green(slower), "green"))


def value_text(mapping: dict[str, tuple[str, str]]) -> list[dm.ValueMap]:
    """Value mappings {value: (text, colour)}, e.g. 0/1 flags shown as words."""
    return [
        dm.ValueMap(
            options={
                value: dm.ValueMappingResult(text=text, color=color, index=i)
                for i, (value, (text, color)) in enumerate(mapping.items())
            }
        )
    ]


def finding_explanations() -> list[dm.ValueMap]:
    """Finding codes mapped to their explanation (``analysis.findings.EXPLANATIONS``),
    coloured by nothing (text only)."""
    return [
        dm.ValueMap(
            options={
                code: dm.ValueMappingResult(text=f"{code}: {text}", index=i)
                for i, (code, text) in enumerate(EXPLANATIONS.items())
            }
        )
    ]


def severity_colors() -> list[dm.ValueMap]:
    """Severity words keep their text and get the alerting colour."""
    return value_text({sev: (sev, color) for sev, color in SEVERITY_COLOR.items()})


def explained(expr: str) -> str:
    """Copy the ``code`` label into an ``explanation`` label that a value mapping rewrites."""
    return f'label_replace({expr}, "explanation", "$1", "code", "(.+)")'


def label_variable(name: str, label: str, metric: str, scope: Sequence[str]) -> db.QueryVariable:
    """A multi-select label variable on the templated datasource (dashboard-linter style)."""
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(f"label_values({sel(metric, scope)}, {name})")
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".+")
    )


def datasource_variable() -> db.DatasourceVariable:
    return db.DatasourceVariable("datasource").label("Data source").type("prometheus")


def base_variables() -> list[db.DatasourceVariable | db.QueryVariable]:
    """Data source, (cluster,) job and instance: what every specwatch dashboard starts with."""
    config = mixin()
    clusters = (
        [label_variable(config.cluster_label, "Cluster", "specwatch_build_info", ())]
        if config.multi_cluster
        else []
    )
    return [
        datasource_variable(),
        *clusters,
        label_variable("job", "Job", "specwatch_build_info", ()),
        label_variable("instance", "Instance", "specwatch_build_info", (JOB,)),
    ]


def runbook(*alerts: str) -> list[db.DashboardLink]:
    """Panel links to the runbook sections of the alerts a panel explains."""
    return [
        db.DashboardLink(f"Runbook: {alert}")
        .type(dm.DashboardLinkType.LINK)
        .url(mixin().runbook_url(alert))
        .target_blank(True)
        .placement(ABOVE_PANELS)
        for alert in alerts
    ]


def dashboard_url(uid: str) -> str:
    return f"/d/{uid}/{uid}"


def dashboard(title: str, uid: str, description: str) -> db.Dashboard:
    """A read-only dashboard with the shared links, refresh and built-in annotations."""
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(mixin().dashboard_tags)
        .readonly()
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .annotation(
            db.AnnotationQuery()
            .name("Annotations & Alerts")
            .built_in(1)
            .datasource(cm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
            .placement(ABOVE_PANELS)
        )
        .link(
            db.DashboardLink("specwatch dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags(mixin().dashboard_tags)
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
            .placement(ABOVE_PANELS)
        )
        .link(
            db.DashboardLink("Runbook")
            .type(dm.DashboardLinkType.LINK)
            .url(mixin().runbook_index())
            .icon("doc")
            .tooltip("What each alert and finding means, and what to do")
            .target_blank(True)
            .placement(ABOVE_PANELS)
        )
    )


def assemble(
    board: db.Dashboard,
    variables: Sequence[db.DatasourceVariable | db.QueryVariable],
    rows: Sequence[Sequence[Item]],
) -> db.Dashboard:
    """Add variables, then each row's items in order; the SDK lays out the 24-column grid.

    Panel ids are numbered here because the SDK leaves them all 0, and Grafana keys
    "view panel" links and panel state on a unique id.
    """
    for variable in variables:
        board = board.with_variable(variable)
    items = [item for row in rows for item in row]
    for panel_id, item in enumerate(items, start=1):
        board = (
            board.with_row(item.id(panel_id))
            if isinstance(item, db.Row)
            else board.with_panel(item.id(panel_id))
        )
    return board
