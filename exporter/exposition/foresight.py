"""Scrapes foreseen, so that most of their work is done just before they come.

Most of what a scrape waits for could be done a moment earlier: reading the lines written
since the tail loop's last tick (``TailLoop.sync``) and rendering every target whose state
moved. Prometheus asks at a fixed interval, so once a scraper's last two intervals agree, its
next scrape is foreseen, and the daemon does that work just before it: begun early enough (by
as long as the last preparation took) to end ``LEAD`` seconds before the scrape comes. The
scrape itself still reads every line written before it and renders every target that moved
since: it only finds less left to do. With 100 logs of 6 lines/s, a scrape renders some 15
targets instead of about 80 (bench/README.md, eleventh round).

A scraper is told apart by its address and ``User-Agent``; the ``MAX_SCRAPERS`` heard from
last are followed. One whose last two intervals differ by half an interval (less the lead and
the preparation's time) is not foreseen: ten scrapers behind one address, a person at a
browser, back-to-back requests. Each scrape heard lets at most one preparation follow, so a
scraper that stops costs one.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LEAD = 0.02
"""Seconds before a foreseen scrape that its preparation should end. Lines written and targets
moved in this last stretch are left to the scrape. A preparation begins earlier by as long as
the last one took (20 to 30 ms of wall, nearly all CPU, for 100 moved targets on a quiet
2-core machine), and by the difference of the scraper's last two intervals, for a scraper
that wavers."""

MAX_SCRAPERS = 8
"""Scrapers followed at once; an HA pair of Prometheus servers is two."""

USER_AGENT_MAX = 128  # characters of a User-Agent kept to tell scrapers apart


@dataclass(slots=True)
class _Scraper:
    last: float  # when its newest scrape arrived (monotonic seconds)
    interval: float = math.nan  # from the scrape before to the newest
    wavering: float = math.nan  # how far its last two intervals differ
    prepared: bool = True  # the next scrape's preparation is made (or none is foreseen)


def scraper(environ: Mapping[str, Any]) -> str:
    """Who asks, as a WSGI request tells: its address and (bounded) User-Agent."""
    agent = str(environ.get("HTTP_USER_AGENT") or "")[:USER_AGENT_MAX]
    return f"{environ.get('REMOTE_ADDR') or ''} {agent}"


class Foresight:
    """When each followed scraper asks next; thread-safe. ``heard`` at each scrape; ``due``,
    ``take`` and ``took`` by the thread that prepares, which ``wait`` puts to sleep until there
    may be something to do."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, lead: float = LEAD) -> None:
        self._clock = clock
        self._lead = lead
        self._changed = threading.Condition()
        self._scrapers: OrderedDict[str, _Scraper] = OrderedDict()
        self._made = 0  # preparations made
        self._took = 0.0  # seconds the last preparation took

    @property
    def made(self) -> int:
        """Preparations made so far (``specwatch_scrapes_prepared_total``)."""
        return self._made

    def heard(self, who: str) -> None:
        """A scrape by ``who`` arrived now: its next one may be foreseen."""
        now = self._clock()
        with self._changed:
            known = self._scrapers.pop(who, None)
            self._scrapers[who] = _heard(known, now)
            while len(self._scrapers) > MAX_SCRAPERS:
                self._scrapers.popitem(last=False)
            self._changed.notify_all()

    def due(self) -> float | None:
        """When the earliest preparation not yet made should begin (its scrape's moment less
        the lead, the last preparation's time and the scraper's wavering); None when no
        scrape is foreseen."""
        with self._changed:
            return min(map(self._due, self._scrapers.values()), default=None, key=_later_none)

    def take(self, now: float) -> bool:
        """Whether a preparation is due at ``now``. If so it is counted, and every scrape due
        by then is served by it: the caller makes it at once."""
        with self._changed:
            due = [each for each in self._scrapers.values() if _later_none(self._due(each)) <= now]
            for each in due:
                each.prepared = True
            self._made += bool(due)
            return bool(due)

    def took(self, seconds: float) -> None:
        """The preparation just made took ``seconds``: the next begins that much earlier."""
        with self._changed:
            self._took = seconds

    def wait(self, until: float) -> None:
        """Sleep until ``until`` (monotonic seconds), or until a scrape is heard or ``wake``."""
        with self._changed:
            left = until - self._clock()
            if left > 0:
                self._changed.wait(left)

    def wake(self) -> None:
        """End a ``wait`` now (the daemon stops)."""
        with self._changed:
            self._changed.notify_all()

    def _due(self, each: _Scraper) -> float | None:
        if each.prepared:
            return None
        margin = self._lead + self._took + each.wavering
        if not margin < each.interval / 2:  # NaN until two intervals were heard
            return None
        return each.last + each.interval - margin


def _heard(known: _Scraper | None, now: float) -> _Scraper:
    """A scraper's record after a scrape at ``now``."""
    if known is None:
        return _Scraper(now)
    interval = now - known.last
    return _Scraper(now, interval, abs(interval - known.interval), prepared=False)


def _later_none(due: float | None) -> float:
    return math.inf if due is None else due
