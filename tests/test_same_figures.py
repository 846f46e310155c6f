"""``doctor --json``, ``report --json`` and the daemon's ``/metrics`` give the same figures for
the same log: accept length (node and per DP rank), accept ratio, findings, draft-token count
and algorithm, and the speedup against one baseline curve, each to the rounding it is printed
with.

Each log is written in the engine's own format, read in full by all three: the two commands
run to their end, the daemon (``specwatch run --from-beginning`` over loopback) is scraped
once it has counted every line of the file.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from exporter.analysis.findings import SEVERITIES
from tests.support.daemon import RunningDaemon, run_daemon, specwatch_cmd
from tests.support.loglines import VLLM_START, crashed, decode_line, stamp, startup, vllm_interval
from tests.support.metrics import Scrape
from tests.support.speclogs import decode, given_up_adaptive, healthy_adaptive, server_args
from tests.support.tools import free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

BASELINE = "1:60,16:500,48:1500,128:2100"


def one_rank_collapsed() -> list[str]:
    """Six DP-attention ranks; rank 3 accepts nothing (SGLang's rate: accepted drafts over
    the three proposed each round)."""
    lines = startup()
    for moment in range(10):
        for rank in range(6):
            accept = 1.0 if rank == 3 else 2.5
            lines.append(
                decode_line(
                    accept,
                    rate=(accept - 1) / 3,
                    running=8,
                    queue=0,
                    tput=450,
                    stamp=stamp(260 + 4 * moment, f"DP{rank} TP{rank}"),
                )
            )
    return lines


def ngram() -> list[str]:
    """NGRAM with eight draft tokens, accepting a third of them."""
    lines = [server_args("NGRAM", steps=7, topk=1, draft_tokens=8)]
    return lines + [decode(300 + 5 * i, 3.4, draft_tokens=8, tput=1700.0) for i in range(8)]


def vllm_collapsed() -> list[str]:
    """vLLM 0.33 whose EAGLE-3 drafter accepts nothing."""
    return [VLLM_START] + [line for s in range(0, 60, 10) for line in vllm_interval(s)]


# Adaptive with drafting off at 96 running, where the curve gives 1,860 tok/s: 0.95x of it is
# what keeping speculation ready costs (nothing said), 0.60x far more (drafting_off_below_baseline).
LOGS = {
    "crashed": crashed(),
    "one-rank-collapsed": one_rank_collapsed(),
    "adaptive-off": given_up_adaptive(),
    "adaptive-off-tolerated": healthy_adaptive(tput_off=0.95 * 1860),
    "adaptive-off-far-below": healthy_adaptive(tput_off=0.6 * 1860),
    "ngram": ngram(),
    "vllm-collapsed": vllm_collapsed(),
}
# Logs whose draft-token note (with the accept ratio) doctor and report leave out.
NO_RATIO_PRINTED = {"adaptive-off", "adaptive-off-tolerated", "adaptive-off-far-below"}
# What each log is judged to be, by code: findings, and the verdicts the daemon gives as a
# finding of its recent windows (speed while drafting is off).
JUDGED = {
    "adaptive-off": {("adaptive_drafter_given_up", "warning")},
    "adaptive-off-tolerated": set(),
    "adaptive-off-far-below": {("drafting_off_below_baseline", "warning")},
}
# Speedups of a log whose throughput varies: the run's mean and its newest window's. The
# adaptive log runs 32 windows at 545 tok/s and 8 at 520 (the last) against 500 at 16 running.
UNSTEADY = {"adaptive-off": (round((32 * 545 + 8 * 520) / 40 / 500, 1), round(520 / 500, 1))}


def command(*args: str) -> dict[str, Any]:
    """A one-shot command's JSON output (its exit status is the verdicts' business)."""
    done = subprocess.run(specwatch_cmd(*args), capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1, 3), done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def daemon_scrape(daemon: RunningDaemon, lines: int) -> Scrape:
    """The first scrape after the daemon has read all ``lines`` of the log."""

    def read_all() -> Scrape | None:
        s = daemon.scrape()
        return s if s.value("specwatch_log_lines_total", target="t") == lines else None

    found = wait_for(read_all, timeout=20)
    assert found is not None
    return found


def findings(data: dict[str, Any]) -> set[tuple[str, str]]:
    """The findings, and the verdicts whose code the daemon has as a finding."""
    judged = [*data["findings"], *(v for v in data["verdicts"] if v["code"] in SEVERITIES)]
    return {(f["code"], f["severity"]) for f in judged}


def daemon_findings(s: Scrape) -> set[tuple[str, str]]:
    return {
        (x.labels["code"], x.labels["severity"])
        for x in s.samples
        if x.name == "specwatch_finding" and x.value == 1
    }


def ranks(run: dict[str, Any]) -> dict[str, float]:
    return {str(r["dp_rank"]): round(r["accept_length"], 2) for r in run["dp_ranks"]}


def daemon_ranks(s: Scrape) -> dict[str, float]:
    return {
        x.labels["dp_rank"]: round(x.value, 2)
        for x in s.samples
        if x.name == "specwatch_accept_length" and "dp_rank" in x.labels
    }


def ratio_percent(text: str) -> int:
    """The accept ratio the draft-token note prints: 'N of K proposed drafts accepted (P%)'."""
    found = re.search(r"proposed drafts accepted \((\d+)%\)", text)
    assert found is not None, text
    return int(found.group(1))


@pytest.mark.parametrize("name", list(LOGS))
def test_doctor_report_and_daemon_give_the_same_figures(tmp_path: Path, name: str) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"{line}\n" for line in LOGS[name]))
    baseline = ("--baseline-curve", BASELINE)
    doctor = command("doctor", "--log-file", str(log), "--json", *baseline)
    report = command("report", str(log), "--json", *baseline)
    args = ["--log-file", str(log), "--from-beginning", "--target", "t", *baseline]
    with run_daemon(args, free_port()) as daemon:
        metrics = daemon_scrape(daemon, len(LOGS[name]))

    d_run, r_run = doctor["run"], report["runs"][-1]
    # The accept length over the run's windows: doctor, report, and the daemon's histogram.
    windows = metrics.value("specwatch_accept_length_windows_count", target="t")
    total = metrics.value("specwatch_accept_length_windows_sum", target="t")
    assert windows and total is not None
    node = round(total / windows, 2)
    assert round(d_run["accept_length"], 2) == round(r_run["accept_length"], 2) == node
    # Per DP rank: each rank is steady here, so its run mean (doctor, report) and its newest
    # window (the daemon's gauge) are one figure.
    assert ranks(d_run) == ranks(r_run)
    if d_run["dp_ranks"]:
        assert ranks(d_run) == daemon_ranks(metrics)
    # Findings, by code and severity.
    assert findings(doctor) == findings(report) == daemon_findings(metrics)
    if name in JUDGED:
        assert findings(doctor) == JUDGED[name]
    # Algorithm and draft-token count as started, then the draft steps in force (adaptive's
    # newest choice, which the daemon's gauges follow).
    info = [x.labels for x in metrics.samples if x.name == "specwatch_speculative_info"]
    started = {
        (c["algorithm"], str(c["num_draft_tokens"])) for c in (doctor["config"], report["config"])
    }
    assert started == {(i["algorithm"], i["num_draft_tokens"]) for i in info}
    assert doctor["config"]["active_steps"] == report["config"]["active_steps"]
    steps = doctor["config"]["active_steps"]
    if steps is None:
        steps = doctor["config"]["num_steps"]
    assert metrics.value("specwatch_speculative_steps", target="t") == steps
    # Accept ratio, as the draft-token note prints it, against the daemon's gauges.
    # (not printed while adaptive has drafting off: the ratio of its probes is no verdict).
    printed = [ratio_percent(n) for n in doctor["notes"] if "proposed drafts accepted" in n]
    breakeven = report["breakeven"]
    assert printed == ([] if breakeven is None else [ratio_percent(breakeven["explanation"])])
    assert len(printed) == (name not in NO_RATIO_PRINTED)
    ratios = metrics.values("specwatch_accept_ratio", target="t")
    if printed:
        assert printed == [round(100 * sum(ratios) / len(ratios))]
    # Speedup against the same curve, to the tenth it is printed with ("1.6x"). The daemon's
    # gauge is the newest window's; doctor and report judge the run's mean. Alike for a steady
    # log; the adaptive one's probes run slower than its drafting-off windows.
    speedup = metrics.value("specwatch_speedup", target="t")
    assert speedup is not None and d_run["speedup"] is not None
    assert round(d_run["speedup"], 1) == round(r_run["speedup"], 1)
    run_mean, newest = UNSTEADY.get(name, (round(speedup, 1),) * 2)
    assert (round(d_run["speedup"], 1), round(speedup, 1)) == (run_mean, newest)
