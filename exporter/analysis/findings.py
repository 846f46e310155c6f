"""Diagnosis: turn what was seen into named causes with a fix (docs/metrics.md, Findings).

:func:`evaluate` is a pure function over plain inputs (:class:`Observations`), so the daemon,
``specwatch doctor`` and ``specwatch report`` give the same verdict from the same evidence
(gathered from a stream of records by :class:`exporter.state.evidence.Evidence`).

Rules rest on accept *length*, not SGLang's logged ``accept rate``: the rate changed meaning in
April 2026 with the same text. Where a rate is needed, :func:`drafts_only_accept_rate` derives
one from the length and the configured number of draft tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import fmean, median

from exporter.analysis import algorithms
from exporter.analysis.algorithms import Standard, config_floor, config_standard, engine_fix
from exporter.analysis.breakeven import Assessment, advise, assess_positions
from exporter.analysis.ranks import RankAccept
from exporter.analysis.request_share import NO_BENEFIT_ACCEPT_LENGTH, RecentShare, logged_time
from exporter.analysis.thresholds import DEFAULT, MIN_WINDOWS, Thresholds
from exporter.engines import registry
from exporter.engines.ending import Ending
from exporter.engines.record import SPEC_STEPS, StatsRecord, drafting_off
from exporter.engines.server_config import ServerConfig

CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}

# Every finding code with its fixed severity.
SEVERITIES: dict[str, str] = {
    "server_crashed": CRITICAL,
    "server_failing": WARNING,
    "dp_rank_collapsed": CRITICAL,
    "dp_rank_accept_length_low": WARNING,
    "eagle3_draft_with_eagle_algorithm": CRITICAL,
    "cuda_graph_disabled": WARNING,
    "draft_tokens_excessive": WARNING,
    "decode_stats_not_logged": WARNING,
    "metrics_endpoint_disabled": INFO,
    "log_format_unrecognized": WARNING,
    "running_requests_capped": WARNING,
    "running_requests_saturated": INFO,
    "draft_positions_unprofitable": INFO,
    "algorithm_unknown": INFO,
    "adaptive_drafter_given_up": WARNING,
    "requests_without_benefit": WARNING,
}
# What each finding means and what to do, in a line: the dashboards show it beside the code
# (they are rendered from this table) and docs/metrics.md's Findings table says it at length.
EXPLANATIONS: dict[str, str] = {
    "server_crashed": (
        "The log shows the server died (scheduler exception, SIGQUIT, fatal engine error): "
        "nothing is served. Fix the cause its traceback names and restart it."
    ),
    "server_failing": (
        "A traceback and no decode window since: a dying server or one failed request. Read "
        "the traceback; the next decode window clears this."
    ),
    "dp_rank_collapsed": (
        "One DP rank's drafter accepts nothing while the others work: the node's mean hides "
        "it. Check that rank's draft weights and its log lines."
    ),
    "dp_rank_accept_length_low": (
        "One DP rank accepts far less than the other ranks: its requests decode slower. "
        "Check that rank's draft weights and its log lines."
    ),
    "eagle3_draft_with_eagle_algorithm": (
        "EAGLE-3 draft served with the EAGLE algorithm: the draft's layer fusion is skipped "
        "and accept length sits near 1. Restart with EAGLE3."
    ),
    "cuda_graph_disabled": (
        "Decode runs without CUDA graphs (disable_cuda_graph or eager windows). "
        "Remove --disable-cuda-graph or fix the capture error in the log."
    ),
    "draft_tokens_excessive": (
        "Many draft tokens per step while few are accepted: verification work is wasted. "
        "Lower --speculative-num-draft-tokens / num-steps."
    ),
    "draft_positions_unprofitable": (
        "Acceptance by draft position says fewer speculative tokens would be faster: set the "
        "number the finding names."
    ),
    "algorithm_unknown": (
        "No accept-length standard for this speculative algorithm: judged on speed only. "
        "Configure a baseline so the speed verdict applies."
    ),
    "decode_stats_not_logged": (
        "No decode stats lines while requests flow: the log level hides them or the "
        "stats interval is off. Log at info with a decode log interval."
    ),
    "metrics_endpoint_disabled": (
        "The server's /metrics endpoint is missing: start it with --enable-metrics."
    ),
    "log_format_unrecognized": (
        "Stats lines the parser cannot read: the log format drifted after an upgrade."
    ),
    "running_requests_capped": (
        "Running requests pinned at max_running_requests while requests queue "
        "(SGLang caps EAGLE at 48 when unset). Raise --max-running-requests."
    ),
    "running_requests_saturated": (
        "Saturated at the max_running_requests it was started with, requests queueing: a "
        "capacity question, not a fault of speculation."
    ),
    "adaptive_drafter_given_up": (
        "Adaptive speculation turned drafting off: the drafter accepts nothing at this load "
        "but still costs memory and probes. Fix the drafter or serve without it."
    ),
    "requests_without_benefit": (
        "A share of requests finish at accept length 1 while the windows' average hides it: "
        "find the traffic class they share and serve it without speculation."
    ),
}

EXCESSIVE_DRAFT_TOKENS = 8
LOW_DRAFTS_ONLY_RATE = 0.2
NO_GRAPH_SHARE = 0.5  # more than half the decode windows without CUDA graph
CAPPED_SHARE = 0.5  # at least half the windows at the cap with a queue
LOW_RANK_SHARE = 0.7  # a DP rank below this share of the other ranks' median accept length
SILENT_PREFILLS = 3  # real prefill batches with no decode line since
SILENT_SECONDS = 120.0
HIDING_LOG_LEVELS = frozenset({"warning", "error", "critical"})
# With drafting off in at least this share of recent windows (adaptive speculation), the few
# windows with drafting on are its probes: judged by whether they accept anything, never as a
# collapse or a low accept length.
OFF_SHARE = 0.5
# Probes that accept this little (accept length; EMA of accepted drafts per round) show a
# drafter adaptive has given up on.
GIVEN_UP_ACCEPT_LENGTH = 1.15
GIVEN_UP_EMA = 0.15


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosed cause: what was seen, why it matters, and what to do about it."""

    code: str
    summary: str
    seen: str
    why: str
    fix: str

    @property
    def severity(self) -> str:
        return SEVERITIES[self.code]

    def to_json_dict(self) -> dict[str, str]:
        return judgement_json(self)


