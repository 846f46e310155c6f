"""SGLang's server for a scenario: each run's start-up block, then its serving, per era.

The engine's ``simulation``: ``simulate/`` asks it for a scenario's lines and never knows
they are SGLang's. Every scenario is SGLang's to play: they were modelled on its flags.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from itertools import chain
from types import MappingProxyType

from exporter.engines.sglang import DECODE_LOG_INTERVAL
from exporter.engines.sglang_sim.eras import DEFAULT_ERA, ERAS
from exporter.engines.sglang_sim.lines import LogEvent
from exporter.engines.sglang_sim.startup import startup
from exporter.engines.sglang_sim.traffic import Traffic
from exporter.engines.simulation import Phase

RESTART_SECONDS = 4.0  # between the last line of one server run and the next launch


class SGLangSimulation:
    formats: Mapping[str, str] = MappingProxyType({name: e.releases for name, e in ERAS.items()})
    default_format = DEFAULT_ERA

    def base_time(self, fmt: str) -> datetime:
        return ERAS[fmt].base_time

    def cannot(self, phase: Phase) -> str | None:
        return None

    def lines(self, phases: Sequence[Phase], *, seed: int, fmt: str) -> Iterator[LogEvent]:
        """Each run warm after the first (weights in the page cache: shorter start-up)."""
        era = ERAS[fmt]
        rng = random.Random(seed)
        offset = 0.0
        for index, phase in enumerate(phases):
            boot = startup(phase.deployment, era, rng, offset, warm=index > 0)
            first_request = boot[-1].offset + 1.0
            until = None if phase.traffic_seconds is None else first_request + phase.traffic_seconds
            traffic = Traffic(phase, era, rng, now=first_request)
            yield from chain(boot, traffic.events(until))
            offset = traffic.now + RESTART_SECONDS

    def window_seconds(self, phase: Phase) -> float:
        """One decode line per ``--decode-log-interval`` draft+verify rounds."""
        return DECODE_LOG_INTERVAL * phase.behaviour.step_seconds


SIMULATION = SGLangSimulation()
