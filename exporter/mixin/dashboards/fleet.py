"""The fleet dashboard: every watched server at a glance, worst first.

It answers "which nodes should I look at?": the lowest accept lengths and speedups, how many
nodes run slower than without speculation, which findings are active where, the distribution
of per-window accept length over time, and whether every exporter is scraped. Rows of the
tables link to the node dashboard with that target selected.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from exporter.mixin.dashboards.common import (
    FLEET_SCOPE,
    STALE_AFTER_S,
    UP_DOWN,
    Item,
    accept_length_steps,
    assemble,
    base_variables,
    dashboard,
    dashboard_url,
    explained,
    finding_explanations,
    fleet_uid,
    histogram_buckets,
    mixin,
    node_uid,
    query,
    rate,
    sel,
    severity_colors,
    speedup_steps,
    steps,
    table_query,
    value_text,
)
from exporter.mixin.dashboards.panels import graph, grid, heat, single, timeline
from exporter.mixin.rules import NO_BENEFIT_SHARE, REQUESTS

WORST = 10
PER_TARGET = ("job", "instance", "target")
COVERAGE = ("job", "instance")  # one row per exporter
MODEL = "served_model"  # the label of specwatch_target_info naming what a target serves


def per_target_labels() -> str:
    """The labels naming one target, its cluster first when there are several."""
    config = mixin()
    labels = (config.cluster_label, *PER_TARGET) if config.multi_cluster else PER_TARGET
    return ", ".join(labels)


def cluster_by() -> tuple[str, ...]:
    """The cluster label when several clusters share the rules: a fleet view over Thanos or
    Mimir keeps clusters apart, never adds them up."""
    config = mixin()
    return (config.cluster_label,) if config.multi_cluster else ()


def across(op: str, expr: str, *labels: str) -> str:
    """``op`` over the fleet, kept apart per cluster when there are several, and by
    ``labels``."""
    grouping = cluster_by() + labels
    return f"{op} by ({', '.join(grouping)}) ({expr})" if grouping else f"{op}({expr})"


def per_cluster_legend(single: str = "") -> str:
    """A legend naming the cluster of each series, when there are several."""
    config = mixin()
    return f"{{{{{config.cluster_label}}}}}" if config.multi_cluster else single


def model_legend() -> str:
    """A legend naming the served model, and its cluster when there are several."""
    return " ".join(filter(None, (per_cluster_legend(), f"{{{{{MODEL}}}}}")))


def with_model(expr: str) -> str:
    """``expr`` (per target or finer) with each target's served model as a label, taken from
    its info series, so fleet panels can group and show by model."""
    info = sel("specwatch_target_info", FLEET_SCOPE)
    return f"{expr} * on ({per_target_labels()}) group_left ({MODEL}) {info}"


def per_target(metric: str, *keep: str) -> str:
    """One value per target, with its served model (and the ``keep`` labels): DP ranks
    averaged, since the fleet ranks nodes, not ranks."""
    labels = ", ".join((per_target_labels(), MODEL, *keep))
    return f"avg by ({labels}) ({with_model(sel(metric, FLEET_SCOPE))})"


# The rules' speedup: against the node's own baseline, else the fleet's plain peers, with the
# baseline's source as a label.
SPEEDUP = "target:specwatch_speedup:avg5m"


def per_model(metric: str) -> str:
    """One value per served model (per cluster when there are several): its targets averaged."""
    return across("avg", with_model(sel(metric, FLEET_SCOPE)), MODEL)


def node_link() -> str:
    """The node dashboard for one table row, with that row's labels as its variables."""
    fields = [label.strip() for label in per_target_labels().split(",")]
    variables = "".join(f"&var-{label}=${{__data.fields.{label}}}" for label in fields)
    return (
        f"{dashboard_url(node_uid())}?var-datasource=${{datasource}}"
        f"{variables}&${{__url_time_range}}"
    )


def _node_link() -> dm.DynamicConfigValue:
    """A data link on the target column that opens the node dashboard for that row."""
    return dm.DynamicConfigValue(
        id_val="links", value=[{"title": "Open node dashboard", "url": node_link()}]
    )


