"""A realistic server log for each incident scenario (``specwatch simulate``).

The simulator is the demo's server, the end-to-end tests' load and the benchmarks' input, so
it writes real line formats (per release, optionally in a container envelope) with values
that agree with each other. Each engine writes its own lines (its ``simulation``); this
package chooses the engine from the registry, cuts, stamps and wraps what it writes. Python
users call :func:`generate`; the intended values of each scenario are in :data:`SCENARIOS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from itertools import takewhile
from types import MappingProxyType

from exporter.engines import registry
from exporter.engines.simulation import SimulatedLine, Simulation
from exporter.simulate.envelope import ENVELOPES, wrap
from exporter.simulate.scenarios import SCENARIOS, Scenario, logging_requests

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENVELOPES",
    "FORMATS",
    "SCENARIOS",
    "events",
    "generate",
    "logging_requests",
    "playable",
    "refusal",
    "scenario",
    "simulation",
]

# Every engine whose log is read writes it (an engine specwatch only scrapes has none).
SIMULATIONS: Mapping[str, Simulation] = MappingProxyType(
    {engine.name: each for engine in registry.ENGINES if (each := engine.simulation()) is not None}
)
ENGINES = tuple(SIMULATIONS)
# The formats (``--format-version``) of each engine.
FORMATS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {name: tuple(each.formats) for name, each in SIMULATIONS.items()}
)


def scenario(name: str) -> Scenario:
    """The named scenario; a KeyError names the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def simulation(engine: str) -> Simulation:
    """The simulation of ``engine``; a KeyError names the engines that have one."""
    try:
        return SIMULATIONS[engine]
    except KeyError:
        raise KeyError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}") from None


def refusal(chosen: Scenario, engine: str) -> str | None:
    """Why ``engine`` cannot play ``chosen``, in its words; None when it can."""
    writer = simulation(engine)
    return next(filter(None, (writer.cannot(phase) for phase in chosen.phases)), None)


def playable(engine: str) -> tuple[str, ...]:
    """The scenarios ``engine`` can play."""
    return tuple(name for name, each in SCENARIOS.items() if refusal(each, engine) is None)


# Written unless an engine is named: the first that plays every scenario, so that every
# scenario runs without one.
DEFAULT_ENGINE = next(name for name in ENGINES if len(playable(name)) == len(SCENARIOS))


def events(
    chosen: Scenario,
    *,
    engine: str = DEFAULT_ENGINE,
    seed: int = 0,
    fmt: str | None = None,
    duration: float | None = None,
) -> Iterator[SimulatedLine]:
    """Lines in time order on a simulated clock starting at 0; ``duration`` None is endless.

    A KeyError names what ``engine`` knows: its formats, or why it cannot play ``chosen``.
    """
    writer = simulation(engine)
    fmt = fmt or writer.default_format
    if fmt not in writer.formats:
        raise KeyError(f"unknown {engine} format {fmt!r}; known: {', '.join(writer.formats)}")
    if (why := refusal(chosen, engine)) is not None:
        raise KeyError(f"scenario {chosen.name!r} cannot be played by {engine}: {why}")
    lines = writer.lines(chosen.phases, seed=seed, fmt=fmt)
    if duration is None:
        return lines
    return takewhile(lambda line: line.offset <= duration, lines)


def generate(
    name: str,
    *,
    seed: int = 0,
    duration: float | None = 300.0,
    fmt: str | None = None,
    start: datetime | None = None,
    envelope: str = "plain",
    engine: str = DEFAULT_ENGINE,
    log_requests: str | None = None,
) -> Iterator[str]:
    """The log's physical lines (without newline), stamped from ``start``.

    ``start`` defaults to a fixed base time per format, so the same seed gives the same
    bytes. ``log_requests`` (``text`` or ``json``): the server logs each finished request so.
    """
    chosen = scenario(name)
    if log_requests is not None:
        chosen = logging_requests(chosen, log_requests)
    writer = simulation(engine)
    fmt = fmt or writer.default_format
    source = events(chosen, engine=engine, seed=seed, fmt=fmt, duration=duration)
    base = start or writer.base_time(fmt)
    for event in source:
        moment = base + timedelta(seconds=event.offset)
        yield from wrap(event.render(moment), event.stream, moment, envelope)
