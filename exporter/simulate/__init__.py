"""A realistic SGLang server log for each incident scenario (``specwatch simulate``).

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

from exporter.engines import registry
from exporter.simulate import vllm
from exporter.simulate.envelope import ENVELOPES, wrap
from exporter.simulate.events import LogEvent
from exporter.simulate.formats import DEFAULT_ERA, ERAS, Era
from exporter.simulate.scenarios import SCENARIOS, Scenario, logging_requests
from exporter.simulate.startup import startup
from exporter.simulate.traffic import Traffic

__all__ = [
    "DEFAULT_ERA",
    "ENGINES",
    "ENVELOPES",
    "ERAS",
    "FORMATS",
    "SCENARIOS",
    "events",
    "generate",
    "logging_requests",
    "scenario",
]

# The formats of each engine whose logs the simulator writes; it offers the registry's
# engines it has been taught (an engine specwatch only scrapes has no log to write).
FORMATS: dict[str, tuple[str, ...]] = {"sglang": tuple(ERAS), "vllm": tuple(vllm.FORMATS)}
ENGINES = tuple(name for name in registry.NAMES if name in FORMATS)

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


def engine_events(
    chosen: Scenario,
    *,
    engine: str = "sglang",
    seed: int = 0,
    fmt: str | None = None,
    duration: float | None = None,
) -> Iterator[LogEvent]:
    """:func:`events` for SGLang (``fmt`` an era of :data:`ERAS`) or vLLM (one of
    ``vllm.FORMATS``); a KeyError names what that engine knows."""
    if engine == "vllm":
        fmt = fmt or vllm.DEFAULT_FORMAT
        if fmt not in vllm.FORMATS:
            raise KeyError(f"unknown vLLM format {fmt!r}; known: {', '.join(vllm.FORMATS)}")
        return vllm.events(chosen, seed=seed, fmt=fmt, duration=duration)
    fmt = fmt or DEFAULT_ERA
    if fmt not in ERAS:
        raise KeyError(f"unknown SGLang format {fmt!r}; known: {', '.join(ERAS)}")
    return events(chosen, seed=seed, era=ERAS[fmt], duration=duration)


def generate(
    name: str,
    *,
    seed: int = 0,
    duration: float | None = 300.0,
    fmt: str | None = None,
    start: datetime | None = None,
    envelope: str = "plain",
    engine: str = "sglang",
    log_requests: str | None = None,
) -> Iterator[str]:
    """The log's physical lines (without newline), stamped from ``start``.

    ``start`` defaults to a fixed base time per era, so the same seed gives the same bytes.
    ``log_requests`` (``text`` or ``json``): the server logs each finished request so.
    """
    chosen = scenario(name)
    if log_requests is not None:
        chosen = logging_requests(chosen, log_requests)
    source = engine_events(chosen, engine=engine, seed=seed, fmt=fmt, duration=duration)
    base = start or (vllm.BASE_TIME if engine == "vllm" else ERAS[fmt or DEFAULT_ERA].base_time)
    for event in source:
        moment = base + timedelta(seconds=event.offset)
        yield from wrap(event.render(moment), event.stream, moment, envelope)
