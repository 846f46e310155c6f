"""The node dashboard: one watched server, answering "is speculation helping here, and why?".

Top row: the verdict (accept length, speedup, derived accept rate, throughput, CUDA graphs,
freshness). Then the evidence over time, the findings with their explanation, and the health of
the exporter itself, so a blank panel can be told apart from a dead sidecar.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from exporter.mixin.dashboards.common import (
    ABOVE_PANELS,
    DS,
    INSTANCE,
    JOB,
    NODE_SCOPE,
    STALE_AFTER_S,
    UP_DOWN,
    WINDOW_SCOPE,
    Item,
    accept_length_steps,
    assemble,
    base_variables,
    dashboard,
    explained,
    finding_explanations,
    fleet_uid,
    histogram_buckets,
    label_variable,
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
from exporter.mixin.rules import NO_BENEFIT_BUCKET, NO_BENEFIT_SHARE, REQUESTS, no_benefit_fraction

PER_RANK = "{{instance}} {{dp_rank}}"
ON_OFF = {"0": ("off", "red"), "1": ("on", "green")}


def node_throughput() -> str:
    """Each DP rank logs its own share of the output; the node's throughput is their sum,
    which is what the baseline and the exporter's speedup ratio compare against."""
    series = sel("specwatch_gen_throughput_tokens_per_second", WINDOW_SCOPE)
    return f"sum by (instance, target) ({series})"


def counter_accept_length() -> str:
    """Exact accept length from the engine's counters (vLLM, SGLang with verify-call
    counters): tokens pooled over the rate interval; no drafts, no value."""
    accepted = rate("specwatch_accepted_tokens_total", NODE_SCOPE)
    drafts = rate("specwatch_drafts_total", NODE_SCOPE)
    return f"1 + sum by (instance, target) ({accepted})\n/ sum by (instance, target) ({drafts} > 0)"


def counter_position_share() -> str:
    """Acceptance by position from the engine's per-position counters (vLLM and its schema):
    accepted drafts at each position per draft round, pooled over the rate interval."""
    accepted = rate("specwatch_position_accepted_tokens_total", NODE_SCOPE)
    drafts = rate("specwatch_drafts_total", NODE_SCOPE)
    return (
        f"sum by (instance, target, position) ({accepted})\n/ on (instance, target) "
        f"group_left sum by (instance, target) ({drafts} > 0)"
    )


def _dashed(name_regex: str) -> tuple[str, list[dm.DynamicConfigValue]]:
    """Override for reference series (baseline, expected): dashed, so they read as targets."""
    return name_regex, [
        dm.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
        dm.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    ]


def variables() -> list[db.DatasourceVariable | db.QueryVariable]:
    """Data source, job, instance, then the one target, then its DP ranks (if it logs any)."""
    target = (
        label_variable(
            "target", "Target", "specwatch_last_decode_timestamp_seconds", (JOB, INSTANCE)
        )
        .multi(False)
        .include_all(False)
    )
    dp_rank = label_variable("dp_rank", "DP rank", "specwatch_accept_length", NODE_SCOPE)
    # ".*" also matches the series of engines that log one line per node (no dp_rank label).
    return [*base_variables(), target, dp_rank.all_value(".*")]


