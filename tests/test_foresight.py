"""A scraper that asks at a steady interval is foreseen, and its scrape prepared just before.

Prometheus scrapes at a fixed interval; the daemon reads the logs and renders the moved
targets ``LEAD`` seconds before the next scrape, so the scrape finds little left. What a
scrape shows must not change: it still reads every line written before it.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.exposition.foresight import LEAD, MAX_SCRAPERS, USER_AGENT_MAX, Foresight, scraper
from tests.support.daemon import run_daemon
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.metrics import Clock, Scrape
from tests.support.realprom import RunningPrometheus, running_prometheus


def heard(clock: Clock, foresight: Foresight, who: str, *moments: float) -> None:
    for moment in moments:
        clock.now = moment
        foresight.heard(who)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_the_third_scrape_at_a_steady_interval_foresees_the_fourth(clock: Clock) -> None:
    foresight = Foresight(clock)
    heard(clock, foresight, "prometheus", 100.0, 115.0)
    assert foresight.due() is None  # one interval says nothing of the next
    heard(clock, foresight, "prometheus", 130.0)
    assert foresight.due() == pytest.approx(145.0 - LEAD)


def test_a_wavering_scraper_is_prepared_for_earlier_by_how_much_it_wavers(clock: Clock) -> None:
    foresight = Foresight(clock)
    heard(clock, foresight, "prometheus", 100.0, 115.0, 130.02)
    assert foresight.due() == pytest.approx(130.02 + 15.02 - (LEAD + 0.02))


def test_a_preparation_begins_earlier_by_as_long_as_the_last_took(clock: Clock) -> None:
    foresight = Foresight(clock)
    heard(clock, foresight, "prometheus", 100.0, 115.0, 130.0)
    foresight.took(0.4)
    assert foresight.due() == pytest.approx(145.0 - LEAD - 0.4)
    foresight.took(8.0)  # longer than half the interval: no time is saved by preparing
    assert foresight.due() is None


@pytest.mark.parametrize(
    "moments",
    [
        (0.0, 2.0, 11.0),  # intervals of 2 and 9 s: no cadence
        (0.0, 0.004, 0.006),  # back to back: the lead is more than half the interval
        (0.0, 0.5, 0.6, 1.3, 1.45),  # a person reloading a page
    ],
)
def test_irregular_scrapes_foresee_nothing(clock: Clock, moments: tuple[float, ...]) -> None:
    foresight = Foresight(clock)
    heard(clock, foresight, "someone", *moments)
    assert foresight.due() is None
    assert not foresight.take(moments[-1] + 100)


def test_one_preparation_per_scrape_heard_and_none_before_it_is_due(clock: Clock) -> None:
    foresight = Foresight(clock)
    heard(clock, foresight, "prometheus", 0.0, 15.0, 30.0)
    assert not foresight.take(44.0)
    assert foresight.take(45.0 - LEAD)
    assert foresight.made == 1
    assert foresight.due() is None
    assert not foresight.take(60.0)  # the scraper stopped: nothing more is prepared
    heard(clock, foresight, "prometheus", 45.0)
    assert foresight.due() == pytest.approx(60.0 - LEAD)
    assert foresight.take(70.0)
    assert foresight.made == 2


def test_each_of_an_ha_pair_is_foreseen_on_its_own(clock: Clock) -> None:
    foresight = Foresight(clock)
    for moment in (0.0, 15.0, 30.0):
        heard(clock, foresight, "prometheus-a", moment)
        heard(clock, foresight, "prometheus-b", moment + 7.0)
    assert foresight.due() == pytest.approx(45.0 - LEAD)
    assert foresight.take(45.0 - LEAD)
    assert foresight.due() == pytest.approx(52.0 - LEAD)


def test_one_preparation_serves_every_scraper_due_by_then(clock: Clock) -> None:
    foresight = Foresight(clock)
    for moment in (0.0, 15.0, 30.0):
        heard(clock, foresight, "prometheus-a", moment)
        heard(clock, foresight, "prometheus-b", moment + 0.01)
    assert foresight.take(46.0)
    assert foresight.made == 1
    assert foresight.due() is None


def test_only_the_scrapers_heard_from_last_are_followed(clock: Clock) -> None:
    foresight = Foresight(clock)
    for moment in (0.0, 15.0, 30.0):
        for number in range(MAX_SCRAPERS):
            heard(clock, foresight, f"scraper-{number}", moment + number * 0.1)
    assert foresight.due() == pytest.approx(45.0 - LEAD)  # scraper-0's
    heard(clock, foresight, "newcomer", 31.0)  # scraper-0, heard from longest ago, is forgotten
    assert foresight.due() == pytest.approx(45.1 - LEAD)


def test_a_scraper_is_told_by_its_address_and_a_bounded_user_agent() -> None:
    long_agent = {"REMOTE_ADDR": "10.0.0.7", "HTTP_USER_AGENT": "P" * 100_000}
    assert scraper(long_agent) == "10.0.0.7 " + "P" * USER_AGENT_MAX
    assert scraper({"REMOTE_ADDR": "10.0.0.7"}) != scraper({"REMOTE_ADDR": "10.0.0.8"})
    assert scraper({}) == " "


events = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(0.001, 30.0), st.booleans()),
    max_size=60,
)


@given(events)
def test_a_preparation_is_due_when_said_and_never_more_than_one_per_scrape_heard(
    steps: list[tuple[str, float, bool]],
) -> None:
    clock = Clock()
    foresight = Foresight(clock)
    heard_so_far = 0
    for who, gap, take in steps:
        clock.now += gap
        if take:
            due = foresight.due()
            assert foresight.take(clock.now) == (due is not None and due <= clock.now)
        else:
            foresight.heard(who)
            heard_so_far += 1
        assert foresight.made <= heard_so_far


EVERY = 0.8  # seconds: a wavering of up to 0.3 s (a slow machine) still foresees the next


@pytest.mark.e2e
def test_a_steady_scraper_is_prepared_for_and_still_sees_every_line_written_before_it(
    tmp_path: Path, port: int
) -> None:
    """Lines go in 10 ms before each scrape, after its preparation (done 20 ms before): the
    scrape reads them all the same. A scraper asking at no steady interval gets none."""
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        url = f"http://127.0.0.1:{port}/metrics"
        steady = urllib.request.Request(url, headers={"User-Agent": "Prometheus/3.5.3"})
        start = time.monotonic()
        for number in range(1, 8):  # on a fixed grid, so a slow scrape does not shift the next
            time.sleep(max(0.0, start + EVERY * number - 0.01 - time.monotonic()))
            append(log, decode_line(2.0 + number / 10))
            time.sleep(max(0.0, start + EVERY * number - time.monotonic()))
            with urllib.request.urlopen(steady, timeout=5) as resp:
                s = Scrape(resp.read().decode())
            assert s.value("specwatch_log_lines_total") == number
            assert s.value("specwatch_accept_length") == pytest.approx(2.0 + number / 10)
        prepared = s.value("specwatch_scrapes_prepared_total")
        assert prepared is not None and prepared >= 1
        time.sleep(EVERY + 0.2)  # the steady scraper's next preparation, for a scrape not made
        prepared = d.scrape().value("specwatch_scrapes_prepared_total")
        for pause in (0.1, 0.6, 0.15, 0.7, 0.1, 0.6):  # another scraper, irregular
            time.sleep(pause)
            d.scrape()
        assert d.scrape().value("specwatch_scrapes_prepared_total") == prepared


def prepared_seen_by(prom: RunningPrometheus) -> float:
    result = prom.query("specwatch_scrapes_prepared_total")
    return float(result[0]["value"][1]) if result else 0.0


@pytest.mark.e2e
def test_a_real_prometheus_is_foreseen(tmp_path: Path, port: int) -> None:
    """Prometheus 3.5 scraping every second, over its kept-alive connection: its scrapes are
    foreseen from the third on, and it keeps scraping without a failure."""
    log = tmp_path / "server.log"
    log.touch()
    with (
        run_daemon(["--log-file", str(log)], port),
        running_prometheus(tmp_path, [f"127.0.0.1:{port}"]) as prom,
    ):
        prom.wait_for(lambda: prepared_seen_by(prom) >= 3 or None, timeout=60)
        [target] = prom.targets()
        assert target["health"] == "up", target
