"""TensorRT-LLM's ``/prometheus/metrics`` (``trtllm-serve``, and the same names behind Dynamo).

TensorRT-LLM counts draft and accepted tokens per iteration
(``trtllm_spec_decode_num_draft_tokens_total``, ``..._num_accepted_tokens_total``) and, per
finished request, by draft position (``trtllm_spec_decode_drafted_tokens_total`` and
``..._accepted_tokens_total``, labelled ``token_position``). It has no counter of draft rounds.
Its own accept length is ``(accepted + rounds) / rounds`` (each drafting request yields its
target token and the drafts it accepted), written to the gauge
``trtllm_spec_decode_acceptance_length`` for the newest iteration only.

Every request drafts its first position in every round, so the drafted count at position 0
is the number of rounds: a window's accept length is ``1 + Δaccepted / Δdrafted[0]`` from the
per-position counters, TensorRT-LLM's definition over the window. Without them (a window in
which no drafting request finished, or a version without per-position counters) the gauge
stands in, 0 meaning the newest iteration drafted nothing, which is no value. The server's
speculative setup comes from ``trtllm_speculative_config_info``.

Its metrics are written through prometheus-client's multiprocess mode, which labels each
gauge with the writing process (``pid``): gauges are read as the largest series, and the
accept-length gauge only while every series agrees.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.engines.counters import (
    Rates,
    accept_length,
    accept_ratio,
    by_position,
    disagreements,
    increase,
    model_name,
    position_increases,
    total,
)
from exporter.engines.engine import Samples
from exporter.engines.record import UpstreamValues
from exporter.engines.server_config import ServerConfig

PREFIX = "trtllm_"
DRAFT_TOKENS = "trtllm_spec_decode_num_draft_tokens_total"
ACCEPTED = "trtllm_spec_decode_num_accepted_tokens_total"
DRAFTED_AT = "trtllm_spec_decode_drafted_tokens_total"
ACCEPTED_AT = "trtllm_spec_decode_accepted_tokens_total"
POSITION = "token_position"
ACCEPT_LENGTH = "trtllm_spec_decode_acceptance_length"
CONFIG_INFO = "trtllm_speculative_config_info"
GENERATION = "trtllm_generation_tokens_total"
RUNNING = "trtllm_num_requests_running"
WAITING = "trtllm_num_requests_waiting"
KV_USAGE = "trtllm_kv_cache_utilization"
# How each sample read can be true (see ``Engine.bounds``).
BOUNDS = {
    KV_USAGE: "ratio",
    ACCEPT_LENGTH: "accept_length",
    **dict.fromkeys(
        (DRAFT_TOKENS, ACCEPTED, DRAFTED_AT, ACCEPTED_AT, GENERATION, RUNNING, WAITING), "count"
    ),
}
# Its ``decoding_type`` names that specwatch spells otherwise; the rest are upper-cased.
_ALGORITHMS = {"DRAFTTARGET": "DRAFT_MODEL"}
_MAX_DRAFT_LEN = 64


class TrtllmUpstream:
    """One scraper's reader of TensorRT-LLM's metrics; keeps the counters of the last scrape."""

    def __init__(self) -> None:
        self._counters: Counters | None = None

    def claims(self, samples: Samples) -> bool:
        return any(name.startswith(PREFIX) for name in samples)

    def reset(self) -> None:
        """Counters survive a failed scrape: the next window is just longer."""

    def reads(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def bounds(self, name: str) -> str | None:
        return BOUNDS.get(name)

    def read(self, samples: Samples, at: float) -> UpstreamValues:
        now = counters(samples, at)
        window = rates(self._counters, now)
        self._counters = now
        gauge = None if window.accept_length else _agreed(samples, ACCEPT_LENGTH)
        return UpstreamValues(
            accept_length=window.accept_length or gauge,
            accept_length_gauge=gauge is not None,
            running_requests=_largest(samples, RUNNING),
            queued_requests=_largest(samples, WAITING),
            gen_throughput=window.gen_throughput,
            token_usage=_largest(samples, KV_USAGE),
            engine="trtllm",
            served_model=model_name(
                samples, (GENERATION, *sorted(n for n in samples if n.startswith(PREFIX)))
            ),
            accept_rate=window.accept_rate,
            accept_rate_by_position=window.accept_rate_by_position,
            disagreement=window.disagreement,
            draft_tokens_total=now.draft_tokens,
            accepted_tokens_total=now.accepted,
            accepted_by_position=now.accepted_at or None,
            config=speculative_config(samples),
        )


@dataclass(frozen=True, slots=True)
class Counters:
    """TensorRT-LLM's speculation counters at one scrape, summed over their series."""

    at: float  # monotonic seconds of the scrape
    draft_tokens: float | None
    accepted: float | None
    generation: float | None
    drafted_at: tuple[float, ...]  # per position, of finished requests
    accepted_at: tuple[float, ...]  # the same positions; 0 where none was accepted yet


