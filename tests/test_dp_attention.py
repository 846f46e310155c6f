"""DP attention: eight ranks each log their own decode line; the node is their sum.

``report``, ``doctor`` and the daemon must compare the node's throughput at the node's
concurrency with the node's baseline. The log below is a tp8 dp8 server (prefix
``DPn TPn EPn``): ranks run 4 to 8 requests, 48 in all, and make 1,050 tok/s together, the
same in every round. The curve's baseline at 48 running is 1,500 tok/s, so the node runs at
1,050 / 1,500 = 0.70x. One rank alone (rank 0: 6 running, 131.25 tok/s) against the curve at
6 running (82 + 1,418 * 5 / 47 = 232.9 tok/s) would read 0.56x.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.daemon import doctor, in_process, run_daemon
from tests.support.loglines import stamp, startup

pytestmark = pytest.mark.e2e

CURVE = "1:82,48:1500,128:2370"
# (running, tok/s) per DP rank: 48 running and 1,050 tok/s on the node.
RANKS = [
    (6, 131.25),
    (4, 87.5),
    (8, 175.0),
    (6, 131.25),
    (5, 109.375),
    (7, 153.125),
    (6, 131.25),
    (6, 131.25),
]


def dp_decode(seconds: float, rank: int, running: int, tput: float) -> str:
    return (
        f"{stamp(seconds, f'DP{rank} TP{rank} EP{rank}')} Decode batch, #running-req: {running}, "
        f"#token: 40213, token usage: 0.21, accept len: 2.41, accept rate: 0.47, "
        f"cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0"
    )


def dp_log(rounds: int = 10) -> list[str]:
    lines = [line.replace("tp_size=2, dp_size=1", "tp_size=8, dp_size=8") for line in startup()]
    for i in range(rounds):
        lines += [dp_decode(300 + 4 * i, rank, *load) for rank, load in enumerate(RANKS)]
    return lines


def test_ranks_add_up_to_the_node_figures_of_the_example() -> None:
    assert sum(r for r, _ in RANKS) == 48
    assert sum(t for _, t in RANKS) == pytest.approx(1050)


def test_report_and_daemon_give_the_same_node_speedup(tmp_path: Path, port: int) -> None:
    source = tmp_path / "dp.log"
    source.write_text("\n".join(dp_log()) + "\n")
    result = in_process("report", "--json", str(source), "--baseline-curve", CURVE)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dp_ranks"] == 8
    [run] = data["runs"]
    assert (run["running"], run["throughput"]) == (48, pytest.approx(1050))
    assert run["speedup"] == pytest.approx(0.70)
    assert [band["label"] for band in data["bands"]] == ["32-63"]  # per node, not per rank
    assert data["bands"][0]["windows"] == 10  # one node window per round
    assert "(0.7x), 1,050 tok/s at 48 running vs 1,500 tok/s baseline" in data["headline"]

    watched = tmp_path / "server.log"  # appears after start: read from its first byte
    with run_daemon(["--log-file", str(watched), "--baseline-curve", CURVE], port) as daemon:
        watched.write_bytes(source.read_bytes())
        scrape = daemon.wait_metric(
            "specwatch_speedup", lambda v: v is not None and abs(v - 0.70) < 1e-6, 20
        )
    assert scrape.value("specwatch_speedup") == pytest.approx(run["speedup"])
    assert scrape.value("specwatch_baseline_gen_throughput_tokens_per_second") == pytest.approx(
        1500
    )


def test_doctor_judges_the_node_not_one_rank(tmp_path: Path) -> None:
    log = tmp_path / "dp.log"
    log.write_text("\n".join(dp_log()) + "\n")
    result = doctor("--json", "--log-file", str(log), "--baseline-curve", CURVE)
    data = json.loads(result.stdout)
    assert result.returncode == 1
    [verdict] = data["verdicts"]
    assert verdict["seen"] == (
        "1,050 tok/s at 48 running requests against a baseline of 1,500 tok/s there (0.70x)."
    )
