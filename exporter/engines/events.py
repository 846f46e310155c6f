"""Start-up events: what an engine says about its configuration once per start.

The shapes every engine's event reader gives and the run tracker and config tracker take, so
neither needs to know which engine wrote the line. Each engine module reads its own lines
into these (``parse_event``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ServerArgsEvent:
    """An engine's resolved configuration at start (SGLang's ``server_args=ServerArgs(...)``,
    vLLM's engine configuration line), in SGLang's argument names, secrets already removed:
    it begins a server run."""

    args: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class WeightsLoaded:
    """``Load weight end. ... type=<Class>``: one per model loaded (target, then draft)."""

    model_class: str


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


Event = ServerArgsEvent | WeightsLoaded | MemoryPlan | MaxRunningReset | ServerReady