def verdict_row() -> list[Item]:
    """The six numbers an on-call engineer reads first."""
    return [
        db.Row("Is speculation helping?"),
        single(
            "Accept length now",
            "Tokens emitted per verify step (accepted drafts + the bonus token). 1.0 means no "
            "draft token is ever accepted: speculation is pure overhead.",
            "short",
            query(sel("specwatch_accept_length", WINDOW_SCOPE), PER_RANK),
            steps(*accept_length_steps()),
            alerts=(
                "SpecDecodeAcceptLengthCollapsed",
                "SpecDecodeAcceptLengthLow",
                "SpecDecodeDrafterGivenUp",
            ),
        ).decimals(2),
        single(
            "Speedup vs baseline now",
            "Generation throughput divided by the non-speculative baseline at the same number "
            "of running requests (5-minute mean), and where that baseline came from: configured, "
            "own_log, fleet (plain peers of the same model and hardware) or drafting_off. Below "
            "1: speculation makes this node slower.",
            "short",
            query(
                sel("target:specwatch_speedup:avg5m", NODE_SCOPE),
                "{{instance}} ({{source}} baseline)",
            ),
            steps(*speedup_steps()),
            alerts=("SpecDecodeSlowerThanBaseline",),
        ).decimals(2),
        single(
            "Accept rate now (derived)",
            "Accepted drafts per drafted token, (accept length - 1) / (draft tokens - 1), "
            "computed by specwatch because the rate an engine logs may mean something else.",
            "percentunit",
            query(sel("specwatch_accept_ratio", WINDOW_SCOPE), PER_RANK),
            steps((None, "red"), (0.05, "orange"), (0.3, "green")),
            alerts=("SpecDecodeDraftTokensWasted",),
        ).decimals(1),
        single(
            "Generation throughput now",
            "Output tokens per second in the newest decode window, summed over DP ranks.",
            "short",
            query(node_throughput(), "{{instance}}"),
            steps((None, "blue")),
        ),
        single(
            "CUDA graph",
            "Whether the newest decode window ran with CUDA graphs. Off costs a large share "
            "of decode speed.",
            "bool_on_off",
            query(sel("specwatch_cuda_graph", WINDOW_SCOPE), PER_RANK),
            steps((None, "text")),
            alerts=("SpecDecodeCudaGraphDisabled",),
        ).mappings(value_text(ON_OFF)),
        single(
            "Newest decode window age",
            f"Seconds since the newest decode stats line. Past {STALE_AFTER_S} s (stale_after) "
            "the per-window panels go blank on purpose: old values are never shown as current.",
            "s",
            query(f"time() - {sel('specwatch_last_decode_timestamp_seconds', NODE_SCOPE)}"),
            steps((None, "green"), (STALE_AFTER_S, "orange"), (5 * STALE_AFTER_S, "red")),
            alerts=("SpecDecodeStatsMissing",),
        ),
    ]


def speculation_row() -> list[Item]:
    """Accept length, derived rate, throughput against the baseline and the speedup over time."""
    accept = graph(
        "Accept length",
        "Per-window accept length, one line per DP rank, against the collapse line (1.0, red) "
        "and the expected value configured for this drafter (dashed). Sitting on 1.0 is a "
        "broken or mismatched draft; one rank alone there is that rank's drafter. "
        "Where the engine counts drafts, 'from counters' is the exact value over the "
        "rate interval. 'floor' (dashed) is the low line of this drafter's algorithm. Windows "
        "with drafting off (adaptive speculation) have no accept length: see 'Draft steps'.",
        "short",
        [
            query(sel("specwatch_accept_length", WINDOW_SCOPE), PER_RANK, "A"),
            query(
                sel("specwatch_expected_accept_length", NODE_SCOPE), "expected {{instance}}", "B"
            ),
            query(counter_accept_length(), "from counters {{instance}}", "C"),
            query(sel("specwatch_accept_length_floor", NODE_SCOPE), "floor {{instance}}", "D"),
        ],
        steps((None, "transparent"), (1.0, "red")),
        alerts=(
            "SpecDecodeAcceptLengthCollapsed",
            "SpecDecodeAcceptLengthLow",
            "SpecDecodeDpRankCollapsed",
        ),
    ).min(0)
    throughput = (
        graph(
            "Throughput vs baseline",
            "Output tokens/s of the node (summed over DP ranks) against the non-speculative "
            "baseline at the current running requests (dashed). With drafting off (adaptive "
            "speculation at high load) the node decodes plainly and sits a little below it.",
            "short",
            [
                query(node_throughput(), "{{instance}}", "A"),
                query(
                    sel("specwatch_baseline_gen_throughput_tokens_per_second", NODE_SCOPE),
                    "baseline {{instance}} ({{source}})",
                    "B",
                ),
            ],
            steps((None, "transparent")),
            alerts=("SpecDecodeSlowerThanBaseline", "SpecDecodeDraftingOffBelowBaseline"),
        )
        .axis_label("tokens/s")
        .min(0)
    )
    return [
        db.Row("Speculation"),
        accept.override_by_regexp(*_dashed("expected .*|floor .*")),
        graph(
            "Draft steps (adaptive speculation)",
            "Draft steps in force: adaptive speculation's choice, else the configured count. "
            "0 is speculation off (adaptive): plain decoding at that load, by design at high "
            "concurrency, judged by speed only. 'off share' is the share of recent windows "
            "with drafting off; near 1 at every load, with probes accepting nothing, is a "
            "drafter adaptive has given up on.",
            "short",
            [
                query(sel("specwatch_speculative_steps", NODE_SCOPE), "steps {{instance}}", "A"),
                query(
                    sel("specwatch_drafting_off_ratio", NODE_SCOPE), "off share {{instance}}", "B"
                ),
            ],
            steps((None, "transparent")),
            alerts=("SpecDecodeDrafterGivenUp",),
        ).min(0),
        graph(
            "Accept rate (derived)",
            "Accepted drafts per drafted token, derived by specwatch. The dashed line marks 5%: "
            "below it nearly every draft token is wasted verification work.",
            "percentunit",
            [query(sel("specwatch_accept_ratio", WINDOW_SCOPE), PER_RANK)],
            steps((None, "transparent"), (0.05, "red")),
            alerts=("SpecDecodeDraftTokensWasted",),
        )
        .min(0)
        .max(1),
        graph(
            "Acceptance by draft position",
            "Share of draft rounds whose drafts up to each position (0 = the first) were all "
            "accepted, where the engine counts acceptance by position. A steep drop after "
            "some position means the positions past it are drafted and verified for little: "
            "see the draft_positions_unprofitable finding. Where the engine counts accepted "
            "drafts by position and draft rounds, 'from counters' is the share over the rate "
            "interval, dashed.",
            "percentunit",
            [
                query(
                    sel("specwatch_position_accept_ratio", WINDOW_SCOPE),
                    "position {{position}} {{dp_rank}}",
                    "A",
                ),
                query(counter_position_share(), "from counters position {{position}}", "B"),
            ],
            steps((None, "transparent")),
        )
        .min(0)
        .max(1)
        .override_by_regexp(*_dashed("from counters .*")),
        throughput.override_by_regexp(*_dashed("baseline .*")),
        graph(
            "Speedup vs baseline",
            "Throughput divided by the baseline at the current running requests (5-minute "
            "mean), named by the baseline's source (a fleet baseline comes from the mixin's "
            "rules). The red line is 1.0: below it the node would be faster without "
            "speculation.",
            "short",
            [
                query(
                    sel("target:specwatch_speedup:avg5m", NODE_SCOPE),
                    "{{instance}} vs {{source}} baseline",
                )
            ],
            steps((None, "transparent"), (1.0, "red")),
            alerts=("SpecDecodeSlowerThanBaseline",),
        ).min(0),
    ]


