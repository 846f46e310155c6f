"""The tail of a log read at start, on the daemon's clock: each window at its logged distance
before the file's last write (``feed.spread_back``), so the judge sees its minutes as minutes."""

from __future__ import annotations

import pytest

from exporter.engines.record import StatsRecord
from exporter.state.feed import spread_back

MTIME = 1_800_000_000.0


def decode(time: str | None) -> StatsRecord:
    return StatsRecord("decode", time=time, accept_length=2.0)


def test_each_window_is_its_logged_distance_before_the_last_one() -> None:
    records = [decode("2026-05-20T09:00:00"), decode("2026-05-20T09:09:30"), decode(None)]
    records.append(decode("2026-05-20T09:10:00"))
    assert spread_back(records, MTIME) == [MTIME - 600, MTIME - 30, MTIME, MTIME]


def test_ranks_of_one_second_share_their_time() -> None:
    records = [decode("2026-05-20T09:00:00")] * 8 + [decode("2026-05-20T09:00:01")] * 8
    assert spread_back(records, MTIME) == [MTIME - 1] * 8 + [MTIME] * 8


@pytest.mark.parametrize(
    "times",
    [
        # a restart logging in another time zone, an hour behind: its lines are the newest
        ["2026-05-20T10:05:00", "2026-05-20T10:10:00", "2026-05-20T09:11:00"],
        # no time that reads as one
        [None, "2026-02-30T00:00:00", None],
    ],
)
def test_no_window_is_put_later_than_the_last_write_nor_the_newest_earlier(
    times: list[str | None],
) -> None:
    spread = spread_back([decode(time) for time in times], MTIME)
    assert max(spread) <= MTIME
    assert spread[-1] == MTIME


def test_no_records_no_times() -> None:
    assert spread_back([], MTIME) == []