# What a finding or a verdict says, in the order JSON output lists it.
JUDGEMENT_KEYS = ("code", "severity", "summary", "seen", "why", "fix")


def judgement_json(judgement: object) -> dict[str, str]:
    """A finding's or a verdict's fields for JSON output: the two share one shape on purpose,
    so a script reading ``doctor --json`` handles both alike."""
    return {key: str(getattr(judgement, key)) for key in JUDGEMENT_KEYS}


@dataclass(frozen=True, slots=True)
class DecodeSample:
    """The part of one decode stats window the rules look at."""

    accept_length: float | None = None
    cuda_graph: bool | None = None
    running: int | None = None
    queued: int | None = None
    accept_rate_by_position: tuple[float, ...] | None = None
    # Adaptive speculation had drafting off: no accept length, the window is plain decoding.
    drafting_off: bool = False
    throughput: float | None = None  # generated tokens per second

    @classmethod
    def from_record(cls, record: StatsRecord) -> DecodeSample:
        off = drafting_off(record)
        positions = (
            None if record.draft_counts is None else record.draft_counts.accept_rate_by_position
        )
        steps = record.extra.get(SPEC_STEPS)
        if positions and steps:  # a schedule drafted fewer here: the positions past it were not
            positions = positions[:steps]
        return cls(
            None if off else record.accept_length,
            record.cuda_graph,
            record.running_requests,
            record.queued_requests,
            positions,
            off,
            record.gen_throughput,
        )


@dataclass(frozen=True, slots=True)
class Observations:
    """Everything the rules need, as plain values (no I/O, no clocks).

    ``metrics_endpoint`` is ``None`` when no ``/metrics`` URL was checked, else ``"ok"``,
    ``"empty"`` (answers without SGLang families), ``"missing"`` (404) or ``"down"``.
    """

    config: ServerConfig = field(default_factory=ServerConfig)
    windows: tuple[DecodeSample, ...] = ()
    cuda_graph_share: float | None = None
    log_watched: bool = False
    prefills_without_decode: int = 0
    seconds_without_decode: float = 0.0
    upstream_busy: bool = False  # /metrics shows running requests
    stats_lines: int = 0
    unrecognized_lines: int = 0
    metrics_endpoint: str | None = None
    speedup: float | None = None  # throughput over the baseline at the same load, if configured
    # Mean accept length of the whole run when it was read whole (doctor, report); the daemon
    # leaves it unset and judges its recent windows.
    accept_length: float | None = None
    ending: Ending | None = None  # how the run ended, when its log says so
    # Finished requests with speculation figures: recent ones (daemon), or the run's (report).
    requests: RecentShare | None = None
    ranks: tuple[RankAccept, ...] = ()  # accept length by DP rank, where ranks log their own
    thresholds: Thresholds = DEFAULT  # the alert rules' (a --mixin-config may change them)


