"""vLLM's ``/metrics`` counter schema, under whatever prefix the server writes it.

vLLM exports no accept-length gauge, only counters (``vllm:spec_decode_num_drafts_total``,
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and the per-position
``..._num_accepted_tokens_per_pos_total{position}``), labelled by ``engine`` (the DP index) and
``model_name``. The accept length of a window is ``1 + Δaccepted / Δdrafts`` between two
scrapes: one sample says nothing about now, an idle window (no new drafts) has no value rather
than an old one, and a counter that went down (a restart) starts a new window instead of
yielding a negative rate.

Other servers write the same counters under another prefix: llama.cpp's server as
``llamacpp:``, vLLM under Ray Serve as ``ray_vllm_`` (Ray allows no colon in a name, so vLLM
escapes it; older Ray kept ``ray_vllm:``), and vLLM behind an OpenTelemetry bridge as
``vllm_``. The prefix is configured per target (``metrics_prefix``) or found as the one that
precedes the drafts counter. Where such a server names a gauge its own way (llama.cpp's
``requests_processing``, ``tokens_predicted_total``) the reader takes that name as well.

llama.cpp's server says nothing of how it drafts (a draft model, or n-gram lookup of its own),
and its drafters are none of the ones specwatch has a standard for: its speculation is named
``llama.cpp``, an algorithm without a standard, so it is judged on speed only and the finding
``algorithm_unknown`` says so, instead of an EAGLE floor ticketing a healthy draft model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.engines.counters import (
    PREFIX_RE,
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

PREFIX = "vllm:"
# What follows the prefix. Counters are read with and without ``_total``: a Ray exporter
# that predates OpenTelemetry's naming writes them bare.
DRAFTS = "spec_decode_num_drafts"
DRAFT_TOKENS = "spec_decode_num_draft_tokens"
ACCEPTED = "spec_decode_num_accepted_tokens"
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos"
_GENERATION = ("generation_tokens", "tokens_predicted")  # llama.cpp's name second
_RUNNING = ("num_requests_running", "requests_processing")
_WAITING = ("num_requests_waiting", "requests_deferred")
# The KV gauge was renamed around vLLM 0.10/0.11; llama.cpp had its own (0-1 as well).
KV_USAGE = ("kv_cache_usage_perc", "gpu_cache_usage_perc", "kv_cache_usage_ratio")
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION, *_GENERATION)
GAUGES = (*_RUNNING, *_WAITING)
_STEMS = (*COUNTERS, *GAUGES, *KV_USAGE)
# How each sample read can be true (see ``Engine.bounds``), by what follows the prefix.
_BOUNDS = {
    **{stem + end: "count" for stem in (*COUNTERS, *GAUGES) for end in ("_total", "")},
    **dict.fromkeys(KV_USAGE, "ratio"),
}
_BOUNDED_ENDS = tuple(_BOUNDS)
LLAMA_CPP_PREFIX = "llamacpp:"
_LLAMA_CPP = ServerConfig(algorithm="llama.cpp")
_DRAFTS_NAME = re.compile(rf"^(.{{1,64}}?){DRAFTS}(?:_total)?$")


def schema_prefix(samples: Samples) -> str | None:
    """The prefix of the vLLM schema in this exposition: ``vllm:`` when any name has it (a
    vLLM server without speculation is still one), else the one before a drafts counter
    (the first in order when several are)."""
    if any(name.startswith(PREFIX) for name in samples):
        return PREFIX
    found = sorted(
        prefix
        for name in samples
        if (match := _DRAFTS_NAME.match(name)) and PREFIX_RE.match(prefix := match.group(1))
    )
    return found[0] if found else None


class VllmUpstream:
    """One scraper's reader of the vLLM schema; keeps the counters of the previous scrape.

    ``prefix`` is the configured one; None finds it in each exposition.
    """

    def __init__(self, prefix: str | None = None) -> None:
        self._prefix = prefix
        self._counters: Counters | None = None

    def claims(self, samples: Samples) -> bool:
        return self._prefix_in(samples) is not None

    def reset(self) -> None:
        """Counters survive a failed scrape: the next window is just longer, and a restart
        shows as a counter that went down."""

    def reads(self, name: str) -> bool:
        """Its names under ``vllm:`` or the configured prefix, and the schema's under any (the
        prefix is found in each exposition)."""
        prefixes = (PREFIX, self._prefix) if self._prefix else (PREFIX,)
        return name.startswith(prefixes) or any(stem in name for stem in _STEMS)

    def bounds(self, name: str) -> str | None:
        """The schema's names under the configured prefix, or under any (found per scrape)."""
        if not name.endswith(_BOUNDED_ENDS):
            return None
        for stem, kind in _BOUNDS.items():
            prefix = name[: -len(stem)]
            if name.endswith(stem) and PREFIX_RE.match(prefix) and self._prefix in (None, prefix):
                return kind
        return None

    def read(self, samples: Samples, at: float) -> UpstreamValues:
        """The gauges, and the counters' rates over the window since the previous scrape."""
        prefix = self._prefix_in(samples) or PREFIX
        names = Names(prefix)
        now = counters(samples, names, at)
        window = rates(self._counters, now)
        self._counters = now
        return UpstreamValues(
            accept_length=window.accept_length,
            running_requests=total(samples, names.running),
            queued_requests=total(samples, names.waiting),
            gen_throughput=window.gen_throughput,
            token_usage=_fullest(samples, names.kv_usage),
            engine="vllm",
            served_model=model_name(samples, names.model_series(samples)),
            accept_rate=window.accept_rate,
            accept_rate_by_position=window.accept_rate_by_position,
            disagreement=window.disagreement,
            drafts_total=now.drafts,
            draft_tokens_total=now.draft_tokens,
            accepted_tokens_total=now.accepted,
            accepted_by_position=now.per_position or None,
            config=_LLAMA_CPP if prefix == LLAMA_CPP_PREFIX else None,
        )

    def _prefix_in(self, samples: Samples) -> str | None:
        if self._prefix is None:
            return schema_prefix(samples)
        return self._prefix if any(name.startswith(self._prefix) for name in samples) else None


