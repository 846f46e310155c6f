"""specwatch's recording and alerting rules, as functions of a mixin config.

Every specwatch series a rule reads carries the config's selector, so a second cluster or tenant
scraping the same metric names never mixes in; thresholds and ``for:`` durations come from the
config's ``Thresholds``, the same numbers ``doctor`` and ``report`` judge by. Robustness rules
every alert follows are written once in ``HEADER`` (it heads the rendered alert file).
"""

from __future__ import annotations

from typing import Any

from exporter.analysis.findings import OFF_SHARE
from exporter.analysis.plain_speed import MIN_BAND_WINDOWS
from exporter.analysis.request_share import NO_BENEFIT_ACCEPT_LENGTH
from exporter.mixin_config import MixinConfig

Rule = dict[str, Any]
Group = dict[str, Any]

TRAFFIC = "target:specwatch_gen_throughput_tokens_per_second:sum"
BAND = "specwatch_band_gen_throughput_tokens_per_second"
# A fleet baseline: the mean throughput of the nodes serving a model on some hardware without
# speculation, per load band, over the last hour, with enough windows behind it.
FLEET_BASELINE = (
    "served_model_hardware_band:specwatch_plain_gen_throughput_tokens_per_second:mean1h"
)
FLEET_SPEEDUP_BAND = "target_band:specwatch_fleet_speedup:ratio5m"
FLEET_SPEEDUP = "target:specwatch_fleet_speedup:ratio5m"
PEERS = "served_model, hardware, band"
NO_BENEFIT_SHARE = "target:specwatch_requests_without_benefit:ratio"
# Each finished request's accept length: a classic histogram on /metrics, stored as a native
# one by a Prometheus 3 that converts them.
REQUESTS = "specwatch_request_accept_length"
# The bucket of specwatch_request_accept_length that ends where a request got no benefit.
NO_BENEFIT_BUCKET = repr(float(NO_BENEFIT_ACCEPT_LENGTH))


def sel(config: MixinConfig, metric: str, *extra: str) -> str:
    """``metric`` limited to the user's selector plus ``extra`` matchers."""
    return f"{metric}{{{', '.join((*config.matchers(), *extra))}}}"


def where(config: MixinConfig) -> str:
    """How a description names the node: its instance, and its cluster when there are several."""
    if config.multi_cluster:
        return f"{{{{ $labels.instance }}}} in {{{{ $labels.{config.cluster_label} }}}}"
    return "{{ $labels.instance }}"


def _pooled(config: MixinConfig, metric: str, window: str = "5m") -> str:
    """Means pool every sampled window of every DP rank (sum / count), not averages of averages."""
    series = sel(config, metric)
    return (
        f"sum without (dp_rank) (sum_over_time({series}[{window}]))\n/\n"
        f"sum without (dp_rank) (count_over_time({series}[{window}]))\n"
    )


def _counted(config: MixinConfig, aggregate: str) -> str:
    """Accept length as 1 + accepted tokens per draft round, both summed over ``aggregate``."""
    accepted = sel(config, "specwatch_accepted_tokens_total")
    drafts = sel(config, "specwatch_drafts_total")
    return f"1 + {aggregate} (rate({accepted}[5m]))\n/ {aggregate} (rate({drafts}[5m]) > 0)\n"


