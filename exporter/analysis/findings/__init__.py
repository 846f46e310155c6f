"""Diagnosis: turn what was seen into named causes with a fix (docs/metrics.md, Findings).

:func:`evaluate` is a pure function over plain inputs (:class:`Observations`), so the daemon,
``specwatch doctor`` and ``specwatch report`` give the same verdict from the same evidence
(gathered from a stream of records by :class:`exporter.state.evidence.Evidence`).

Rules rest on accept *length*, not SGLang's logged ``accept rate``: the rate changed meaning in
April 2026 with the same text. Where a rate is needed, :func:`drafts_only_accept_rate` derives
one from the length and the configured number of draft tokens.

The shapes live in ``shapes``; the rules in modules named for their concern: ``server_life``,
``acceptance``, ``configuration``, ``draft_tokens``. This module gathers them and is where
the rest of specwatch imports findings from."""

from __future__ import annotations

from exporter.analysis.findings.acceptance import (
    OFF_SHARE,
    adaptive_drafter_given_up,
    algorithm_unknown,
    dp_rank_accept_length,
    drafting_off_share,
    requests_without_benefit,
)
from exporter.analysis.findings.configuration import (
    cuda_graph_disabled,
    eagle3_draft_with_eagle_algorithm,
    running_requests_capped,
)
from exporter.analysis.findings.draft_tokens import (
    draft_positions_unprofitable,
    draft_tokens_excessive,
)
from exporter.analysis.findings.server_life import (
    decode_stats_not_logged,
    ending_summary,
    interleaved_servers,
    log_format_unrecognized,
    metrics_endpoint_disabled,
    server_ended,
)
from exporter.analysis.findings.shapes import (
    CRITICAL,
    EXPLANATIONS,
    INFO,
    SEVERITIES,
    SEVERITY_ORDER,
    WARNING,
    DecodeSample,
    Finding,
    Interleaving,
    Observations,
    Stream,
    drafts_only_accept_rate,
    judgement_json,
    window_accept_rate,
)
from exporter.analysis.findings.speed import (
    DRAFTING_OFF_SLOW,
    drafting_off_below_baseline,
    slow_with_drafting_off,
)

__all__ = [
    "CRITICAL",
    "DRAFTING_OFF_SLOW",
    "EXPLANATIONS",
    "INFO",
    "OFF_SHARE",
    "SEVERITIES",
    "SEVERITY_ORDER",
    "WARNING",
    "DecodeSample",
    "Finding",
    "Interleaving",
    "Observations",
    "Stream",
    "drafting_off_below_baseline",
    "drafting_off_share",
    "drafts_only_accept_rate",
    "ending_summary",
    "evaluate",
    "judgement_json",
    "slow_with_drafting_off",
    "window_accept_rate",
]


def evaluate(obs: Observations) -> list[Finding]:
    """All findings that hold for ``obs``, most severe first.

    A log carrying two servers' lines (``obs.interleaving``) is judged on nothing the two
    mixed: its windows and its start-up lines are half one server's, half the other's; only
    what each line says alone (an end, unreadable lines, the endpoint) is judged beside it.
    """
    if obs.interleaving is not None:
        alone = (interleaved_servers, server_ended, log_format_unrecognized)
        return _sorted([finding for rule in alone if (finding := rule(obs)) is not None])
    rules = (
        server_ended,
        dp_rank_accept_length,
        eagle3_draft_with_eagle_algorithm,
        cuda_graph_disabled,
        draft_tokens_excessive,
        decode_stats_not_logged,
        log_format_unrecognized,
        running_requests_capped,
        metrics_endpoint_disabled,
        draft_positions_unprofitable,
        algorithm_unknown,
        adaptive_drafter_given_up,
        requests_without_benefit,
    )
    return _sorted([finding for rule in rules if (finding := rule(obs)) is not None])


def _sorted(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: SEVERITY_ORDER[f.severity])
