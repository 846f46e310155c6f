"""The requests' distribution as the state keeps it, and the finding judged on its share."""

from __future__ import annotations

import pytest

from exporter.analysis.findings import DecodeSample, Observations, evaluate
from exporter.analysis.request_share import RecentShare
from exporter.engines.record import RequestRecord
from exporter.engines.server_config import ServerConfig
from exporter.state.requests import RECENT_SECONDS, RequestStats

CODE = "requests_without_benefit"


def request(
    length: float, rounds: int = 40, rate: float | None = None, time: str = "2026-02-23T00:14:33"
) -> RequestRecord:
    completion = round(length * rounds)
    return RequestRecord(time, length, rate, rounds, completion)


def test_no_draft_accepted_needs_enough_rounds() -> None:
    stats = RequestStats()
    stats.add(
        [
            request(1.0 + 1 / 40, 40),  # the prefill's token and one per round: nothing accepted
            request(1.0 + 1 / 4, 4),  # as little, but four rounds say nothing about a drafter
            request(1.04, 40, rate=0.01),  # the logged rate counts accepted drafts exactly
            request(1.04, 40, rate=0.0),
        ],
        observed_at=1000.0,
    )

    counts = stats.snapshot(1000.0).classes[None]

    assert (counts.count, counts.no_draft) == (4, 2)


def test_the_recent_share_forgets_what_is_older_than_its_window() -> None:
    stats = RequestStats()
    stats.add([request(1.0, time="2026-02-23T00:00:01")] * 5, observed_at=1000.0)
    stats.add([request(2.5, time="2026-02-23T00:10:00")] * 5, observed_at=1600.0)

    assert stats.snapshot(1600.0).recent == RecentShare(
        10, 5, "2026-02-23T00:00:01", "2026-02-23T00:10:00"
    )
    later = stats.snapshot(1000.0 + RECENT_SECONDS + 1)
    assert later.recent == RecentShare(5, 0, "2026-02-23T00:10:00", "2026-02-23T00:10:00")
    assert later.classes[None].count == 10  # the histogram is a counter: it keeps them all


def test_requests_of_an_old_log_read_after_live_ones_are_not_recent() -> None:
    """A log last written 2 hours ago moved in beside a live one: its requests count in the
    histogram, never in the recent share."""
    stats = RequestStats()
    stats.add([request(2.5, time="2026-02-23T02:10:00")] * 5, observed_at=10_000.0)
    stats.add([request(1.0, time="2026-02-23T00:10:00")] * 5, observed_at=10_000.0 - 7200)
    snapshot = stats.snapshot(10_001.0)
    assert snapshot.recent == RecentShare(5, 0, "2026-02-23T02:10:00", "2026-02-23T02:10:00")
    assert snapshot.classes[None].count == 10


def test_requests_without_figures_are_finished_but_not_speculative() -> None:
    stats = RequestStats()
    stats.add([RequestRecord("2026-02-23T00:14:33", None, None, None, 12)], observed_at=1.0)

    snap = stats.snapshot(1.0)

    assert (snap.finished, snap.classes, snap.recent) == (1, {}, None)


EAGLE3 = ServerConfig(algorithm="EAGLE3", num_steps=3, num_draft_tokens=4)  # floor 1.8


def _observed(share: RecentShare, average: float, config: ServerConfig = EAGLE3) -> Observations:
    windows = (DecodeSample(accept_length=average),) * 5
    return Observations(config=config, windows=windows, requests=share)


def test_the_finding_names_the_share_and_the_time_range() -> None:
    share = RecentShare(200, 30, "2026-02-23T00:10:02", "2026-02-23T00:24:59")

    (finding,) = [f for f in evaluate(_observed(share, 2.4)) if f.code == CODE]

    assert finding.summary.startswith("15% of requests")
    assert "30 of 200" in finding.seen
    assert "between 2026-02-23 00:10:02 and 2026-02-23 00:24:59" in finding.seen
    assert "2.40" in finding.seen


@pytest.mark.parametrize(
    ("share", "average"),
    [
        (RecentShare(200, 10, None, None), 2.4),  # 5%: the tail any drafter has
        (RecentShare(200, 100, None, None), 1.3),  # low for EAGLE-3: its own verdicts say so
        (RecentShare(10, 5, None, None), 2.4),  # ten requests are no share
    ],
)
def test_no_finding_without_a_hidden_share(share: RecentShare, average: float) -> None:
    assert CODE not in {f.code for f in evaluate(_observed(share, average))}


def test_an_algorithm_healthy_at_a_lower_average_is_judged_by_its_floor() -> None:
    """An NGRAM drafter is healthy at 1.3 (floor 1.2); one judged by no floor, at any."""
    share = RecentShare(200, 40, None, None)
    ngram = ServerConfig(algorithm="NGRAM", num_draft_tokens=4)

    for config in (ngram, ServerConfig(algorithm="SOMETHING_NEW")):
        assert CODE in {f.code for f in evaluate(_observed(share, 1.3, config))}


def test_the_snapshot_names_the_traffic_class_most_without_benefit() -> None:
    stats = RequestStats(label_header="x-smg-routing-key")
    tenant = (("x-smg-routing-key", "tenant-ja"),)
    other = (("x-smg-routing-key", "tenant-en"),)
    few = (("x-smg-routing-key", "tenant-xx"),)
    records = [request(1.0 + 1 / 40)._replace(headers=tenant) for _ in range(30)]
    records += [request(2.6)._replace(headers=other) for _ in range(170)]
    records += [request(1.0 + 1 / 40)._replace(headers=few) for _ in range(5)]  # too few
    stats.add(records, observed_at=100.0)

    recent = stats.snapshot(100.0).recent

    assert recent is not None
    assert (recent.worst_class, recent.worst_class_share) == ("tenant-ja", 1.0)
    (finding,) = [f for f in evaluate(_observed(recent, 2.4)) if f.code == CODE]
    assert finding.seen.endswith(
        "Traffic class tenant-ja has the largest share: 100% of its requests since the start."
    )


def test_without_traffic_classes_the_finding_names_none() -> None:
    stats = RequestStats()
    stats.add([request(1.0 + 1 / 40)] * 30 + [request(2.6)] * 170, observed_at=100.0)

    recent = stats.snapshot(100.0).recent

    assert recent is not None and recent.worst_class is None
    (finding,) = [f for f in evaluate(_observed(recent, 2.4)) if f.code == CODE]
    assert "Traffic class" not in finding.seen
