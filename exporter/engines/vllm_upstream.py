"""vLLM's ``/metrics``: speculation counters turned into rates over the scrape window.

vLLM exports no accept-length gauge, only counters (``vllm:spec_decode_num_drafts_total``,
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and the per-position
``..._num_accepted_tokens_per_pos_total{position}``), labelled by ``engine`` (the DP index) and
``model_name``. The accept length of a window is ``1 + Δaccepted / Δdrafts`` between two
scrapes: one sample says nothing about now, an idle window (no new drafts) has no value rather
than an old one, and a counter that went down (a restart) starts a new window instead of
yielding a negative rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.engines.engine import Samples
from exporter.engines.record import UpstreamValues

PREFIX = "vllm:"
_DRAFTS = "vllm:spec_decode_num_drafts_total"
_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_GENERATION = "vllm:generation_tokens_total"
# The KV gauge was renamed around 0.10/0.11; either one is read.
_KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# Positions beyond this are not a real drafter (k is single-digit in practice).
MAX_POSITIONS = 32


class VllmUpstream:
    """One scraper's reader of vLLM's ``/metrics``; keeps the counters of the previous scrape."""

    def __init__(self) -> None:
        self._counters: Counters | None = None

    def claims(self, samples: Samples) -> bool:
        return any(name.startswith(PREFIX) for name in samples)

    def reset(self) -> None:
        """Counters survive a failed scrape: the next window is just longer, and a restart
        shows as a counter that went down."""

    def read(self, samples: Samples, at: float) -> UpstreamValues:
        """The gauges, and the counters' rates over the window since the previous scrape."""
        now = counters(samples, at)
        window = rates(self._counters, now)
        self._counters = now
        running, waiting, usage = gauges(samples)
        return UpstreamValues(
            accept_length=window.accept_length,
            running_requests=running,
            queued_requests=waiting,
            gen_throughput=window.gen_throughput,
            token_usage=usage,
            engine="vllm",
            served_model=model_name(samples),
            accept_rate=window.accept_rate,
            accept_rate_by_position=window.accept_rate_by_position,
            drafts_total=now.drafts,
            draft_tokens_total=now.draft_tokens,
            accepted_tokens_total=now.accepted,
        )


@dataclass(frozen=True, slots=True)
class Counters:
    """vLLM's speculation counters at one scrape, summed over engines and models."""

    at: float  # monotonic seconds of the scrape
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    generation: float | None
    per_position: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Rates:
    """What one scrape window says; every field None when the window says nothing."""

    accept_length: float | None = None
    accept_rate: float | None = None
    accept_rate_by_position: tuple[float, ...] | None = None
    gen_throughput: float | None = None


def counters(samples: Samples, at: float) -> Counters:
    return Counters(
        at=at,
        drafts=_sum(samples, _DRAFTS),
        draft_tokens=_sum(samples, _DRAFT_TOKENS),
        accepted=_sum(samples, _ACCEPTED),
        generation=_sum(samples, _GENERATION),
        per_position=_per_position(samples),
    )


def gauges(samples: Samples) -> tuple[float | None, float | None, float | None]:
    """Running and waiting requests (summed over engines) and the fullest engine's KV usage."""
    usage = next((samples[name] for name in _KV_USAGE if samples.get(name)), [])
    return (
        _sum(samples, "vllm:num_requests_running"),
        _sum(samples, "vllm:num_requests_waiting"),
        max((value for _, value in usage), default=None),
    )


def rates(before: Counters | None, now: Counters) -> Rates:
    """The window between two scrapes; nothing on the first scrape, after a reset or idle."""
    if before is None or now.at <= before.at:
        return Rates()
    elapsed = now.at - before.at
    generation = _delta(before.generation, now.generation)
    throughput = None if generation is None else generation / elapsed
    drafts = _delta(before.drafts, now.drafts)
    accepted = _delta(before.accepted, now.accepted)
    if not drafts or accepted is None:
        return Rates(gen_throughput=throughput)  # idle (or no speculation): no accept value
    draft_tokens = _delta(before.draft_tokens, now.draft_tokens)
    return Rates(
        accept_length=1.0 + accepted / drafts,
        accept_rate=accepted / draft_tokens if draft_tokens else None,
        accept_rate_by_position=_position_rates(before, now, drafts),
        gen_throughput=throughput,
    )


def _position_rates(before: Counters, now: Counters, drafts: float) -> tuple[float, ...] | None:
    if not now.per_position or len(now.per_position) != len(before.per_position):
        return None
    deltas = [b - a for a, b in zip(before.per_position, now.per_position, strict=True)]
    if any(delta < 0 for delta in deltas):
        return None  # a restart between the scrapes
    return tuple(min(delta / drafts, 1.0) for delta in deltas)


def _delta(before: float | None, now: float | None) -> float | None:
    """Increase of a counter; None when unknown or when it went down (a restart)."""
    if before is None or now is None or now < before:
        return None
    return now - before


def _sum(samples: Samples, name: str) -> float | None:
    values = [value for _, value in samples.get(name, [])]
    return sum(values) if values else None


def _per_position(samples: Samples) -> tuple[float, ...]:
    """Per-position counters summed over engines, positions 0..k-1 (a gap ends the list)."""
    by_position: dict[int, float] = {}
    for labels, value in samples.get(_PER_POSITION, []):
        position = labels.get("position", "")
        if position.isdigit() and int(position) < MAX_POSITIONS:
            by_position[int(position)] = by_position.get(int(position), 0.0) + value
    out: list[float] = []
    while len(out) in by_position:
        out.append(by_position[len(out)])
    return tuple(out)


def model_name(samples: Samples) -> str | None:
    """The ``model_name`` label vLLM puts on its series (the served model), from the
    generation counter, else any of its series."""
    for name in (_GENERATION, *sorted(n for n in samples if n.startswith(PREFIX))):
        for labels, _ in samples.get(name, []):
            if labels.get("model_name"):
                return labels["model_name"]
    return None
