"""Every target's upstream scrapes, run by a few threads instead of one thread per target.

With a thread per scraper, 200 targets cost 200 threads (405 with their tailers) and the
memory that goes with them. Here each scraper is due every ``interval``; up to
``MAX_WORKERS`` threads take whichever is due first. A healthy scrape takes milliseconds, so a
few threads keep hundreds of targets on time; should more than ``MAX_WORKERS`` upstreams hang
until their deadline at once, the others' scrapes wait and fall behind their interval (their
values then age out, shown as absent, never as current).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)

MAX_WORKERS = 16


class Scraper(Protocol):
    interval: float

    def scrape_once(self) -> object: ...


class ScrapePool:
    """Runs ``scrapers`` on their intervals, each first at start."""

    def __init__(self, scrapers: Sequence[Scraper], workers: int = MAX_WORKERS) -> None:
        self._scrapers = list(scrapers)
        self._workers = min(workers, len(self._scrapers))
        now = time.monotonic()
        self._order = itertools.count()  # ties in time go in order, never compare scrapers
        self._due = [(now, next(self._order), s) for s in self._scrapers]
        self._changed = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for number in range(self._workers):
            name = f"specwatch-upstream-{number}"
            thread = threading.Thread(target=self._work, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float) -> None:
        """Stop taking scrapes; a scrape in flight ends by its own deadline, and is waited
        for at most ``timeout`` seconds in all."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while (taken := self._next()) is not None:
            due, scraper = taken
            try:
                scraper.scrape_once()
            except Exception:  # a scraper bug must not end scraping for good
                log.exception("upstream scrape failed unexpectedly")
            again = max(due + scraper.interval, time.monotonic())
            with self._changed:
                heapq.heappush(self._due, (again, next(self._order), scraper))
                self._changed.notify()

    def _next(self) -> tuple[float, Scraper] | None:
        """The scraper due first, once it is due; None when stopping."""
        with self._changed:
            while not self._stopping:
                if self._due:
                    wait = self._due[0][0] - time.monotonic()
                    if wait <= 0:
                        due, _, scraper = heapq.heappop(self._due)
                        return due, scraper
                else:
                    wait = None  # every scraper is being scraped by another worker
                self._changed.wait(wait)
            return None