def recording_rules(config: MixinConfig) -> list[Group]:
    # The fleet is one job, per cluster when several share this Prometheus.
    fleet = f"{config.cluster_label}, job" if config.multi_cluster else "job"
    windows = sel(config, "specwatch_decode_windows_total")
    no_graph = sel(config, "specwatch_decode_windows_total", 'cuda_graph="false"')
    return [
        {
            "name": "specwatch.rules",
            "rules": [
                {
                    "record": "target:specwatch_accept_length:avg5m",
                    "expr": _pooled(config, "specwatch_accept_length"),
                },
                # The last two minutes: whether a low 5-minute mean is still the present. Two,
                # so that a scrape every minute always leaves a sample in the window: since
                # Prometheus 3 a range leaves out its start, and [1m] could be empty, resetting
                # the alert's `for:`.
                {
                    "record": "target:specwatch_accept_length:avg2m",
                    "expr": _pooled(config, "specwatch_accept_length", "2m"),
                },
                {
                    "record": "target:specwatch_accept_ratio:avg5m",
                    "expr": _pooled(config, "specwatch_accept_ratio"),
                },
                *_fleet_rules(config),
                {
                    "record": "target:specwatch_speedup:avg5m",
                    "expr": _speedup(config),
                },
                # The last minutes of the node's own speedup: whether a slow 5-minute mean is
                # still the present.
                {
                    "record": "target:specwatch_speedup:avg2m",
                    "expr": _pooled(config, "specwatch_speedup", "2m"),
                },
                # Present only while the newest decode window is fresh: the traffic guard.
                {
                    "record": TRAFFIC,
                    "expr": "sum without (dp_rank) "
                    f"({sel(config, 'specwatch_gen_throughput_tokens_per_second')})\n",
                },
                {
                    "record": "target:specwatch_decode_windows:rate10m",
                    "expr": f"sum without (dp_rank, cuda_graph) (rate({windows}[10m]))\n",
                },
                # Share of decode windows without CUDA graph; 0/0 (no windows) gives no alert.
                {
                    "record": "target:specwatch_decode_windows_without_cuda_graph:ratio_rate10m",
                    "expr": f"sum without (dp_rank, cuda_graph) (rate({no_graph}[10m]))\n/\n"
                    f"{sel(config, 'target:specwatch_decode_windows:rate10m')}\n",
                },
                # Exact accept length from the engine's counters where it has them (vLLM; SGLang
                # with spec_verify_calls_total): tokens summed before dividing, so a DP group or
                # a fleet is weighted by its drafts, not averaged over gauges. No drafts: no value.
                {
                    "record": "target:specwatch_accept_length:rate5m",
                    "expr": _counted(config, "sum without (dp_rank)"),
                },
                {
                    "record": "job:specwatch_accept_length:rate5m",
                    "expr": _counted(config, f"sum by ({fleet})"),
                },
                # Tokens per second of the fleet: a sum of counters, exact however the nodes
                # are loaded (a mean of throughput gauges is not).
                {
                    "record": "job:specwatch_generated_tokens:rate5m",
                    "expr": f"sum by ({fleet}) "
                    f"(rate({sel(config, 'specwatch_generated_tokens_total')}[5m]))\n",
                },
                {
                    "record": "target:specwatch_position_accept_ratio:avg5m",
                    "expr": _pooled(config, "specwatch_position_accept_ratio"),
                },
                # Share of the finished requests at accept length <= 1.05 (a bucket bound of
                # specwatch_request_accept_length), every traffic class together.
                {
                    "record": NO_BENEFIT_SHARE,
                    "expr": _no_benefit_share(config),
                },
            ],
        }
    ]


def no_benefit_fraction(low: str, count: str, native: str, by: str, by_bucket: str) -> str:
    """The share of requests at accept length <= NO_BENEFIT_BUCKET from the rates of the
    classic histogram's ``low`` bucket and ``count``, aggregated ``by`` (``by_bucket`` for the
    bucket, which has ``le``), or, where Prometheus 3 converts classic histograms to native
    ones (``convert_classic_histograms_to_nhcb``) and those series are gone, the native
    histogram's rate ``native``: ``histogram_fraction`` of it, the same share. No request: no
    value (0/0 gives nothing)."""
    return (
        f"(\n  {by_bucket} ({low})\n  /\n  ({by} ({count}) > 0)\n)\nor\n"
        f"(\n  histogram_fraction(-Inf, {NO_BENEFIT_BUCKET}, {by} ({native}))\n"
        f"  and\n  histogram_count({by} ({native})) > 0\n)"
    )


def _band_rate(config: MixinConfig, part: str, modes: str, window: str) -> str:
    """The per-band summary's ``part`` (sum, count) of some modes, as a rate over ``window``."""
    matcher = f'mode=~"{modes}"'
    return f"rate({sel(config, f'{BAND}_{part}', matcher)}[{window}])"