def drafts_only_accept_rate(
    accept_length: float | None, num_draft_tokens: int | None
) -> float | None:
    """Accepted draft tokens per draft token proposed: ``(len - 1) / (N - 1)``.

    ``accept len`` counts the bonus token the target always yields, so ``len - 1`` drafts were
    accepted out of ``N - 1`` proposed (the tree's root is the last verified token). This is
    the post-April-2026 SGLang definition; computing it here keeps one meaning across versions.
    """
    if accept_length is None or num_draft_tokens is None or num_draft_tokens < 2:
        return None
    return max(0.0, (accept_length - 1.0) / (num_draft_tokens - 1))


def window_accept_rate(record: StatsRecord, num_draft_tokens: int | None) -> float | None:
    """Accepted per proposed draft token: exact where the window counts tokens (vLLM),
    else derived from the accept length."""
    counts = record.draft_counts
    if counts is not None and counts.draft_tokens:
        return counts.accepted_tokens / counts.draft_tokens
    return drafts_only_accept_rate(record.accept_length, num_draft_tokens)


def evaluate(obs: Observations) -> list[Finding]:
    """All findings that hold for ``obs``, most severe first."""
    rules = (
        _server_ended,
        _dp_rank_accept_length,
        _eagle3_draft_with_eagle_algorithm,
        _cuda_graph_disabled,
        _draft_tokens_excessive,
        _decode_stats_not_logged,
        _log_format_unrecognized,
        _running_requests_capped,
        _metrics_endpoint_disabled,
        _draft_positions_unprofitable,
        _algorithm_unknown,
        _adaptive_drafter_given_up,
        _requests_without_benefit,
    )
    found = [finding for rule in rules if (finding := rule(obs)) is not None]
    return sorted(found, key=lambda f: SEVERITY_ORDER[f.severity])


# What to do about each cause ``engines.ending`` names; anything else: read the traceback.
_CRASH_FIXES = {
    "CUDA graph capture failed: out of GPU memory at start-up": (
        "Leave the CUDA graphs room: lower SGLang's --mem-fraction-static (0.8, then 0.7) or "
        "--cuda-graph-max-bs, or vLLM's --gpu-memory-utilization; then restart the server."
    ),
    "CUDA out of memory": (
        "Leave the GPU more headroom: lower SGLang's --mem-fraction-static or "
        "--max-running-requests, or vLLM's --gpu-memory-utilization or --max-num-seqs; then "
        "restart the server."
    ),
    "NCCL error (GPU communication)": (
        "Check the GPUs and their links (nvidia-smi, NCCL_DEBUG=INFO names the failing rank), "
        "then restart the server."
    ),
}


def ending_summary(end: Ending, served: bool) -> str:
    """How a server run ended, in one phrase: the crash finding's summary, and what an
    earlier run's line says when a restart followed."""
    if not _crashed(end):
        return "The server logged a traceback and no decode window since"
    when = f" at {end.time.replace('T', ' ')}" if end.time else ""
    cause = f": {end.cause}" if end.cause else ""
    return f"{'The server crashed' if served else 'The server failed to start'}{when}{cause}"


def _crashed(end: Ending) -> bool:
    return end.final or end.cause in _CRASH_FIXES


def _server_ended(obs: Observations) -> Finding | None:
    """The log says the server died, or logged a traceback and no decode window since."""
    end = obs.ending
    if end is None:
        return None
    crashed = _crashed(end)
    when = f" at {end.time.replace('T', ' ')}" if end.time else ""
    cause = f": {end.cause}" if end.cause else ""
    served = (
        f"after {len(obs.windows)} recent decode windows"
        if obs.windows
        else "before any decode window of this run (it failed at start-up)"
    )
    summary = ending_summary(end, bool(obs.windows))
    if crashed:
        why = (
            "A dead server serves nothing and writes no stats lines: every alert that rests on "
            "them goes quiet just when the node is down."
        )
    else:
        why = (
            "A traceback with no window after it is how a dying server looks from its log; one "
            "failed request looks the same until the next decode window shows the node serving."
        )
    return Finding(
        code="server_crashed" if crashed else "server_failing",
        summary=summary,
        seen=f"{end.kind}{when}{cause}, {served}.",
        why=why,
        fix=_CRASH_FIXES.get(end.cause or "")
        or (
            "Read the traceback just before this point in the log, fix its cause and restart "
            "the server."
        ),
    )