@dataclass(frozen=True, slots=True)
class Names:
    """The schema's metric names under one prefix, each with its alternatives in order."""

    prefix: str

    def counter(self, stem: str) -> tuple[str, str]:
        return (f"{self.prefix}{stem}_total", f"{self.prefix}{stem}")

    def counters(self, stems: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name for stem in stems for name in self.counter(stem))

    def gauges(self, stems: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(self.prefix + stem for stem in stems)

    @property
    def running(self) -> tuple[str, ...]:
        return self.gauges(_RUNNING)

    @property
    def waiting(self) -> tuple[str, ...]:
        return self.gauges(_WAITING)

    @property
    def kv_usage(self) -> tuple[str, ...]:
        return self.gauges(KV_USAGE)

    def model_series(self, samples: Samples) -> tuple[str, ...]:
        """Where the served model's name is: the generation counter, else any of its series."""
        mine = sorted(name for name in samples if name.startswith(self.prefix))
        return (*self.counters(_GENERATION), *mine)


@dataclass(frozen=True, slots=True)
class Counters:
    """The schema's speculation counters at one scrape, summed over engines and models."""

    at: float  # monotonic seconds of the scrape
    prefix: str
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    generation: float | None
    per_position: tuple[float, ...]


def counters(samples: Samples, names: Names, at: float) -> Counters:
    return Counters(
        at=at,
        prefix=names.prefix,
        drafts=total(samples, names.counter(DRAFTS)),
        draft_tokens=total(samples, names.counter(DRAFT_TOKENS)),
        accepted=total(samples, names.counter(ACCEPTED)),
        generation=total(samples, names.counters(_GENERATION)),
        per_position=by_position(samples, names.counter(PER_POSITION), "position"),
    )


def rates(before: Counters | None, now: Counters) -> Rates:
    """The window between two scrapes; nothing on the first scrape, after a reset or idle."""
    if before is None or now.at <= before.at or before.prefix != now.prefix:
        return Rates()
    elapsed = now.at - before.at
    generation = increase(before.generation, now.generation)
    throughput = None if generation is None else generation / elapsed
    drafts = increase(before.drafts, now.drafts)
    accepted = increase(before.accepted, now.accepted)
    if not drafts or accepted is None:
        return Rates(gen_throughput=throughput)  # idle (or no speculation): no accept value
    draft_tokens = increase(before.draft_tokens, now.draft_tokens)
    per_position = position_increases(before.per_position, now.per_position)
    names = Names(now.prefix)
    accepted_counter = (names.counter(ACCEPTED)[0], accepted)
    length, wrong_length = accept_length(accepted_counter, (names.counter(DRAFTS)[0], drafts))
    ratio, wrong_ratio = (
        accept_ratio(accepted_counter, (names.counter(DRAFT_TOKENS)[0], draft_tokens))
        if draft_tokens
        else (None, None)
    )
    return Rates(
        accept_length=length,
        accept_rate=ratio,
        accept_rate_by_position=(
            None if per_position is None else tuple(min(d / drafts, 1.0) for d in per_position)
        ),
        gen_throughput=throughput,
        disagreement=disagreements(wrong_length, wrong_ratio),
    )


def _fullest(samples: Samples, names: tuple[str, ...]) -> float | None:
    """The fullest engine's KV usage."""
    usage = next((samples[name] for name in names if samples.get(name)), [])
    return max((value for _, value in usage), default=None)