def _fleet_rules(config: MixinConfig) -> list[Rule]:
    """A baseline from the fleet's plain peers, and each speculative node's speed against it.

    The peers are every node of the same served model and hardware that serves without
    speculation (its moments in mode ``plain``), pooled across clusters: the same model on the
    same GPUs is the same plain speed wherever it runs. A band needs MIN_BAND_WINDOWS windows
    in the hour. A speculative node (drafting, or with drafting off) is compared band by band,
    then weighted by its windows in each band.
    """
    plain_sum = _band_rate(config, "sum", "plain", "1h")
    plain_count = _band_rate(config, "count", "plain", "1h")
    plain = 'mode="plain"'
    least = f"increase({sel(config, f'{BAND}_count', plain)}[1h])"
    spec = "drafting|drafting_off"
    spec_sum = f"sum without (mode) ({_band_rate(config, 'sum', spec, '5m')})"
    spec_count = f"sum without (mode) ({_band_rate(config, 'count', spec, '5m')} > 0)"
    baseline = (
        f"sum by ({PEERS}) ({plain_sum})\n/\nsum by ({PEERS}) ({plain_count})\n"
        f"and on ({PEERS})\nsum by ({PEERS}) ({least}) >= {MIN_BAND_WINDOWS}\n"
    )
    by_band = f"{spec_sum}\n/\n{spec_count}\n/ on ({PEERS}) group_left\n{FLEET_BASELINE}\n"
    by_target = sel(config, FLEET_SPEEDUP_BAND)
    weighted = (
        f"sum without ({PEERS}) ({by_target} * {spec_count})\n/\n"
        f"sum without ({PEERS}) ({spec_count} and {by_target})\n"
    )
    return [
        {"record": FLEET_BASELINE, "expr": baseline},
        {"record": FLEET_SPEEDUP_BAND, "expr": by_band},
        {"record": FLEET_SPEEDUP, "expr": weighted},
    ]


def _speedup(config: MixinConfig) -> str:
    """The node's speedup, labelled with where its baseline came from, by precedence: one set
    for the node (configured, or learned from its own plain log), the fleet's plain peers,
    then one the node learned from its windows with drafting off. The daemon exports a
    speedup only against a baseline of its own; the fleet's is computed here."""
    pooled = _pooled(config, "specwatch_speedup").strip()

    def sourced(which: str) -> str:
        base = sel(config, "specwatch_baseline_gen_throughput_tokens_per_second", which)
        return f"({pooled})\n* ignoring (source) group_left (source)\n(0 * {base} + 1)"

    own = sourced('source=~"configured|own_log"')
    fleet = f'label_replace({sel(config, FLEET_SPEEDUP)}, "source", "fleet", "", "")'
    learned = sourced('source="drafting_off"')
    # An exporter older than the source label: its baseline was configured.
    older = f'label_replace({pooled}, "source", "configured", "", "")'
    either = "\nor ignoring (source)\n"
    return either.join((own, fleet, learned, older)) + "\n"


def _no_benefit_share(config: MixinConfig) -> str:
    window = config.thresholds.no_benefit_window
    low = sel(config, "specwatch_request_accept_length_bucket", f'le="{NO_BENEFIT_BUCKET}"')
    count = sel(config, "specwatch_request_accept_length_count")
    rates = (f"rate({low}[{window}])", f"rate({count}[{window}])")
    native = f"rate({sel(config, REQUESTS)}[{window}])"
    by = "sum without (traffic_class)"
    return no_benefit_fraction(*rates, native, by, "sum without (le, traffic_class)") + "\n"


def finished_requests(config: MixinConfig, window: str) -> str:
    """Requests finished over ``window``, from the classic histogram's count or the native
    histogram's (either is there, depending on how Prometheus stores it)."""
    count = sel(config, "specwatch_request_accept_length_count")
    native = sel(config, REQUESTS)
    return (
        f"(\n  sum without (traffic_class) (increase({count}[{window}]))\n  or\n"
        f"  histogram_count(sum without (traffic_class) (increase({native}[{window}])))\n)"
    )


def _alert(
    config: MixinConfig,
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    for_: str | None = None,
    keep_firing_for: str | None = None,
    dashboard: tuple[str, ...] = ("node", "job", "instance", "target"),
) -> Rule:
    rule: Rule = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    if keep_firing_for:
        rule["keep_firing_for"] = keep_firing_for
    rule["labels"] = {"severity": severity, **config.alert_labels}
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": config.runbook_url(name),
        "dashboard_url": _dashboard_url(config, *dashboard),
    }
    return rule