def counters(samples: Samples, at: float) -> Counters:
    drafted = by_position(samples, (DRAFTED_AT,), POSITION)
    return Counters(
        at=at,
        draft_tokens=total(samples, (DRAFT_TOKENS,)),
        accepted=total(samples, (ACCEPTED,)),
        generation=total(samples, (GENERATION,)),
        drafted_at=drafted,
        accepted_at=by_position(samples, (ACCEPTED_AT,), POSITION, upto=len(drafted)),
    )


def rates(before: Counters | None, now: Counters) -> Rates:
    """The window between two scrapes; nothing on the first scrape or after a restart."""
    if before is None or now.at <= before.at:
        return Rates()
    generation = increase(before.generation, now.generation)
    draft_tokens = increase(before.draft_tokens, now.draft_tokens)
    accepted = increase(before.accepted, now.accepted)
    rate = wrong_rate = None
    if draft_tokens and accepted is not None:
        rate, wrong_rate = accept_ratio((ACCEPTED, accepted), (DRAFT_TOKENS, draft_tokens))
    rounds = increase(_first(before.drafted_at), _first(now.drafted_at))
    kept = increase(sum(before.accepted_at), sum(now.accepted_at))
    length = by_round = wrong_length = None
    if rounds and kept is not None:
        rounds_counter = f'{DRAFTED_AT}{{{POSITION}="0"}}'
        length, wrong_length = accept_length((ACCEPTED_AT, kept), (rounds_counter, rounds))
        per_position = position_increases(before.accepted_at, now.accepted_at)
        if per_position is not None:
            by_round = tuple(min(delta / rounds, 1.0) for delta in per_position)
    return Rates(
        accept_length=length,
        accept_rate=rate,
        accept_rate_by_position=by_round,
        gen_throughput=None if generation is None else generation / (now.at - before.at),
        disagreement=disagreements(wrong_length, wrong_rate),
    )


def speculative_config(samples: Samples) -> ServerConfig | None:
    """The server's speculation as its config info says: method and draft length; None when
    it says nothing or its series disagree."""
    keys = ("spec_method", "spec_num_tokens", "spec_draft_model")
    shown = {
        tuple(labels.get(key, "") for key in keys)
        for labels, value in samples.get(CONFIG_INFO, [])
        if value == 1
    }
    if len(shown) != 1:
        return None
    method, tokens, draft = shown.pop()
    steps = int(tokens) if tokens.isdigit() and 0 < int(tokens) <= _MAX_DRAFT_LEN else None
    return ServerConfig(
        algorithm=algorithm(method) if method.isidentifier() and len(method) <= 32 else None,
        draft_model_path=draft if draft not in ("", "None") else None,
        num_steps=steps,
        num_draft_tokens=None if steps is None else steps + 1,
    )


def algorithm(method: str) -> str:
    """TensorRT-LLM's ``decoding_type`` (``Eagle3``, ``MTP``, ``NGram``, ``DraftTarget``) as
    specwatch names the algorithm."""
    upper = method.upper()
    return _ALGORITHMS.get(upper, upper)


def _first(positions: tuple[float, ...]) -> float | None:
    return positions[0] if positions else None


def _largest(samples: Samples, name: str) -> float | None:
    return max((value for _, value in samples.get(name, [])), default=None)


def _agreed(samples: Samples, name: str) -> float | None:
    """The gauge's value when every series gives the same one, 0 (nothing drafted) as None."""
    values = {value for _, value in samples.get(name, [])}
    return values.pop() or None if len(values) == 1 else None