def _dp_rank_accept_length(obs: Observations) -> Finding | None:
    """DP ranks whose drafter collapsed, or accepts far less than the other ranks' drafters,
    named one by one: the node's mean hides one bad rank among healthy ones."""
    ranks = [rank for rank in obs.ranks if rank.windows >= MIN_WINDOWS]
    if len(ranks) < 2:
        return None
    limit = obs.thresholds.collapsed_accept_length
    collapsed = [rank for rank in ranks if rank.accept_length <= limit]
    if collapsed and len(collapsed) < len(ranks):
        bad, code = collapsed, "dp_rank_collapsed"
        summary = f"DP rank{_plural(bad)} {_numbers(bad)} collapsed: no draft token accepted"
    else:
        bad = [rank for rank in ranks if rank.accept_length < LOW_RANK_SHARE * _others(rank, ranks)]
        if not bad or len(bad) == len(ranks):
            return None
        code = "dp_rank_accept_length_low"
        summary = f"DP rank{_plural(bad)} {_numbers(bad)} accept{'s' if len(bad) == 1 else ''} "
        summary += "far less than the other ranks"
    good = [rank for rank in ranks if rank not in bad]
    return Finding(
        code=code,
        summary=summary,
        seen=(
            "; ".join(
                f"DP rank {r.dp_rank}: accept length {r.accept_length:.2f} over {r.windows} windows"
                for r in bad
            )
            + f"; the other {len(good)} rank{_plural(good)}: "
            + ", ".join(f"{r.accept_length:.2f}" for r in good)
            + "."
        ),
        why=(
            "Each DP rank drafts for its own requests; one rank's bad drafter slows every "
            "request it serves while the node's mean accept length barely moves."
        ),
        fix=(
            f"Look at the log lines of DP rank {bad[0].dp_rank} (its [DP{bad[0].dp_rank} ...] "
            "prefix) for errors or a reload; restart the server if the rank does not recover, "
            "and check that every rank loads the same draft."
        ),
    )


def _others(rank: RankAccept, ranks: Sequence[RankAccept]) -> float:
    """The median accept length of the ranks other than ``rank``."""
    return float(median(r.accept_length for r in ranks if r is not rank))


def _plural(items: Sequence[object]) -> str:
    return "" if len(items) == 1 else "s"


def _numbers(ranks: Sequence[RankAccept]) -> str:
    return ", ".join(str(rank.dp_rank) for rank in ranks)


def _mean_accept_length(windows: Sequence[DecodeSample]) -> float | None:
    lengths = [w.accept_length for w in windows if w.accept_length is not None]
    return fmean(lengths) if lengths else None


_EAGLE3_NAME = re.compile(r"eagle[-_.]?3", re.IGNORECASE)


def eagle3_draft_evidence(config: ServerConfig) -> str | None:
    """Why the draft is believed to be an EAGLE-3 model, or ``None`` if nothing says so.

    The loaded class (``Load weight end ... type=``) or the draft's ``config.json`` are proof.
    ``/server_info`` carries neither, only the draft path; a path naming EAGLE-3 is used as
    evidence then, and said so, because it is all a scrape-only deployment has.
    """
    if (config.draft_architecture or "").endswith("Eagle3"):
        return f"the draft loaded as type={config.draft_architecture}"
    if config.draft_has_eagle_config:
        return "the draft's config.json has an eagle_config (EAGLE-3 layer fusion)"
    if config.draft_architecture is None and _EAGLE3_NAME.search(config.draft_model_path or ""):
        return f"the draft path '{config.draft_model_path}' names an EAGLE-3 model"
    return None


def _eagle3_draft_with_eagle_algorithm(obs: Observations) -> Finding | None:
    config = obs.config
    evidence = eagle3_draft_evidence(config)
    if config.algorithm != "EAGLE" or evidence is None:
        return None
    mean = _mean_accept_length(obs.windows)
    measured = f"; accept length so far {mean:.2f}" if mean is not None else ""
    return Finding(
        code="eagle3_draft_with_eagle_algorithm",
        summary="EAGLE-3 draft served with the EAGLE algorithm",
        seen=f"speculative_algorithm='EAGLE' while {evidence}{measured}.",
        why=(
            "Only the algorithm string EAGLE3 makes the target capture the three hidden layers "
            "an EAGLE-3 draft fuses; under EAGLE that fusion is skipped silently, drafts are "
            "garbage and accept length sits at 1.00, so every round costs a draft pass for nothing."
        ),
        fix=(
            "Restart the server with the EAGLE-3 algorithm, same draft and flags otherwise: "
            f"{engine_fix('eagle3_algorithm')}."
        ),
    )


def _cuda_graph_disabled(obs: Observations) -> Finding | None:
    config = obs.config
    if config.disable_cuda_graph:
        seen, fix = graphs_off_by_configuration(config)
    else:
        share = _no_graph_share(obs)
        if share is None or share <= NO_GRAPH_SHARE:
            return None
        seen = f"{share:.0%} of recent decode windows ran without CUDA graph{_batch_note(obs)}."
        fix = (
            "Raise --cuda-graph-max-bs to at least the usual number of running requests "
            "(larger batches run eagerly), and check the capture lines at startup succeeded."
        )
    return Finding(
        code="cuda_graph_disabled",
        summary="Decode runs without CUDA graphs",
        seen=seen,
        why=(
            "Speculative decoding launches many small kernels per round (draft steps plus "
            "verify); without CUDA graphs the launch overhead can eat the whole speed-up."
        ),
        fix=fix,
    )


