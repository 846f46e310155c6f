"""Start-up events: what an engine says about its configuration once per start.

The shapes every engine's event reader gives and the run tracker and config tracker take, so
neither needs to know which engine wrote the line. Each engine module reads its own lines
into these (``parse_event``).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.engines.server_config import ServerConfig


@dataclass(frozen=True, slots=True)
class ServerArgsEvent:
    """An engine's resolved configuration at start (SGLang's ``server_args=ServerArgs(...)``,
    vLLM's engine configuration line), read by that engine into specwatch's terms, its
    ``engine`` set so that fixes name its own flags: it begins a server run."""

    config: ServerConfig


@dataclass(frozen=True, slots=True)
class WeightsLoaded:
    """``Load weight end. ... type=<Class>``: one per model loaded (target, then draft).

    ``draft``: the engine knows the class for a draft's by its name alone (SGLang's EAGLE and
    MTP draft classes), so a rank whose target load was not seen still tells the draft's; else
    the load order per rank tells them apart.
    """

    model_class: str
    draft: bool = False


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """``max_total_num_tokens=..., max_running_requests=N, ...`` from TP rank 0."""

    max_running_requests: int | None


@dataclass(frozen=True, slots=True)
class MaxRunningReset:
    """``Max running requests is reset to N for speculative decoding``: SGLang lowered the cap."""

    value: int


@dataclass(frozen=True, slots=True)
class ServerReady:
    """``The server is fired up and ready to roll!``."""


@dataclass(frozen=True, slots=True)
class AdaptiveSteps:
    """Adaptive speculation (SGLang's ``--speculative-adaptive``) set the draft steps in force.

    Three lines of SGLang's rank 0 tell it: ``AdaptiveSpeculativeParams initialized: steps=N,
    candidate_steps=[...]`` at start, ``Adaptive spec params updated: steps A -> B
    (ema_accept_len=X)`` when a tier's EMA of accepted drafts moves it, and ``Switch adaptive
    runtime state: steps A -> B, draft_tokens C -> D`` whenever the worker swaps (also when
    the batch size crosses into another tier). Steps 0 is drafting off.
    """

    steps: int
    candidates: tuple[int, ...] | None = None
    ema_accept: float | None = None  # accepted drafts per round (bonus excluded), smoothed


@dataclass(frozen=True, slots=True)
class SpeculationSchedule:
    """vLLM's dynamic speculative decoding: ``num_speculative_tokens_per_batch_size`` in the
    ``non-default args`` line its API server logs before the engine starts, as (first, last
    batch size, speculative tokens) ranges, inclusive and sorted."""

    ranges: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class StatsLoggingOff:
    """The engine said it writes no stats lines this run, in its own words: vLLM with more
    than one API server (``AsyncLLM created with api_server_count more than 1; disabling
    stats logging ...``, each server's warning at start)."""

    reason: str


Event = (
    ServerArgsEvent
    | WeightsLoaded
    | MemoryPlan
    | MaxRunningReset
    | ServerReady
    | AdaptiveSteps
    | SpeculationSchedule
    | StatsLoggingOff
)
