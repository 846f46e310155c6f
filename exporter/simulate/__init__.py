"""A realistic SGLang server log for each incident of spec section 2 (``specwatch simulate``).

The simulator is the demo's server, the end-to-end tests' load and the benchmarks' input, so
it writes real line formats (per SGLang era, optionally in a container envelope) with values
that agree with each other. Python users call :func:`generate`; the intended values of each
scenario are in :data:`SCENARIOS`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import chain

from exporter.simulate.envelope import ENVELOPES, wrap
from exporter.simulate.events import LogEvent
from exporter.simulate.formats import DEFAULT_ERA, ERAS, Era
from exporter.simulate.scenarios import SCENARIOS, Scenario
from exporter.simulate.startup import startup
from exporter.simulate.traffic import Traffic

__all__ = ["DEFAULT_ERA", "ENVELOPES", "ERAS", "SCENARIOS", "events", "generate", "scenario"]

RESTART_SECONDS = 4.0  # between the last line of one server run and the next launch


def scenario(name: str) -> Scenario:
    """The named scenario; a KeyError names the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def events(
    chosen: Scenario, *, seed: int = 0, era: Era | None = None, duration: float | None = None
) -> Iterator[LogEvent]:
    """Lines in time order on a simulated clock starting at 0; ``duration`` None is endless."""
    era = era or ERAS[DEFAULT_ERA]
    rng = random.Random(seed)
    offset = 0.0
    for index, phase in enumerate(chosen.phases):
        boot = startup(phase.deployment, era, rng, offset, warm=index > 0)
        first_request = boot[-1].offset + 1.0
        until = None if phase.traffic_seconds is None else first_request + phase.traffic_seconds
        traffic = Traffic(phase, era, rng, now=first_request)
        for event in chain(boot, traffic.events(until)):
            if duration is not None and event.offset > duration:
                return
            yield event
        offset = traffic.now + RESTART_SECONDS


def generate(
    name: str,
    *,
    seed: int = 0,
    duration: float | None = 300.0,
    fmt: str = DEFAULT_ERA,
    start: datetime | None = None,
    envelope: str = "plain",
) -> Iterator[str]:
    """The log's physical lines (without newline), stamped from ``start``.

    ``start`` defaults to the era's fixed base time, so the same seed gives the same bytes.
    """
    era = ERAS[fmt]
    base = start or era.base_time
    for event in events(scenario(name), seed=seed, era=era, duration=duration):
        moment = base + timedelta(seconds=event.offset)
        yield from wrap(event.render(moment), event.stream, moment, envelope)