def graphs_off_by_configuration(config: ServerConfig) -> tuple[str, str]:
    """What the configuration says and the restart that turns graphs on, in the flags of the
    engine that logged it (``cuda_graphs_off`` and ``cuda_graphs_on`` among its fixes)."""
    engine = registry.BY_NAME.get(config.engine or "")
    fixes = engine.fixes if engine is not None else {}
    if "cuda_graphs_off" not in fixes:  # a configuration without an engine is SGLang's
        fixes = registry.engine("sglang").fixes
    return f"{fixes['cuda_graphs_off']}.", f"Restart {fixes['cuda_graphs_on']}."


def _no_graph_share(obs: Observations) -> float | None:
    """Share of decode windows without CUDA graph: from log windows, else from /metrics."""
    flags = [w.cuda_graph for w in obs.windows if w.cuda_graph is not None]
    if len(flags) >= MIN_WINDOWS:
        return flags.count(False) / len(flags)
    if obs.cuda_graph_share is not None:
        return 1.0 - obs.cuda_graph_share
    return None


def _batch_note(obs: Observations) -> str:
    cap = obs.config.cuda_graph_max_bs
    running = [w.running for w in obs.windows if w.running is not None]
    if cap is not None and running and max(running) > cap:
        return f" (up to {max(running)} running requests, cuda_graph_max_bs={cap})"
    return ""


def _draft_tokens_excessive(obs: Observations) -> Finding | None:
    """Many draft tokens per round while few of them are accepted.

    Break-even arithmetic: a round proposes ``N - 1`` draft tokens, verifies ``N`` positions in
    one target pass and yields ``L`` tokens (accept length). Against plain decoding (one token
    per target pass) the round pays ``num_steps`` draft passes plus the verify pass's extra
    width; it wins only while ``L`` exceeds that cost in target-pass units. The drafts-only rate
    ``r = (L - 1) / (N - 1)`` is the share of that extra width that turns into tokens. Incident
    3: ``N = 16``, ``L = 2.5`` gives ``r = 0.10``: 13.5 of 15 proposed tokens are verified and
    thrown away every round, and at batch sizes where the verify pass is no longer free
    (memory-bound) that waste exceeds the 1.5 extra tokens gained. With ``r < 0.2`` a smaller
    tree (4-6 draft tokens) keeps most of ``L`` at a fraction of the verify cost.
    """
    tokens = obs.config.num_draft_tokens
    if tokens is None or tokens < EXCESSIVE_DRAFT_TOKENS or _position_profile(obs.windows):
        return None  # measured per-position acceptance has its own, sharper finding
    standard = config_standard(obs.config) or algorithms.DEFAULT
    if not standard.has_draft_model:
        return None  # a lookup drafts for free: wide trees of rarely accepted tokens are its way
    if obs.config.adaptive:
        return None  # no one count runs: doctor and report advise a schedule by load instead
    lengths = [w.accept_length for w in obs.windows if w.accept_length is not None]
    if len(lengths) < MIN_WINDOWS:
        return None
    mean = obs.accept_length if obs.accept_length is not None else fmean(lengths)
    rate = drafts_only_accept_rate(mean, tokens)
    advice = advise(mean, tokens, obs.speedup)
    if rate is None or rate >= LOW_DRAFTS_ONLY_RATE or advice is None:
        return None
    return Finding(
        code="draft_tokens_excessive",
        summary=f"{tokens} draft tokens per round, few accepted",
        seen=(
            f"speculative_num_draft_tokens={tokens}, mean accept length {mean:.2f}: "
            f"{rate:.0%} of proposed draft tokens accepted ({mean - 1:.1f} of {tokens - 1})"
            f"{_speedup_note(obs.speedup)}."
        ),
        why=(
            "Every proposed token is verified by the target; rejected ones are pure cost. At "
            "this acceptance the wasted verify width outweighs the extra tokens gained."
        ),
        fix=_draft_tokens_fix(tokens, advice, standard),
    )


def _position_profile(windows: Sequence[DecodeSample]) -> tuple[float, ...] | None:
    """Mean acceptance by draft position over recent windows of the newest draft length."""
    profiles = [w.accept_rate_by_position for w in windows if w.accept_rate_by_position]
    if len(profiles) < MIN_WINDOWS:
        return None
    length = len(profiles[-1])
    same = [profile for profile in profiles if len(profile) == length]
    if len(same) < MIN_WINDOWS:
        return None
    return tuple(fmean(profile[i] for profile in same) for i in range(length))


