"""Which samples of the server's ``/metrics`` specwatch believes.

The server is hostile input like its log: one ``-Inf`` accept length fired the critical
collapse alert, one ``NaN`` silenced it for good, a 0-1 usage read 332,667, and two copies of
one series were summed as if two ranks. Each series specwatch reads is held to the range its
meaning allows; a sample outside it, and every copy of a series given twice, is dropped and
counted by reason, so a bad value is never exported and never mistaken for the server's state.
"""

from __future__ import annotations

import math
from collections import Counter

Samples = dict[str, list[tuple[dict[str, str], float]]]

DROP_REASONS = ("non_finite", "negative", "out_of_range", "duplicate")

# Shares, 0 to 1.
_RATIOS = frozenset(
    {
        "sglang_token_usage",
        "sglang_spec_accept_rate",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    }
)
# Accepted tokens per verify round: 0 without speculation, else at least 1 (the target's own
# token) and at most one more than the longest draft a real drafter makes.
_ACCEPT_LENGTHS = frozenset({"sglang_spec_accept_length"})
MAX_ACCEPT_LENGTH = 64.0
# Everything else specwatch reads is a count or a rate: at least 0.
READ = frozenset(
    {
        *_RATIOS,
        *_ACCEPT_LENGTHS,
        "sglang_num_running_reqs",
        "sglang_num_queue_reqs",
        "sglang_gen_throughput",
        "sglang_cuda_graph_passes_total",
        "sglang_spec_verify_calls_total",
        "sglang_generation_tokens_total",
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    }
)


def checked(samples: Samples) -> tuple[Samples, Counter[str]]:
    """``samples`` without what cannot be true, and how many were dropped by reason."""
    dropped: Counter[str] = Counter()
    kept = dict(samples)
    for name in READ & samples.keys():
        seen = Counter(frozenset(labels.items()) for labels, _ in samples[name])
        good = []
        for labels, value in samples[name]:
            reason = _problem(name, value)
            if seen[frozenset(labels.items())] > 1:
                reason = "duplicate"
            if reason is None:
                good.append((labels, value))
            else:
                dropped[reason] += 1
        kept[name] = good
    return kept, dropped


def _problem(name: str, value: float) -> str | None:
    if not math.isfinite(value):
        return "non_finite"
    if value < 0:
        return "negative"
    if name in _RATIOS and value > 1:
        return "out_of_range"
    if name in _ACCEPT_LENGTHS and (0 < value < 1 or value > MAX_ACCEPT_LENGTH):
        return "out_of_range"
    return None