def _value_column(
    unit: str, thresholds: tuple[tuple[float | None, str], ...]
) -> list[dm.DynamicConfigValue]:
    """The value column of a worst-first table: unit, thresholds and a coloured background."""
    return [
        dm.DynamicConfigValue(id_val="unit", value=unit),
        dm.DynamicConfigValue(id_val="decimals", value=2),
        dm.DynamicConfigValue(id_val="thresholds", value=steps(*thresholds).build()),
        dm.DynamicConfigValue(
            id_val="custom.cellOptions", value={"type": "color-background", "mode": "basic"}
        ),
    ]


def _count(
    title: str, description: str, expr: str, alarm: str | None, alerts: tuple[str, ...] = ()
) -> Item:
    """A fleet-wide count: green at 0 and ``alarm``-coloured from 1, or neutral without one."""
    thresholds = steps((None, "green"), (1, alarm)) if alarm else steps((None, "blue"))
    target = query(expr, per_cluster_legend())
    return single(title, description, "none", target, thresholds, width=6, alerts=alerts)


def glance_row() -> list[Item]:
    """Four counts that say whether anything in the fleet needs attention."""
    decode_age = f"time() - {sel('specwatch_last_decode_timestamp_seconds', FLEET_SCOPE)}"
    return [
        db.Row("Fleet at a glance"),
        _count(
            "Exporters down",
            "specwatch sidecars Prometheus cannot scrape (up == 0). A sidecar that vanished "
            "from discovery entirely is caught by the SpecwatchAbsent alert.",
            across("sum", f"1 - {sel('up', FLEET_SCOPE)}"),
            "red",
            ("SpecwatchDown", "SpecwatchAbsent"),
        ),
        _count(
            "Targets watched",
            "Serving processes watched by the selected exporters (one per configured target, "
            "whether its log or only its metrics are read).",
            across("count", sel("specwatch_target_info", FLEET_SCOPE)),
            None,
        ),
        _count(
            "Targets without fresh decode stats",
            f"Targets whose newest decode stats line is older than {STALE_AFTER_S} s: idle, "
            "stalled, or their log level hides decode stats.",
            across("sum", f"{decode_age} > bool {STALE_AFTER_S}"),
            "orange",
            ("SpecDecodeStatsMissing",),
        ),
        _count(
            "Nodes slower than baseline",
            "Targets whose throughput is below the non-speculative baseline at the same load "
            "(speedup < 1, 5-minute mean, against their own baseline or the fleet's plain "
            "peers): speculation costs them speed.",
            across("sum", f"{per_target(SPEEDUP)} < bool 1"),
            "red",
            ("SpecDecodeSlowerThanBaseline",),
        ),
    ]


def worst_row() -> list[Item]:
    """Worst accept lengths and speedups, and the findings by code."""
    hidden = ["Time"]
    accept = grid(
        f"Lowest accept lengths (bottom {WORST})",
        "Targets with the lowest current accept length (averaged over DP ranks). 1.0 is a "
        "collapsed drafter. Click a target to open its node dashboard.",
        "short",
        [table_query(f"bottomk({WORST}, {per_target('specwatch_accept_length')})")],
        hidden,
        width=8,
        alerts=(
            "SpecDecodeAcceptLengthCollapsed",
            "SpecDecodeAcceptLengthLow",
        ),
    )
    speedup = grid(
        f"Lowest speedups (bottom {WORST})",
        "Targets with the lowest throughput relative to their non-speculative baseline "
        "(5-minute mean), and where that baseline came from (source: configured, own_log, "
        "fleet, drafting_off). Below 1.0 speculation makes the node slower. Click a target "
        "to open it.",
        "short",
        [table_query(f"bottomk({WORST}, {per_target(SPEEDUP, 'source')})")],
        hidden,
        width=8,
        alerts=("SpecDecodeSlowerThanBaseline",),
    )
    findings = grid(
        "Active findings by code",
        "How many targets have each finding active, with what the finding means. The node "
        "dashboard lists them per target.",
        "none",
        [
            table_query(
                explained(
                    across("count", sel("specwatch_finding", FLEET_SCOPE), "code", "severity")
                )
            )
        ],
        hidden,
        width=8,
    )
    return [
        db.Row("Worst first"),
        accept.override_by_name(
            "Value", _value_column("short", accept_length_steps())
        ).override_by_name("target", [_node_link()]),
        speedup.override_by_name("Value", _value_column("short", speedup_steps())).override_by_name(
            "target", [_node_link()]
        ),
        findings.override_by_name(
            "explanation", [dm.DynamicConfigValue(id_val="mappings", value=finding_explanations())]
        ).override_by_name(
            "severity",
            [
                dm.DynamicConfigValue(id_val="mappings", value=severity_colors()),
                dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            ],
        ),
    ]