def _draft_positions_unprofitable(obs: Observations) -> Finding | None:
    """Draft positions whose measured acceptance no longer pays for drafting them.

    Where the engine logs acceptance by position (vLLM), the break-even model needs no fitted
    acceptance curve: position ``i`` earns ``rate[i]`` tokens per round for ``cost`` steps.
    """
    rates = _position_profile(obs.windows)
    if rates is None or len(rates) < 2:
        return None
    speedup = obs.speedup if obs.speedup and obs.speedup > 0 else None
    advice = assess_positions(rates, speedup)
    drafted = len(rates)
    if advice.suggested >= drafted:
        return None
    basis = "measured speedup" if advice.cost_measured else "assumed draft cost"
    profile = ", ".join(f"{rate:.2f}" for rate in rates)
    if advice.suggested == 0:
        fix = (
            "No number of speculative tokens is expected to beat plain decoding with this "
            f"drafter (break-even estimate from the {basis}): fix or retrain the drafter, or "
            "serve without speculation."
        )
    else:
        setting = engine_fix("speculative_tokens")
        if obs.config.schedule is not None:  # vLLM drafts by batch size: this load's entry
            setting = "the num_speculative_tokens_per_batch_size entry of the current load"
        fix = (
            f"Set the number of speculative tokens to {advice.suggested} ({setting}): "
            f"estimated {advice.expected_speedup:.2f}x plain decoding instead of "
            f"{advice.current_speedup:.2f}x (break-even estimate from the {basis})."
        )
    return Finding(
        code="draft_positions_unprofitable",
        summary=(
            f"More than {advice.suggested} speculative tokens per round do not pay"
            if advice.suggested
            else "No speculative token pays for itself"
        ),
        seen=(
            f"acceptance by draft position, first to last: {profile} ({drafted} speculative "
            f"tokens); a drafted token costs about {advice.cost_per_draft_token:.2f} of a "
            f"decode step{_speedup_note(obs.speedup)}."
        ),
        why=(
            "Every drafted token is proposed and verified whether or not it is accepted. A "
            "position adds its acceptance in tokens to a round but its cost to every round: "
            "past the suggested count the positions are accepted too rarely to pay for it."
        ),
        fix=fix,
    )


def _speedup_note(speedup: float | None) -> str:
    return f", {speedup:.2f}x the baseline" if speedup is not None else ""


def _draft_tokens_fix(tokens: int, advice: Assessment, standard: Standard) -> str:
    """Advice sized by the break-even estimate (``analysis.breakeven``), not a fixed number,
    in the algorithm's own settings (an MTP head has steps, an EAGLE tree draft tokens).

    With a baseline the estimate rests on the measured cost of a round; without one on an
    assumed draft cost, which the text says.
    """
    basis = "measured speedup" if advice.cost_measured else "assumed draft cost"
    best = advice.suggested_num_draft_tokens
    if best == 1:
        return (
            "No draft-token count is expected to beat plain decoding with this drafter "
            f"(break-even estimate from the {basis}): train the draft further, or serve "
            "without speculation until it accepts more."
        )
    if best < tokens:
        fewer = standard.fewer_tokens.format(count=best, steps=best - 1)
        return (
            f"{fewer} (break-even estimate from the {basis}: "
            f"{advice.expected_speedup:.2f}x plain decoding), or train the draft further "
            "before widening the tree."
        )
    return (
        f"The {basis} says {tokens} draft tokens still pay for themselves; raise acceptance "
        "by training the draft further rather than widening the tree."
    )


def _algorithm_unknown(obs: Observations) -> Finding | None:
    algorithm = obs.config.algorithm
    if algorithm is None or config_standard(obs.config) is not None:
        return None
    return Finding(
        code="algorithm_unknown",
        summary=f"No accept-length standard for {algorithm[:40]}: judged on speed only",
        seen=f"speculative algorithm '{algorithm[:40]}', which specwatch has no standard for.",
        why=(
            "What counts as a low or collapsed accept length depends on the algorithm; "
            "specwatch judges only what it knows, so this node gets no accept-length verdict "
            "or alert, only the speed verdict against the baseline."
        ),
        fix=(
            "Configure a baseline (--baseline-curve) so the speed verdict applies; compare "
            "the exported accept length with the algorithm's published one by hand."
        ),
    )