def _dashboard_url(config: MixinConfig, which: str, *labels: str) -> str:
    """The dashboard ``which`` (node or fleet) opened at the alert's own ``labels`` (its
    cluster too, when several share the rules), each a URL-quoted template of the alert."""
    uid = f"{config.dashboard_uid_prefix}-{which}"
    scope = (config.cluster_label, *labels) if config.multi_cluster else labels
    variables = "".join(f"&var-{label}={{{{ $labels.{label} | urlquery }}}}" for label in scope)
    return f"{config.grafana_url}/d/{uid}/{uid}?{variables[1:]}"


def _finding(config: MixinConfig, code: str, keep: str = "code, severity") -> str:
    series = sel(config, "specwatch_finding", f'code="{code}"')
    return f"max without ({keep}) ({series})"


def _drafting_off(config: MixinConfig) -> str:
    """Present while drafting is off (adaptive, a schedule at k = 0): in at least OFF_SHARE of
    the recent windows, or, with too few windows for that share, 0 draft steps in force now
    (the daemon's finding drafting_off_below_baseline decides alike)."""
    share = sel(config, "specwatch_drafting_off_ratio")
    steps = sel(config, "specwatch_speculative_steps")
    return f"(\n  {share} >= {OFF_SHARE:g}\n  or\n  {steps} == 0 unless {share}\n)"