def requests_row() -> list[Item]:
    """Each finished request's own accept length (SGLang --log-requests): the share of requests
    that a healthy window average hides."""
    buckets = histogram_buckets(REQUESTS, NODE_SCOPE)
    low = f'le="{NO_BENEFIT_BUCKET}"'
    by = "sum by (instance, traffic_class)"
    by_class = no_benefit_fraction(
        rate(f"{REQUESTS}_bucket", NODE_SCOPE, low),
        rate(f"{REQUESTS}_count", NODE_SCOPE),
        rate(REQUESTS, NODE_SCOPE),
        by,
        by,
    )
    return [
        db.Row("Per-request acceptance"),
        heat(
            "Accept length per finished request",
            "Finished requests per second in each accept-length bucket, from the server's log "
            "of finished requests (empty without one). A band at the bottom while the "
            "window accept length looks healthy is a class of traffic the drafter does not fit.",
            query(buckets, "{{le}}").format(pm.PromQueryFormat.HEATMAP),
            width=12,
            height=8,
        ),
        graph(
            "Requests without benefit",
            "Share of finished requests at accept length <= 1.05 over 15 minutes (the alert's "
            "measure), and per traffic class over the rate interval when request_label_header "
            "is set. The red line is the alert's 10%.",
            "percentunit",
            [
                query(sel(NO_BENEFIT_SHARE, NODE_SCOPE), "all {{instance}}", "A"),
                query(by_class, "{{traffic_class}} {{instance}}", "B"),
            ],
            steps((None, "transparent"), (mixin().thresholds.no_benefit_share, "red")),
            alerts=("SpecDecodeRequestsWithoutBenefit",),
        )
        .min(0)
        .max(1),
    ]