def _decode_stats_not_logged(obs: Observations) -> Finding | None:
    level = (obs.config.log_level or "").lower()
    if level in HIDING_LOG_LEVELS:
        seen = f"log_level='{level}': SGLang logs decode stats at INFO, so none are written."
    elif _requests_without_decode(obs):
        interval = obs.config.decode_log_interval
        note = f" (decode_log_interval={interval})" if interval is not None else ""
        traffic = (
            f"{obs.prefills_without_decode} prefill batches"
            if obs.prefills_without_decode >= SILENT_PREFILLS
            else "/metrics shows running requests"
        )
        seen = (
            f"{traffic} and no decode stats line in the log for "
            f"{obs.seconds_without_decode:.0f} s{note}."
        )
    else:
        return None
    return Finding(
        code="decode_stats_not_logged",
        summary="Decode stats are not in the log",
        seen=seen,
        why=(
            "Accept length, CUDA-graph use and throughput per window come from the decode "
            "stats lines; without them specwatch cannot tell whether speculation helps."
        ),
        fix=f"Have the server log its stats: {engine_fix('log_stats')}.",
    )


def _requests_without_decode(obs: Observations) -> bool:
    """Requests flow (prefill lines, or running requests upstream) yet no decode line comes.

    A decode line is due every ``decode_log_interval`` (40) decode rounds, a second or two
    under load, so minutes of traffic without one means they are filtered or disabled.
    """
    busy = obs.prefills_without_decode >= SILENT_PREFILLS or obs.upstream_busy
    return obs.log_watched and busy and obs.seconds_without_decode >= SILENT_SECONDS


def _log_format_unrecognized(obs: Observations) -> Finding | None:
    if obs.unrecognized_lines <= 0:
        return None
    return Finding(
        code="log_format_unrecognized",
        summary="Stats lines in an unknown format",
        seen=(
            f"{obs.unrecognized_lines} of the last {obs.stats_lines} stats-like lines could "
            "not be parsed."
        ),
        why=(
            "The log format drifted (usually an SGLang upgrade); windows from those lines are "
            "missing, so gauges and alerts may be blind."
        ),
        fix=(
            "Upgrade specwatch, or report the line with the SGLang version; meanwhile a "
            "custom_rules entry in the config can extract the fields you need."
        ),
    )


def _running_requests_capped(obs: Observations) -> Finding | None:
    """Running requests pinned at the cap with a queue: a warning when the engine chose the
    cap (SGLang's 48 for EAGLE), information when the operator set it (the node is saturated
    at the load it was sized for, and the flag they already set is no fix)."""
    cap = obs.config.max_running_requests
    # (running, queued) of the windows that logged a running count; queued absent counts as 0.
    windows = [w for w in obs.windows if w.running is not None]
    if cap is None or len(windows) < MIN_WINDOWS:
        return None
    pinned = [w for w in windows if (w.running or 0) >= cap and (w.queued or 0) > 0]
    if len(pinned) / len(windows) < CAPPED_SHARE:
        return None
    seen = (
        f"{len(pinned)} of {len(windows)} recent decode windows at {cap} running requests "
        f"with up to {max(w.queued or 0 for w in pinned)} queued"
    )
    if obs.config.max_running_requests_set:
        return Finding(
            code="running_requests_saturated",
            summary=f"Saturated at the max_running_requests={cap} it was started with",
            seen=f"{seen}{_throughput_note(pinned)}{_speedup_note(obs.speedup)}.",
            why=(
                "The node serves as many requests as it was configured for and queues the "
                "rest: a capacity question, not a fault of speculation."
            ),
            fix=(
                "Nothing to fix in speculation; add capacity, or raise --max-running-requests "
                "(and --cuda-graph-max-bs) if memory allows."
            ),
        )
    return Finding(
        code="running_requests_capped",
        summary=f"Running requests pinned at max_running_requests={cap}",
        seen=f"{seen}{_speedup_note(obs.speedup)}.",
        why=(
            "Requests wait in the queue while the GPU could batch more; SGLang lowers the cap "
            "to 48 for EAGLE when --max-running-requests is unset, which can cost more "
            "throughput than speculation gains."
        ),
        fix=(
            "Set --max-running-requests explicitly (and --cuda-graph-max-bs to match) if memory "
            "allows, or compare against a non-speculative server at the same concurrency."
        ),
    )


def _throughput_note(pinned: Sequence[DecodeSample]) -> str:
    """The mean throughput the saturated windows reached: what the configured cap delivers."""
    reached = [w.throughput for w in pinned if w.throughput is not None]
    return f", at {sum(reached) / len(reached):.0f} tok/s" if reached else ""


def _metrics_endpoint_disabled(obs: Observations) -> Finding | None:
    if obs.config.enable_metrics is False:
        seen = "enable_metrics=False in the server arguments."
    elif obs.metrics_endpoint in ("missing", "empty"):
        seen = f"/metrics is {obs.metrics_endpoint}."
    else:
        return None
    return Finding(
        code="metrics_endpoint_disabled",
        summary="SGLang's /metrics endpoint is off",
        seen=seen,
        why=(
            "specwatch still works from the log, but SGLang's own gauges (queue, CUDA-graph "
            "pass counters) are a second source when the log is quiet or rotated away."
        ),
        fix="Restart the server with --enable-metrics.",
    )


