"""Generated tokens and windows against the baseline, as counters, from real SGLang log lines.

The daemon reads each log from its start; the expected figures are worked out by hand from the
lines: each rank's throughput times the logged seconds since its previous line, nothing across
a gap of over a minute or a restart; windows are node moments, DP ranks of one moment summed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import run_daemon
from tests.support.loglines import decode, decode_line, stamp, startup
from tests.support.metrics import Scrape
from tests.support.speclogs import healthy_adaptive
from tests.support.tools import free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

CURVE = "1:82,48:1500,128:2370"  # 1,500 tok/s without speculation at 48 running


def read(tmp_path: Path, lines: list[str], *flags: str) -> Scrape:
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    args = ["--log-file", str(log), "--from-beginning", *flags]
    with run_daemon(args, free_port()) as daemon:

        def read_through() -> Scrape | None:
            scrape = daemon.scrape()
            done = (scrape.value("specwatch_log_lines_total") or 0) >= len(lines)
            return scrape if done else None

        return wait_for(read_through, timeout=30)


def test_tokens_are_throughput_times_logged_time_and_a_long_gap_adds_nothing(
    tmp_path: Path,
) -> None:
    lines = [
        *startup(),
        decode(60, 3.0, 0.67, tput=600),  # the first: no time since a predecessor
        decode(62, 3.0, 0.67, tput=900),  # 900 x 2 s
        decode(65, 3.0, 0.67, tput=1200),  # 1200 x 3 s
        decode(200, 3.0, 0.67, tput=1000),  # 135 s later: idle, nothing
        decode(201, 3.0, 0.67, tput=1000),  # 1000 x 1 s
    ]
    scrape = read(tmp_path, lines)
    assert scrape.value("specwatch_generated_tokens_total") == 900 * 2 + 1200 * 3 + 1000
    assert scrape.values("specwatch_windows_vs_baseline_total") == []  # no baseline


def test_a_restart_measures_no_gap_across_it(tmp_path: Path) -> None:
    server_args = startup()[0].split("] ", 1)[1]
    lines = [
        *startup(),
        decode(60, 3.0, 0.67, tput=600),
        decode(62, 3.0, 0.67, tput=600),  # 600 x 2 s
        f"{stamp(70)} {server_args}",  # restarted
        decode(80, 3.0, 0.67, tput=500),  # its first moment: nothing
        decode(82, 3.0, 0.67, tput=500),  # 500 x 2 s
    ]
    assert read(tmp_path, lines).value("specwatch_generated_tokens_total") == 1200 + 1000


def test_dp_ranks_of_one_moment_are_summed(tmp_path: Path) -> None:
    lines = startup()
    for second in (60, 62, 64):
        lines += [
            decode_line(3.0, rate=0.67, running=24, tput=300, stamp=stamp(second, f"DP{r} TP{r}"))
            for r in (0, 1)
        ]
    # Each rank: 300 tok/s for the 4 s from its first line to its last.
    scrape = read(tmp_path, lines, "--baseline-curve", CURVE)
    assert scrape.value("specwatch_generated_tokens_total") == 2 * 300 * 4
    # Moments close when a rank logs again: those of 60 s and 62 s.
    # Each closed moment: 48 running at 600 tok/s, below the 1,500 of the baseline.
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="at_or_below") == 2
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="above") == 0


def test_windows_are_counted_against_the_baseline_at_their_load(tmp_path: Path) -> None:
    lines = [
        *startup(),
        *(decode(60 + s, 1.0, 0.0, running=48, tput=600) for s in range(3)),  # 0.4x
        *(decode(70 + s, 3.2, 0.73, running=48, tput=2000) for s in range(2)),  # 1.33x
        decode(80, 3.2, 0.73, running=1, tput=82),  # exactly the baseline at 1: not above
    ]
    scrape = read(tmp_path, lines, "--baseline-curve", CURVE)
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="at_or_below") == 4
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="above") == 2
    # Not adaptive: no drafting-off series.
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="drafting_off") is None


def test_windows_adaptive_ran_with_drafting_off_are_counted_apart(tmp_path: Path) -> None:
    """SGLang 0.5.23 --speculative-adaptive: 6 windows drafting at 4 running (320 tok/s, above
    the baseline there), then 20 at 96 running with drafting off at 1,900 tok/s, below the
    2,000 of the baseline: plain decoding by design, not a window in which speculation lost."""
    scrape = read(tmp_path, healthy_adaptive(tput_off=1900.0), "--baseline-curve", "1:82,96:2000")
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="above") == 6
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="at_or_below") == 0
    assert scrape.value("specwatch_windows_vs_baseline_total", speed="drafting_off") == 20


def test_pipeline_stages_repeating_a_batch_count_once_and_are_not_held_to_the_baseline(
    tmp_path: Path,
) -> None:
    """--pp-size 2: each stage's TP0 prints the same micro-batches' line, the first stage's
    counts. A line's running requests are one micro-batch's, its throughput the pipeline's:
    against the baseline at 48 running this node would read above it, so no window is judged."""
    lines = startup()
    for second in (60, 62, 64):
        lines += [
            decode_line(
                3.0, rate=0.67, running=24, tput=1200, stamp=stamp(second, f"DP{r} PP{p} TP0")
            )
            for r in (0, 1)
            for p in (1, 0)
        ]
    scrape = read(tmp_path, lines, "--baseline-curve", CURVE)
    assert scrape.value("specwatch_generated_tokens_total") == 2 * 1200 * 4
    assert scrape.values("specwatch_running_requests") == [24, 24]  # a series per DP rank
    for speed in ("above", "at_or_below"):
        assert scrape.value("specwatch_windows_vs_baseline_total", speed=speed) == 0
    assert scrape.value("specwatch_speedup") is None
