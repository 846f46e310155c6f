"""The speedup metric of a live ``specwatch run`` against each kind of baseline.

The daemon tails a log that appears after start (so it is read from its first byte), and the
newest decode window sets the per-window gauges. Expected values come from the last window of
each fixture log (see tests/test_report.py for their contents) and the baseline given:

* collapsed:    610 tok/s at 48 running; bench file baseline at 48 is 1560 -> 0.391
* undertrained: 59 tok/s single-stream; baseline 90 tok/s -> 0.656
* mismatched:   54 tok/s single-stream; curve baseline at 1 running is 82 -> 0.659
* healthy:      2356 tok/s at 32 running; bench baseline 1100 + 460 * 8 / 24 = 1253.3 -> 1.880
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.daemon import run_daemon

pytestmark = pytest.mark.e2e

DATA = Path(__file__).parent / "data"
BENCH = str(DATA / "bench_serving_baseline.jsonl")


@pytest.mark.parametrize(
    ("log", "baseline", "tok_s", "base_tok_s"),
    [
        ("collapsed.log", ["--baseline-bench", BENCH], 610.0, 1560.0),
        ("undertrained.log", ["--baseline-tok-s", "90"], 59.0, 90.0),
        ("mismatched.log", ["--baseline-curve", "1:82,48:1500,128:2370"], 54.0, 82.0),
        ("healthy.log", ["--baseline-bench", BENCH], 2356.0, 1100 + 460 * 8 / 24),
    ],
)
def test_daemon_exports_speedup_against_the_baseline(
    tmp_path: Path, port: int, log: str, baseline: list[str], tok_s: float, base_tok_s: float
) -> None:
    watched = tmp_path / "server.log"
    with run_daemon(["--log-file", str(watched), *baseline], port) as daemon:
        shutil.copy(DATA / "logs" / log, watched)
        scrape = daemon.wait_metric(
            "specwatch_gen_throughput_tokens_per_second", lambda v: v == tok_s, 15
        )
        baseline_value = scrape.value("specwatch_baseline_gen_throughput_tokens_per_second")
        speedup = scrape.value("specwatch_speedup")
    assert baseline_value == pytest.approx(base_tok_s)
    assert speedup == pytest.approx(tok_s / base_tok_s)
    is_healthy = log == "healthy.log"
    assert speedup is not None
    assert (speedup > 1) is is_healthy