def speculation_alerts(config: MixinConfig) -> list[Rule]:
    t = config.thresholds
    traffic = f"{sel(config, TRAFFIC)} > 0"
    accept = sel(config, "target:specwatch_accept_length:avg5m")
    rank_accept = sel(config, "specwatch_accept_length", 'dp_rank!=""')
    recent = sel(config, "target:specwatch_accept_length:avg2m")
    expected = sel(config, "specwatch_expected_accept_length")
    # Present while accept length is judged: the drafter's algorithm has a standard.
    floor = sel(config, "specwatch_accept_length_floor")
    node = where(config)
    wasted = sel(config, "specwatch_finding", 'code="draft_tokens_excessive"')
    speedup = sel(config, "target:specwatch_speedup:avg5m")
    speedup_now = sel(config, "target:specwatch_speedup:avg2m")
    off = _drafting_off(config)
    # A recent mean collapsed within the last 5 minutes: the page's, whose tail the warnings'
    # 5-minute means still hold after it resolves; they keep silent (the verdict is collapsed).
    collapsed_lately = f"(min_over_time({recent}[5m]) <= {t.collapsed_accept_length} and {floor})"
    # The daemon's judge found too few drafts behind the accept length to call it anything
    # (a lookup drafter on traffic that never repeats): no acceptance alert, as no verdict.
    verdict = sel(config, "specwatch_verdict", 'state="too_few_drafts"')
    too_few = f"{verdict} == 1"
    return [
        _alert(
            config,
            "SpecDecodeAcceptLengthCollapsed",
            f"{accept} <= {t.collapsed_accept_length}\nand\n{floor}\nand\n{traffic}\n"
            f"unless ignoring (state)\n{too_few}\n",
            "critical",
            "Speculative decoding accepts no draft tokens.",
            f"Accept length on {{{{ $labels.target }}}} ({node}) averaged "
            '{{ $value | printf "%.2f" }} over 5 minutes while serving: the drafter\'s proposals '
            "are all rejected, so every decode step pays for drafting and gains nothing.",
            for_=t.collapsed_for,
            # An exporter restart (a minute of stale series) neither resolves nor re-pages it.
            keep_firing_for="5m",
        ),
        _alert(
            config,
            "SpecDecodeAcceptLengthLow",
            # The last minutes must be low too: a recovered node's 5-minute mean still holds
            # the collapse it recovered from, and would open a ticket for it.
            f"(\n  {accept} < {t.low_accept_fraction} * {expected}\n"
            f"  and {recent} < {t.low_accept_fraction} * {expected}\n  or\n"
            f"  ({accept} < {floor} and {recent} < {floor} unless {expected})\n)\n"
            f"and\n{floor}\nand\n{traffic}\nunless\n{collapsed_lately}\n"
            f"unless ignoring (state)\n{too_few}\n",
            "warning",
            "Speculative decoding accept length is below expectation.",
            f"Accept length on {{{{ $labels.target }}}} ({node}) averaged "
            '{{ $value | printf "%.2f" }} over 5 minutes, below '
            f"{t.low_accept_fraction * 100:g}% of the expected accept length "
            "(or below the floor of its algorithm when none is configured).",
            for_=t.low_accept_for,
        ),
        # While drafting is off the node is not speculating: DraftingOffBelowBaseline judges it.
        _alert(
            config,
            "SpecDecodeSlowerThanBaseline",
            f"{speedup} < {t.slower_than_baseline_speedup:g}\nand ignoring (source)\n{traffic}\n"
            f"unless ignoring (source)\n{off}\n"
            # Its own last minutes no longer slow: the 5-minute mean's tail, not the present.
            f"unless ignoring (source)\n{speedup_now} >= {t.slower_than_baseline_speedup:g}\n"
            f"unless ignoring (source)\n{collapsed_lately}\n",
            "warning",
            "Speculative decoding is slower than serving without it.",
            f"{{{{ $labels.target }}}} ({node}) generates "
            '{{ $value | printf "%.2f" }}x the non-speculative baseline throughput at its '
            "running requests (5-minute average; baseline source: {{ $labels.source }}): "
            "speculation costs more than it saves.",
            for_=t.slower_for,
        ),
        # A few percent below the baseline is what keeping speculation ready costs.
        _alert(
            config,
            "SpecDecodeDraftingOffBelowBaseline",
            f"{speedup} < {t.drafting_off_speedup:g}\nand ignoring (source)\n{off}\n"
            f"and ignoring (source)\n{traffic}\n",
            "warning",
            "Drafting is off at this load, and the node runs well below serving without it.",
            f"{{{{ $labels.target }}}} ({node}) drafts nothing at this load (adaptive "
            "speculation or a per-batch-size schedule turned drafting off, by design), yet "
            'generates {{ $value | printf "%.2f" }}x the non-speculative baseline throughput '
            "(5-minute average; baseline source: {{ $labels.source }}), below the "
            f"{t.drafting_off_speedup:g}x that keeping speculation ready may cost: what "
            "stays running for it costs too much.",
            for_=t.slower_for,
        ),
        _alert(
            config,
            "SpecDecodeCudaGraphDisabled",
            "(\n  "
            f"{sel(config, 'target:specwatch_decode_windows_without_cuda_graph:ratio_rate10m')}"
            f" > 0.5\n  and\n  {traffic}\n)\nor\n{_finding(config, 'cuda_graph_disabled')}\n",
            "warning",
            "Decode runs without CUDA graphs.",
            f"Decode on {{{{ $labels.target }}}} ({node}) runs without CUDA graphs: the server "
            "was started with them off, or more than half of its decode windows over 10 minutes "
            "logged `cuda graph: False`.",
            for_="10m",
        ),
        _alert(
            config,
            "SpecDecodeMisconfigured",
            _finding(config, "eagle3_draft_with_eagle_algorithm", keep="severity") + "\n",
            "critical",
            "An EAGLE-3 drafter is served under algorithm EAGLE.",
            f"{{{{ $labels.target }}}} ({node}) loaded an EAGLE-3 draft model under algorithm "
            "EAGLE: the server skips the draft's layer fusion and accept length stays near 1. "
            "Restart it with algorithm EAGLE3 (each engine's flag is in the runbook; specwatch "
            "doctor names this server's).",
            keep_firing_for="10m",
        ),
        # One DP rank's windows alone, while the node's pooled mean is not collapsed (that
        # pages as SpecDecodeAcceptLengthCollapsed): five healthy ranks hide a sixth at 1.00.
        # Only where other ranks logged too: a lone rank (vLLM's one engine, after a log that
        # changed engine) is the node, not one rank among others.
        _alert(
            config,
            "SpecDecodeDpRankCollapsed",
            f"(\n  sum_over_time({rank_accept}[5m])\n  /\n  count_over_time({rank_accept}[5m])\n)"
            f" <= {t.collapsed_accept_length}\nand ignoring (dp_rank)\n"
            f"{accept} > {t.collapsed_accept_length}\nand ignoring (dp_rank)\n"
            f"count without (dp_rank) (count_over_time({rank_accept}[5m])) > 1\n"
            f"and ignoring (dp_rank)\n{floor}\n"
            f"and ignoring (dp_rank)\n{traffic}\n",
            "critical",
            "One DP rank of the node accepts no draft tokens.",
            f"DP rank {{{{ $labels.dp_rank }}}} of {{{{ $labels.target }}}} ({node}) averaged an "
            'accept length of {{ $value | printf "%.2f" }} over 5 minutes while the other ranks '
            "accept drafts: every request that rank serves pays for drafting and gains nothing.",
            for_=t.collapsed_for,
            keep_firing_for="5m",
        ),
        # Log-only: a dead server writes no more windows, so nothing guards on traffic here.
        _alert(
            config,
            "SpecDecodeServerCrashed",
            _finding(config, "server_crashed", keep="severity") + "\n",
            "critical",
            "The serving engine crashed.",
            f"The log of {{{{ $labels.target }}}} ({node}) says the server died (a scheduler "
            "exception, SIGQUIT, a fatal engine error or out of GPU memory): it serves nothing, "
            "and the speculation alerts have gone quiet with its stats lines. "
            "`specwatch doctor --log-file` names the cause.",
            keep_firing_for="5m",
        ),
        _alert(
            config,
            "SpecDecodeDraftTokensWasted",
            f"{sel(config, 'target:specwatch_accept_ratio:avg5m')}\nand ignoring (code, severity)\n"
            f"{wasted}\nand\n"
            f"{traffic}\n",
            "info",
            "Most proposed draft tokens are rejected.",
            "Only {{ $value | humanizePercentage }} of the draft tokens proposed on "
            f"{{{{ $labels.target }}}} ({node}) are accepted (rate derived by specwatch, "
            "5-minute average) with many draft tokens per step: verification work is wasted.",
            for_="10m",
        ),
        # No traffic guard: a node whose drafter adaptive has given up on still serves, and
        # the finding already rests on its recent decode windows.
        _alert(
            config,
            "SpecDecodeDrafterGivenUp",
            _finding(config, "adaptive_drafter_given_up") + "\n",
            "warning",
            "Adaptive speculation keeps drafting off: the drafter accepts nothing.",
            f"Adaptive speculation on {{{{ $labels.target }}}} ({node}) has had drafting off in "
            "nearly every recent decode window, and its short probes with drafting on accept "
            "almost nothing: the node pays for a drafter that does nothing.",
            for_="10m",
        ),
        _alert(
            config,
            "SpecDecodeStatsMissing",
            # The finding alone: it counts user prefills, never health probes' one-token ones.
            f"{_finding(config, 'decode_stats_not_logged')}\n",
            "warning",
            "Decode stats are missing from the server's log.",
            f"specwatch sees no decode stats for {{{{ $labels.target }}}} ({node}) although "
            "requests are served: the log level hides them or no decode line is written. Accept "
            "length and throughput alerts are blind for this target.",
            for_="10m",
        ),
        _requests_without_benefit(config),
        _alert(
            config,
            "SpecDecodeLogFormatUnrecognized",
            f"increase({sel(config, 'specwatch_log_unrecognized_stats_lines_total')}[10m]) > 5\n",
            "warning",
            "The server's stats lines no longer parse.",
            '{{ $value | printf "%.0f" }} lines from '
            f"{{{{ $labels.target }}}} ({node}) in the last 10 minutes looked like stats lines but "
            "could not be parsed: the log format changed, most likely with an upgrade of the "
            "serving engine.",
            for_="5m",
        ),
    ]