def load_row() -> list[Item]:
    """Requests and KV-cache pressure: the context that explains throughput."""
    return [
        db.Row("Load"),
        graph(
            "Running and queued requests",
            "Requests decoding and waiting. Running pinned at the cap (dashed) while requests "
            "queue means max_running_requests limits throughput (an engine may choose a low "
            "cap when none is set: see the running_requests_capped finding).",
            "short",
            [
                query(sel("specwatch_running_requests", WINDOW_SCOPE), "running " + PER_RANK, "A"),
                query(sel("specwatch_queued_requests", WINDOW_SCOPE), "queued " + PER_RANK, "B"),
                query(sel("specwatch_max_running_requests", NODE_SCOPE), "cap {{instance}}", "C"),
            ],
            steps((None, "transparent")),
        )
        .min(0)
        .override_by_regexp(*_dashed("cap .*")),
        graph(
            "KV cache token usage",
            "Share of the KV-cache token pool in use. Near 1.0 the scheduler retracts or "
            "queues requests.",
            "percentunit",
            [query(sel("specwatch_token_usage_ratio", WINDOW_SCOPE), PER_RANK)],
            steps((None, "green"), (0.9, "orange"), (0.98, "red")),
        )
        .min(0)
        .max(1),
    ]


def cuda_graph_row() -> list[Item]:
    """CUDA-graph state now and the share of windows that ran with and without it."""
    windows = rate("specwatch_decode_windows_total", NODE_SCOPE)
    by_state = f"sum by (instance, target, cuda_graph) ({windows})"
    total = f"sum by (instance, target) ({windows})"
    return [
        db.Row("CUDA graphs"),
        timeline(
            "CUDA graph state",
            "Per decode window: on (green) or off (red). Off windows run the draft and verify "
            "passes eagerly, which is much slower.",
            query(sel("specwatch_cuda_graph", WINDOW_SCOPE), PER_RANK),
            value_text(ON_OFF),
            alerts=("SpecDecodeCudaGraphDisabled",),
        ),
        graph(
            "Decode windows by CUDA graph",
            "Share of decode windows with cuda_graph=true and =false over the rate interval. "
            "Any red share means some batches fall back to eager mode.",
            "percentunit",
            [
                query(
                    f"{by_state}\n/ ignoring (cuda_graph) group_left\n{total}",
                    "{{instance}} cuda_graph={{cuda_graph}}",
                )
            ],
            steps((None, "transparent")),
            alerts=("SpecDecodeCudaGraphDisabled",),
        )
        .min(0)
        .max(1)
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
        .fill_opacity(60)
        .override_by_regexp(
            ".*cuda_graph=false",
            [dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"})],
        )
        .override_by_regexp(
            ".*cuda_graph=true",
            [dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "green"})],
        ),
    ]


def findings_row() -> list[Item]:
    """Active findings with their explanation, and the speculative configuration behind them."""
    findings = grid(
        "Active findings",
        "Misconfigurations specwatch diagnoses (one row per active finding), with what each "
        "means and how to fix it. The runbook link at the top has the details.",
        "none",
        [table_query(explained(sel("specwatch_finding", NODE_SCOPE)))],
        ["Time", "Value", "__name__", "job"],
        width=16,
        alerts=(
            "SpecDecodeMisconfigured",
            "SpecDecodeCudaGraphDisabled",
            "SpecDecodeDraftTokensWasted",
            "SpecDecodeStatsMissing",
            "SpecDecodeLogFormatUnrecognized",
            "SpecDecodeServerCrashed",
        ),
    )
    return [
        db.Row("Findings and configuration"),
        findings.override_by_name(
            "explanation",
            [
                dm.DynamicConfigValue(id_val="mappings", value=finding_explanations()),
                dm.DynamicConfigValue(id_val="custom.width", value=640),
            ],
        ).override_by_name(
            "severity",
            [
                dm.DynamicConfigValue(id_val="mappings", value=severity_colors()),
                dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            ],
        ),
        grid(
            "Speculative configuration",
            "Algorithm, draft model and draft shape as read from the startup log and the draft "
            "config. An Eagle3 architecture with algorithm EAGLE is the wrong-flag incident.",
            "none",
            [table_query(sel("specwatch_speculative_info", NODE_SCOPE))],
            ["Time", "Value", "__name__", "job"],
            width=8,
        ),
    ]


