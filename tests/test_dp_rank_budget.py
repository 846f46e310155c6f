"""Series budget with DP ranks: per-rank gauges up to ``max_dp_ranks``, the rest only in totals.

An on-call must see the one rank that collapsed, so ranks keep their own gauges; but a node
with many ranks must not cost more than 50 series plus 8 per rank that has its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.config import TargetConfig
from exporter.engines.record import StatsRecord
from exporter.state.target_state import TargetState
from exporter.target import Target
from tests.support.daemon import run_daemon
from tests.support.metrics import T0, Clock, render
from tests.support.records import decode
from tests.support.waiting import wait_for


def ranked(rank: int, accept_length: float = 3.0) -> StatsRecord:
    return decode(accept_length=accept_length)._replace(dp_rank=rank, tp_rank=rank)


def test_ranks_past_the_cap_count_in_totals_and_in_the_folded_gauge_only() -> None:
    target = Target(TargetConfig(name="node"), TargetState("node", max_dp_ranks=4))
    for rank in range(10):
        target.state.add_record(ranked(rank, accept_length=1.0 if rank == 9 else 3.0), T0)
    s = render([target], Clock())
    assert sorted(s.values("specwatch_accept_length")) == [3.0] * 4
    assert s.value("specwatch_accept_length", dp_rank="3") == 3.0
    assert s.value("specwatch_accept_length", dp_rank="4") is None
    assert s.value("specwatch_folded_dp_ranks", target="node") == 6
    assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 10
    assert s.value("specwatch_accept_length_windows_count") == 10
    assert s.value("specwatch_accept_length_windows_bucket", le="1.0") == 1  # the folded rank


def test_a_rank_with_series_keeps_them_when_the_cap_is_reached() -> None:
    target = Target(TargetConfig(name="node"), TargetState("node", max_dp_ranks=2))
    for rank in (0, 1, 2, 0, 2):
        target.state.add_record(ranked(rank, accept_length=1.5 + rank), T0)
    s = render([target], Clock())
    assert s.value("specwatch_accept_length", dp_rank="0") == 1.5
    assert s.value("specwatch_accept_length", dp_rank="1") == 2.5
    assert s.value("specwatch_folded_dp_ranks") == 1


def _busy_log(path: Path, ranks: int, seconds: int) -> int:
    """Decode lines of ``ranks`` DP ranks, one per rank and second, each with an accept rate."""
    lines = []
    for second in range(seconds):
        stamp = f"2026-02-23 00:{second // 60:02d}:{second % 60:02d}"
        for rank in range(ranks):
            lines.append(
                f"[{stamp} DP{rank} TP{rank} EP{rank}] Decode batch, #running-req: 40, "
                f"#token: 9000, token usage: 0.50, accept len: 3.00, accept rate: 0.75, "
                f"cuda graph: True, gen throughput (token/s): 1900.00, #queue-req: 2"
            )
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


@pytest.mark.e2e
def test_a_64_rank_node_stays_within_the_series_budget(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    total = _busy_log(log, ranks=64, seconds=3)
    args = ["--log-file", str(log), "--from-beginning", "--stale-after", "1e9"]
    with run_daemon(args, port) as daemon:
        s = wait_for(
            lambda: (
                s if (s := daemon.scrape()).value("specwatch_log_lines_total") == total else None
            )
        )
    per_target = sum(1 for sample in s.samples if sample.labels.get("target") == "default")
    assert len(s.values("specwatch_accept_length")) == 32
    assert s.value("specwatch_folded_dp_ranks") == 32
    assert per_target <= 50 + 8 * 32