def _requests_without_benefit(config: MixinConfig) -> Rule:
    """A share of requests at accept length 1 while the windows look healthy (not below the
    algorithm's floor): the window average is weighted by tokens and hides them
    (docs/metrics.md, "Per-request acceptance")."""
    t = config.thresholds
    window = t.no_benefit_window
    accept = sel(config, "target:specwatch_accept_length:avg5m")
    floor = sel(config, "specwatch_accept_length_floor")
    return _alert(
        config,
        "SpecDecodeRequestsWithoutBenefit",
        f"{sel(config, NO_BENEFIT_SHARE)} > {t.no_benefit_share:g}\n"
        f"and\n{finished_requests(config, window)} >= {t.no_benefit_min_requests}\n"
        f"and\n{sel(config, TRAFFIC)} > 0\n"
        f"unless\n{accept} < {floor}\n",
        "warning",
        "A share of requests gets nothing from the drafter.",
        "{{ $value | humanizePercentage }} of the requests finished on "
        f"{{{{ $labels.target }}}} ({where(config)}) in the last {window} accepted no draft "
        f"token (accept length <= {NO_BENEFIT_BUCKET}) while its decode windows' average is "
        "not low for its algorithm: the window average hides a class of traffic the drafter "
        "does not fit.",
        for_=t.no_benefit_for,
    )


