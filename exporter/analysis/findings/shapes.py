"""What every finding rule shares: the shape of a finding and of the evidence it rests on,
the codes' severities and explanations, and the accept-rate and note helpers several rules
use. The rules import it; it imports none of them, so there is no cycle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import fmean

from exporter.analysis.ranks import RankAccept
from exporter.analysis.request_share import RecentShare
from exporter.analysis.thresholds import DEFAULT, Thresholds
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
    "drafting_off_below_baseline": WARNING,
    "interleaved_servers": WARNING,
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
        "Decode runs without CUDA graphs (turned off in the server's arguments, or eager "
        "windows). Restart with graphs on, or fix the capture error in the log."
    ),
    "draft_tokens_excessive": (
        "Many draft tokens per step while few are accepted: verification work is wasted. "
        "Draft fewer tokens a round."
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
        "The server's /metrics endpoint is missing: its engine serves one only when started "
        "with metrics on. Restart it with the flag the finding names."
    ),
    "log_format_unrecognized": (
        "Stats lines the parser cannot read: the log format drifted after an upgrade."
    ),
    "running_requests_capped": (
        "Running requests pinned at a cap the engine chose itself while requests queue. "
        "Set the cap explicitly, higher, if memory allows."
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
    "drafting_off_below_baseline": (
        "Drafting is off at this load (by design) and the node runs well below the baseline: "
        "keeping speculation ready costs too much. Apply the engine's remedy it names."
    ),
    "interleaved_servers": (
        "Two servers write to one log file: its figures are a mix of both, so no accept "
        "length or verdict is given for it. Give each server its own log and target."
    ),
}


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
class Stream:
    """The stats lines of one engine among a log's recent ones, and their accept lengths."""

    engine: str
    lines: int  # stats lines among the recent ones
    windows: int  # decode windows with an accept length among them
    accept_low: float | None = None
    accept_high: float | None = None
    accept_mean: float | None = None


@dataclass(frozen=True, slots=True)
class Interleaving:
    """One log file carrying two servers' streams (``state.streams``), and what showed it.

    ``sign`` is ``engines`` (two engines' own stats lines alternate); or, after two starts of
    one engine with no end logged between them, ``serving_while_starting`` (decode lines went
    on while the later one started), ``both_ready`` (both said they were ready) or
    ``alternating_levels`` (since the later start, one rank's windows take turns between two
    accept-length levels).
    """

    sign: str
    streams: tuple[Stream, ...]  # by engine, the most lines first
    recent: int  # the recent stats lines the streams were counted in
    starts: tuple[tuple[str, str | None], ...] = ()  # (engine, logged time) of open starts


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
    # By the log's own clock: from the last decode line (or the start of watching) to the
    # last line read, so an old log caught up on has not been silent for as long as it is old.
    seconds_without_decode: float = 0.0
    # Watched time (the wall clock, from the later of the last decode line and the start of
    # watching), what running requests upstream are set against.
    seconds_watched_without_decode: float = 0.0
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
    interleaving: Interleaving | None = None  # two servers' lines in one log, when seen


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


def mean_accept_length(windows: Sequence[DecodeSample]) -> float | None:
    lengths = [w.accept_length for w in windows if w.accept_length is not None]
    return fmean(lengths) if lengths else None


def speedup_note(speedup: float | None) -> str:
    return f", {speedup:.2f}x the baseline" if speedup is not None else ""