def per_cluster_heatmap(title: str, description: str, buckets: str) -> heatmap.Panel:
    """A fleet heatmap of pre-bucketed rates; with several clusters, one per cluster side by
    side, as a heatmap adds up its series."""
    config = mixin()
    panel = heat(
        title + (f" (${config.cluster_label})" if config.multi_cluster else ""),
        description,
        query(buckets, "{{le}}").format(pm.PromQueryFormat.HEATMAP),
        width=12,
    )
    if config.multi_cluster:
        panel = panel.repeat(config.cluster_label).repeat_direction("h")
    return panel


def distribution_row() -> list[Item]:
    """How accept length is distributed over time, fleet-wide, and per target."""
    buckets = histogram_buckets("specwatch_accept_length_windows", FLEET_SCOPE, *cluster_by())
    distribution = per_cluster_heatmap(
        "Per-window accept length distribution",
        "Decode windows per second in each accept-length bucket (1.0 to 8), over all "
        "selected targets"
        + (", one heatmap per cluster" if mixin().multi_cluster else "")
        + ". A band at the 1.0 bucket is a fleet of dead drafters.",
        buckets,
    )
    return [
        db.Row("Accept length over time"),
        distribution,
        graph(
            "Accept length per target",
            "Current accept length of every target (averaged over DP ranks) against the "
            "collapse line at 1.0.",
            "short",
            [query(per_target("specwatch_accept_length"), "{{instance}} {{target}}")],
            steps((None, "transparent"), (1.0, "red")),
            height=9,
        ).min(0),
        graph(
            "Accept length by served model",
            "Current accept length averaged over the targets serving each model (the "
            "served_model label of specwatch_target_info): a drafter that collapsed for one "
            "model shows as that model's line, whichever nodes serve it.",
            "short",
            [
                query(
                    per_model("specwatch_accept_length"),
                    model_legend(),
                )
            ],
            steps((None, "transparent"), (1.0, "red")),
            height=9,
        ).min(0),
        graph(
            "Fleet accept length (from counters)",
            "1 + accepted draft tokens / draft rounds, summed over every selected target whose "
            "engine counts them: exact, weighted by "
            "each node's drafts, never a mean of per-node values.",
            "short",
            [
                query(
                    f"1 + {across('sum', rate('specwatch_accepted_tokens_total', FLEET_SCOPE))}\n"
                    f"/ {across('sum', rate('specwatch_drafts_total', FLEET_SCOPE) + ' > 0')}",
                    per_cluster_legend("fleet"),
                )
            ],
            steps((None, "transparent"), (1.0, "red")),
            height=9,
        ).min(0),
        graph(
            "Generated tokens per second by served model (from counters)",
            "Tokens generated per second, summed over the targets serving each model, from "
            "specwatch_generated_tokens_total: an exact sum over nodes however they are loaded, "
            "which an average of throughput gauges is not.",
            "short",
            [
                query(
                    across(
                        "sum",
                        with_model(rate("specwatch_generated_tokens_total", FLEET_SCOPE)),
                        MODEL,
                    ),
                    model_legend(),
                )
            ],
            steps((None, "transparent")),
            width=24,
        ).min(0),
    ]


def requests_row() -> list[Item]:
    """Each finished request's own accept length across the fleet (SGLang --log-requests)."""
    buckets = histogram_buckets(REQUESTS, FLEET_SCOPE, *cluster_by())
    config = mixin()
    distribution = per_cluster_heatmap(
        "Accept length per finished request",
        "Finished requests per second in each accept-length bucket over all selected targets "
        "that log their finished requests. A band at the bottom under healthy "
        "window averages is traffic the drafters do not fit.",
        buckets,
    )
    share = sel(NO_BENEFIT_SHARE, FLEET_SCOPE)
    return [
        db.Row("Per-request acceptance"),
        distribution,
        graph(
            "Requests without benefit per target",
            "Share of each target's finished requests at accept length <= 1.05 over 15 "
            "minutes. Above the red line (10%) SpecDecodeRequestsWithoutBenefit fires where the "
            "target's windows look healthy.",
            "percentunit",
            [
                query(
                    f"max by ({per_target_labels()}, {MODEL}) ({with_model(share)})",
                    "{{instance}} {{target}} {{served_model}}",
                )
            ],
            steps((None, "transparent"), (config.thresholds.no_benefit_share, "red")),
            height=9,
            alerts=("SpecDecodeRequestsWithoutBenefit",),
        )
        .min(0)
        .max(1),
    ]