def health_row() -> list[Item]:
    """Is the sidecar scraped, can it reach the server, and is the log readable?"""
    log_lines = f"sum by (instance) ({rate('specwatch_log_lines_total', NODE_SCOPE)})"
    stats_lines = f"sum by (instance, kind) ({rate('specwatch_log_stats_lines_total', NODE_SCOPE)})"
    unrecognized = (
        f"sum by (instance) ({rate('specwatch_log_unrecognized_stats_lines_total', NODE_SCOPE)})"
    )
    skipped = f"sum by (instance, reason) ({rate('specwatch_log_skipped_lines_total', NODE_SCOPE)})"
    return [
        db.Row("Exporter and upstream health"),
        timeline(
            "Exporter scraped",
            "Prometheus' own up metric for the specwatch job: down means the sidecar itself "
            "is not answering and every other panel is blind.",
            query(sel("up", (JOB, INSTANCE)), "{{instance}}"),
            value_text(UP_DOWN),
            width=8,
            alerts=(
                "SpecwatchDown",
                "SpecwatchAbsent",
            ),
        ),
        timeline(
            "Upstream endpoints",
            "Whether specwatch could scrape the server's /metrics and /server_info. The log "
            "alone is enough for the core panels; this explains missing server-side figures.",
            query(sel("specwatch_upstream_up", NODE_SCOPE), "{{instance}} {{endpoint}}"),
            value_text(UP_DOWN),
            width=8,
            alerts=("SpecwatchUpstreamDown",),
        ),
        graph(
            "Upstream scrape duration",
            "How long the last scrape of each server endpoint took. specwatch never blocks its "
            "own /metrics on it.",
            "s",
            [
                query(
                    sel("specwatch_upstream_scrape_duration_seconds", NODE_SCOPE),
                    "{{instance}} {{endpoint}}",
                )
            ],
            steps((None, "transparent"), (1.0, "orange")),
            width=8,
            height=6,
        ).min(0),
        timeline(
            "Log paths followed",
            "Whether specwatch follows each configured log path; the legend gives the reason "
            "when it does not (missing, directory, not_regular, unreadable; waiting while a "
            "file has yet to appear). Nothing is read from a path that is down.",
            query(sel("specwatch_log_source_up", NODE_SCOPE), "{{instance}} {{path}} ({{reason}})"),
            value_text(UP_DOWN),
            width=24,
            height=4,
            alerts=("SpecwatchLogNotFollowed",),
        ),
        graph(
            "Log lines read",
            "Lines read from the server log and how many were stats lines. Unrecognized stats "
            "lines mean the log format drifted after an upgrade. Two servers writing this one "
            "log make a mix: no accept length or speed is given for it until each has a log of "
            "its own.",
            "cps",
            [
                query(log_lines, "all lines {{instance}}", "A"),
                query(stats_lines, "{{kind}} stats {{instance}}", "B"),
                query(unrecognized, "unrecognized stats {{instance}}", "C"),
            ],
            steps((None, "transparent")),
            width=12,
            alerts=(
                "SpecDecodeLogFormatUnrecognized",
                "SpecDecodeStatsMissing",
                "SpecwatchLogInterleaved",
            ),
        ).min(0),
        graph(
            "Log and upstream problems",
            "Skipped log lines (too long, undecodable) by reason, and failed upstream scrapes "
            "by reason (timeout, refused, http, garbage, too_large).",
            "cps",
            [
                query(skipped, "skipped {{reason}} {{instance}}", "A"),
                query(
                    f"sum by (instance, endpoint, reason) "
                    f"({rate('specwatch_upstream_scrape_errors_total', NODE_SCOPE)})",
                    "{{endpoint}} {{reason}} {{instance}}",
                    "B",
                ),
            ],
            steps((None, "transparent")),
            width=12,
            alerts=("SpecwatchUpstreamDown",),
        ).min(0),
    ]


def alert_annotation() -> db.AnnotationQuery:
    """Firing alerts of this target (or of its exporter, which has no target label)."""
    expr = sel("ALERTS", (JOB, INSTANCE), 'alertstate="firing"', 'target=~"$target|"')
    return (
        db.AnnotationQuery()
        .name("Firing alerts")
        .datasource(DS)
        .enable(True)
        .icon_color("red")
        .placement(ABOVE_PANELS)
        .target(pb.Dataquery().expr(expr).ref_id("Anno").datasource(DS))
        .expr(expr)
        .step("60s")
        .title_format("{{alertname}}")
        .text_format("{{severity}}: {{alertname}} on {{instance}}")
        .tag_keys("alertname,severity")
    )


def build() -> db.Dashboard:
    """The node dashboard builder (uid ``specwatch-node``)."""
    board = dashboard(
        "specwatch / Node",
        node_uid(),
        "Speculative decoding on one serving node: accept length, speedup against the "
        f"baseline, CUDA graphs, findings and exporter health. Fleet view: /d/{fleet_uid()}.",
    ).annotation(alert_annotation())
    rows = (
        verdict_row(),
        speculation_row(),
        requests_row(),
        load_row(),
        cuda_graph_row(),
        findings_row(),
        health_row(),
    )
    return assemble(board, variables(), rows)