def exporter_alerts(config: MixinConfig) -> list[Rule]:
    node = where(config)
    up = sel(config, "up")
    scrape = sel(config, "specwatch_upstream_up", 'endpoint="metrics"')
    other = sel(config, "specwatch_upstream_up", 'endpoint!="metrics"')
    disabled = sel(config, "specwatch_finding", 'code="metrics_endpoint_disabled"')
    unfollowed = sel(config, "specwatch_log_source_up", 'reason!~"ok|waiting"')
    return [
        _alert(
            config,
            "SpecwatchUpstreamDown",
            f"(\n  {scrape} == 0\n  unless ignoring (endpoint, code, severity)\n  {disabled}\n)\n"
            f"or\n{other} == 0\n",
            "warning",
            "The serving engine's endpoint cannot be scraped.",
            f"specwatch at {node} has failed to scrape the {{{{ $labels.endpoint }}}} endpoint of "
            "{{ $labels.target }} for 10 minutes: the server is down or restarting, or its URL "
            "or token is wrong.",
            for_="10m",
        ),
        # A log path specwatch cannot follow: a directory, a FIFO or device, no permission, or
        # a file missing for longer than log_missing_grace. `waiting` (inside the grace) is not
        # a problem yet; the log is the source the collapse alerts rest on: no long wait.
        _alert(
            config,
            "SpecwatchLogNotFollowed",
            f"{unfollowed} == 0\n",
            "warning",
            "A configured server log is not followed.",
            f"specwatch at {node} has not followed {{{{ $labels.path }}}} of "
            "{{ $labels.target }} for 5 minutes (reason {{ $labels.reason }}): alerts that rest "
            "on the log are blind for this target.",
            for_="5m",
        ),
        # Two servers in one log: specwatch withholds the log's accept length, throughput
        # and verdict (the finding interleaved_servers), so nothing else can fire for them.
        _alert(
            config,
            "SpecwatchLogInterleaved",
            f"{_finding(config, 'interleaved_servers')}\n",
            "warning",
            "Two servers write to one log that specwatch follows.",
            f"specwatch at {node} reads the lines of two servers in the log of "
            "{{ $labels.target }}: their figures would be a mix, so no accept length, "
            "throughput or verdict is given for it, and the accept-length and speed alerts "
            "cannot fire for either server. Give each server a log file and a target of its own.",
            for_="5m",
        ),
        _alert(
            config,
            "SpecwatchDown",
            f"{up} == 0\n",
            "warning",
            "Prometheus cannot scrape specwatch.",
            f"The specwatch exporter at {node} (job {{{{ $labels.job }}}}) has been unreachable "
            "for 10 minutes: no speculative-decoding alert can fire for its node.",
            for_="10m",
            dashboard=("node", "job", "instance"),
        ),
        _alert(
            config,
            "SpecwatchAbsent",
            f"absent({up})\n",
            "critical",
            "Prometheus discovers no specwatch target.",
            "No target of job {{ $labels.job }} has been scraped for 15 minutes: no "
            "speculative-decoding alert can fire anywhere.",
            for_="15m",
            dashboard=("fleet", "job"),
        ),
    ]


def alert_groups(config: MixinConfig) -> list[Group]:
    return [
        {"name": "specwatch.speculative-decoding", "rules": speculation_alerts(config)},
        {"name": "specwatch.exporter", "rules": exporter_alerts(config)},
    ]