def drafting_off_share(windows: Sequence[DecodeSample]) -> float | None:
    """Share of ``windows`` with drafting off (adaptive), or ``None`` for too few windows."""
    if len(windows) < MIN_WINDOWS:
        return None
    return sum(w.drafting_off for w in windows) / len(windows)


def _adaptive_drafter_given_up(obs: Observations) -> Finding | None:
    """Adaptive speculation keeps drafting off, and its probes accept almost nothing.

    Drafting off at high concurrency is adaptive working as designed; off in nearly every
    window, with the short steps > 0 probes accepting nothing, is a drafter that is paid for
    (its memory, its graphs, every probe) and does nothing.
    """
    share = drafting_off_share(obs.windows)
    if not obs.config.adaptive or share is None or share < OFF_SHARE:
        return None
    probes = [w.accept_length for w in obs.windows if w.accept_length is not None]
    probe_length = fmean(probes) if probes else None
    ema = obs.config.off_ema_accept
    if probe_length is None and ema is None:
        return None  # no probe seen: a node at a load where adaptive never drafts
    if (probe_length or 1.0) > GIVEN_UP_ACCEPT_LENGTH or (ema or 0.0) > GIVEN_UP_EMA:
        return None
    running = [w.running for w in obs.windows if w.running is not None]
    spread = f"{min(running)}-{max(running)}" if running and min(running) < max(running) else ""
    load = f" at {spread or running[0]} running requests" if running else ""
    evidence = []
    if probe_length is not None:
        evidence.append(f"its {len(probes)} windows with drafting on averaged {probe_length:.2f}")
    if ema is not None:
        evidence.append(f"ema_accept_len={ema:.2f} when it last turned drafting off")
    off = sum(w.drafting_off for w in obs.windows)
    return Finding(
        code="adaptive_drafter_given_up",
        summary="Adaptive speculation has given up on the drafter",
        seen=(
            f"drafting off (adaptive) in {off} of {len(obs.windows)} recent decode "
            f"windows{load}; {'; '.join(evidence)}."
        ),
        why=(
            "Adaptive speculation turns drafting off when drafts are rejected: the node runs "
            "at plain-decoding speed, but still pays for the drafter's memory and graphs and "
            "for every probe that finds it still accepts nothing."
        ),
        fix=(
            "Fix the drafter (it must be trained for this target model and version; an "
            "EAGLE-3 draft needs the EAGLE3 algorithm), or restart without speculation to "
            "free what it holds."
        ),
    )


def _requests_without_benefit(obs: Observations) -> Finding | None:
    """A share of requests at accept length 1 that the window average hides."""
    share = obs.requests
    average = obs.accept_length
    if average is None:
        average = _mean_accept_length(obs.windows)
    floor = config_floor(obs.config)  # None: accept length is not judged, nor low
    if (
        share is None
        or share.requests < DEFAULT.no_benefit_min_requests
        or share.share <= DEFAULT.no_benefit_share
        or average is None
        or (floor is not None and average < floor)
    ):
        return None
    span = ""
    if share.first and share.last:
        span = f" between {logged_time(share.first)} and {logged_time(share.last)}"
    return Finding(
        code="requests_without_benefit",
        summary=f"{share.share:.0%} of requests get nothing from the drafter",
        seen=(
            f"{share.no_benefit} of {share.requests} speculative requests ({share.share:.0%}) "
            f"finished at accept length <= {NO_BENEFIT_ACCEPT_LENGTH}{span}, while decode "
            f"windows averaged {average:.2f}.{_worst_class(share)}"
        ),
        why=(
            "A window's accept length averages over all its requests, weighted by tokens, so "
            "it hides a class of traffic the drafter does not fit. Those requests pay for "
            "drafting and verification and gain nothing: they run slower than without "
            "speculation."
        ),
        fix=(
            "Find what those requests share: one tenant or task in the traffic mix, a LoRA "
            "adapter the drafter was not trained with, a language, a high sampling temperature, "
            "structured output (JSON schema, grammar). Set request_label_header to split the "
            "histogram by a logged header, then serve that class without speculation or with a "
            "drafter trained on it."
        ),
    )


def _worst_class(share: RecentShare) -> str:
    if share.worst_class is None:
        return ""
    return (
        f" Traffic class {share.worst_class} has the largest share: "
        f"{share.worst_class_share:.0%} of its requests since the start."
    )
