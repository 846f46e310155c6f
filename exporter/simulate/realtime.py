"""A live log: lines written at their cadence with wall-clock stamps (demo, e2e tests, bench).

The server is taken to have just finished starting: startup lines are written at once, stamped
in the recent past, and traffic follows in real time (scaled by ``speed``). That way a watcher
sees the startup facts immediately and fresh decode windows from then on, as on a node whose
server was started a minute ago.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from itertools import chain
from typing import TextIO

from exporter.engines.simulation import SimulatedLine, Simulation
from exporter.simulate.envelope import wrap
from exporter.simulate.scenarios import Scenario


def speed_for_rate(chosen: Scenario, stats_lines_per_second: float, writer: Simulation) -> float:
    """The speed at which the scenario's first run writes this many stats lines per second."""
    return stats_lines_per_second * writer.window_seconds(chosen.phases[0])


def schedule(
    source: Iterator[SimulatedLine], *, origin: float, speed: float
) -> Iterator[tuple[float, SimulatedLine]]:
    """Pair each line with its wall-clock time: startup back-dated, traffic from ``origin``."""
    backlog: list[SimulatedLine] = []
    for event in source:
        backlog.append(event)
        if event.ready:
            break
    ready = backlog[-1].offset if backlog else 0.0
    for event in chain(backlog, source):
        delta = event.offset - ready
        yield origin + (delta / speed if delta > 0 else delta), event


def write_live(
    source: Iterator[SimulatedLine],
    out: TextIO,
    *,
    envelope: str,
    speed: float,
    duration: float | None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Write lines as their time comes; stop after ``duration`` wall seconds. Returns lines."""
    origin = clock()
    written = 0
    for when, event in schedule(source, origin=origin, speed=speed):
        if duration is not None and when > origin + duration:
            sleep(max(origin + duration - clock(), 0.0))  # a duration is a promise to stay
            break
        wait = when - clock()
        if wait > 0:
            sleep(wait)
        moment = datetime.fromtimestamp(when).astimezone()
        for record in wrap(event.render(moment), event.stream, moment, envelope):
            out.write(record + "\n")
            written += 1
        out.flush()
    return written