def adaptive_row() -> list[Item]:
    """Where adaptive speculation has drafting off, and the draft steps each target runs."""
    off = sel("specwatch_drafting_off_ratio", FLEET_SCOPE)
    return [
        db.Row("Adaptive speculation"),
        graph(
            "Drafting off per target",
            "Share of each adaptive target's recent decode windows with drafting off (steps 0). "
            "High while the node is busy is adaptive speculation choosing plain decoding, by "
            "design, and such windows leave the accept-length panels; near 1 at every load is "
            "a drafter adaptive has given up on (SpecDecodeDrafterGivenUp).",
            "percentunit",
            [
                query(
                    f"max by ({per_target_labels()}, {MODEL}) ({with_model(off)})",
                    "{{instance}} {{target}} {{served_model}}",
                )
            ],
            steps((None, "transparent")),
            height=9,
            alerts=("SpecDecodeDrafterGivenUp",),
        )
        .min(0)
        .max(1),
        graph(
            "Draft steps in force per target",
            "The draft steps each target runs now: adaptive speculation's newest choice, else "
            "the configured count. A fleet of one model whose nodes differ here is adaptive "
            "reacting to their different loads.",
            "short",
            [query(per_target("specwatch_speculative_steps"), "{{instance}} {{target}}")],
            steps((None, "transparent")),
            height=9,
        ).min(0),
    ]


def coverage_row() -> list[Item]:
    """Which exporters Prometheus scrapes, their version, and how many targets each watches."""
    coverage = grid(
        "Exporter coverage",
        "Every specwatch instance Prometheus knows: scraped or not, its version, and how "
        "many targets it watches. A node missing here is not monitored at all.",
        "none",
        [
            table_query(sel("up", FLEET_SCOPE), "A"),
            table_query(
                across("count", sel("specwatch_build_info", FLEET_SCOPE), *COVERAGE, "version"),
                "B",
            ),
            table_query(
                across(
                    "count", sel("specwatch_last_decode_timestamp_seconds", FLEET_SCOPE), *COVERAGE
                ),
                "C",
            ),
        ],
        ["Time", "__name__", "Value #B"],
        width=12,
        alerts=(
            "SpecwatchDown",
            "SpecwatchAbsent",
        ),
    )
    return [
        db.Row("Coverage"),
        coverage.override_by_name(
            "Value #A",
            [
                dm.DynamicConfigValue(id_val="displayName", value="scraped"),
                dm.DynamicConfigValue(id_val="mappings", value=value_text(UP_DOWN)),
                dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            ],
        ).override_by_name(
            "Value #C", [dm.DynamicConfigValue(id_val="displayName", value="targets")]
        ),
        timeline(
            "Exporters scraped over time",
            "Prometheus' up metric per specwatch instance. Gaps mean the instance was not "
            "discovered at the time; red means it was discovered but did not answer.",
            query(sel("up", FLEET_SCOPE), "{{instance}}"),
            value_text(UP_DOWN),
            alerts=(
                "SpecwatchDown",
                "SpecwatchAbsent",
            ),
        ),
    ]


def build() -> db.Dashboard:
    """The fleet dashboard builder (uid ``specwatch-fleet``)."""
    board = dashboard(
        "specwatch / Fleet",
        fleet_uid(),
        "Speculative decoding across every watched node: worst accept lengths and speedups, "
        "findings, accept-length distribution per window and per request, adaptive "
        f"speculation and exporter coverage. Per node: /d/{node_uid()}.",
    )
    rows = (
        glance_row(),
        worst_row(),
        distribution_row(),
        requests_row(),
        adaptive_row(),
        coverage_row(),
    )
    return assemble(board, base_variables(), rows)