def header(config: MixinConfig, made_by: str = "make mixin") -> str:
    """The comment block heading the alert file: every threshold, and the rules all alerts obey."""
    t = config.thresholds
    collapsed, fraction = t.collapsed_accept_length, t.low_accept_fraction
    slower = f"{t.slower_than_baseline_speedup:g}"
    off_slower = f"{t.drafting_off_speedup:g}"
    share, window = f"{t.no_benefit_share:g}", t.no_benefit_window
    least = t.no_benefit_min_requests
    return f"""\
# specwatch alerting rules for speculative decoding. GENERATED by `{made_by}` from the mixin
# config (defaults: exporter/mixin_config.py); render your own instead of editing this file.
# The recording rules they read are in prometheus_rules.yaml; load both.
#
# Selector on every specwatch series: {config.selector}
#
# Thresholds (alerts/runbook.md repeats them per alert):
#
#   Per deployment, read from metrics the exporter exports (set them in its config):
#     specwatch_expected_accept_length   AcceptLengthLow fires below {t.low_accept_fraction} x this
#     specwatch_accept_length_floor      the drafter's algorithm's floor (NGRAM 1.2, MTP 1.4,
#                                        EAGLE 1.8, ...); AcceptLengthLow fires below it when
#                                        no expected length is set. Absent while accept length
#                                        is not judged (an unknown algorithm): then neither
#                                        accept-length alert fires
#     specwatch_speedup            throughput / baseline at the current running requests;
#                                        SlowerThanBaseline fires below {slower};
#                                        with drafting off DraftingOffBelowBaseline fires
#                                        below {off_slower} instead
#
#   From the mixin config's thresholds (doctor and report judge by the same numbers):
#     accept length collapsed            <= {collapsed} (1.00: no draft accepted), 5m mean
#     accept length low with expected    < {fraction} x specwatch_expected_accept_length
#     speedup ratio                      < {slower}, 5m mean
#     speedup ratio with drafting off    < {off_slower}, 5m mean (keeping speculation ready costs)
#     for: collapsed {t.collapsed_for}; low {t.low_accept_for}; slower (both) {t.slower_for}
#     requests without benefit           > {share} of the requests of the last {window} at
#                                        accept length <= {NO_BENEFIT_BUCKET}, at least {least},
#                                        windows not below the floor; for {t.no_benefit_for}
#
#   Fixed:
#     drafting off                       specwatch_drafting_off_ratio >= {OFF_SHARE:g}, or
#                                        specwatch_speculative_steps == 0 without that ratio
#     decode windows without CUDA graph  > 0.5 (50 %) of the windows over 10m
#     unrecognised stats lines           > 5 in 10m
#     decode line missing                the finding decode_stats_not_logged: 3 user prefills
#                                        (health probes' one-token ones left out) and no
#                                        decode line for 120 s, or a log level that hides them
#     accept length low                  the last 2 minutes' mean low too (no ticket from the
#                                        tail of a collapse the node recovered from)
#     for: CUDA graph, draft tokens, drafter given up, stats missing, upstream down,
#          specwatch down 10m;
#          log format, log not followed 5m; specwatch absent 15m; misconfigured at once.
#
# Robustness rules every alert follows:
#   - Traffic guard: window-based alerts require {TRAFFIC}
#     > 0. The exporter drops per-window gauges once the newest decode window is older than
#     stale_after (60 s), so an idle server has no such series and cannot page.
#   - Smoothing: alerts use 5m/10m averages or rates plus `for:`, never a single window.
#   - Accept length, not a logged `accept rate` (one engine's changed meaning in 2026);
#     where a ratio is needed it is specwatch_accept_ratio, derived by specwatch itself.
#   - keep_firing_for on the two critical speculation alerts: an exporter restart (a minute of
#     stale series) neither resolves nor re-pages them.
#   - Adaptive speculation: a window with drafting off (steps 0) exports no accept length,
#     and specwatch_accept_length_floor is absent while drafting is off in nearly every
#     recent window (the windows with it on are probes): such a node is judged by speed and
#     by SpecDecodeDrafterGivenUp, never as collapsed or low.
#   - Findings (specwatch_finding) that start before traffic (configuration read from the
#     startup log) fire without a traffic guard.
"""
