"""Upstream scrapes' deadlines kept by one thread, not a timer thread per scrape."""

from __future__ import annotations

import threading
import time

from exporter.sources.deadlines import Deadlines
from tests.support.waiting import wait_for


def test_actions_run_at_their_deadlines_in_order_unless_cancelled_on_one_thread() -> None:
    deadlines = Deadlines()
    ran: list[tuple[str, float, str]] = []

    def action(name: str) -> None:
        ran.append((name, time.monotonic(), threading.current_thread().name))

    start = time.monotonic()
    deadlines.at(start + 0.3, lambda: action("late"))
    cancelled = deadlines.at(start + 0.1, lambda: action("cancelled"))
    deadlines.at(start + 0.2, lambda: action("early"))
    deadlines.cancel(cancelled)
    wait_for(lambda: len(ran) == 2, timeout=5)
    assert [name for name, _, _ in ran] == ["early", "late"]
    assert ran[0][1] >= start + 0.2 and ran[1][1] >= start + 0.3
    assert {thread for _, _, thread in ran} == {"specwatch-deadlines"}
