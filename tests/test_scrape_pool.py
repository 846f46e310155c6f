"""Upstream scrapes of many targets on a few threads, each on its interval."""

from __future__ import annotations

import threading
import time

from exporter.sources.scrape_pool import ScrapePool
from tests.support.waiting import PROCESS_TIMEOUT, wait_for


class Counting:
    """A scraper that records when it ran and on which thread; optionally raises, or hangs
    until ``released`` (at most ``PROCESS_TIMEOUT``)."""

    def __init__(self, interval: float, fail: bool = False, hang: bool = False) -> None:
        self.interval = interval
        self.runs: list[float] = []
        self.ended = 0  # scrapes that returned
        self.threads: set[str] = set()
        self.released = threading.Event()
        self._fail = fail
        self._hang = hang

    def scrape_once(self) -> None:
        self.runs.append(time.monotonic())
        self.threads.add(threading.current_thread().name)
        if self._hang:
            self.released.wait(PROCESS_TIMEOUT)
        self.ended += 1
        if self._fail:
            raise RuntimeError("a scraper bug")


def test_many_scrapers_share_a_few_threads_and_each_keeps_its_interval() -> None:
    scrapers = [Counting(0.2) for _ in range(50)]
    broken = Counting(0.2, fail=True)
    pool = ScrapePool([*scrapers, broken], workers=4)
    pool.start()
    try:
        wait_for(lambda: all(len(s.runs) >= 3 for s in [*scrapers, broken]), timeout=10)
    finally:
        pool.stop(timeout=1)
    names = set().union(*(s.threads for s in scrapers))
    assert len(names) <= 4
    for scraper in scrapers:  # on schedule: never more often than its interval says
        span = scraper.runs[-1] - scraper.runs[0]
        assert len(scraper.runs) - 1 <= span / 0.2 + 1  # the first may start late


def test_hanging_scrapes_hold_their_own_workers_only_and_stop_waits_a_bounded_time() -> None:
    """Two scrapes hang until the test lets them go (or, were stop waiting on them, the test's
    own deadline): stop returns while they still hang."""
    hung = [Counting(0.1, hang=True) for _ in range(2)]
    healthy = Counting(0.1)
    pool = ScrapePool([*hung, healthy], workers=3)
    pool.start()
    try:
        wait_for(lambda: len(healthy.runs) >= 5 and all(h.runs for h in hung), timeout=10)
        pool.stop(timeout=0.5)
        assert all(h.ended == 0 for h in hung)  # stop returned while they hang
        assert all(len(h.runs) == 1 for h in hung)
    finally:
        for scraper in hung:
            scraper.released.set()
