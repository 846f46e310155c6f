"""The present and the past apart, on enough evidence: ``doctor`` and ``report`` judge the
newest stretch of a run's decode windows, say since when, and tell the run's past as past.

The logs are SGLang 0.5.23's lines (``tests/support/speclogs.py``, written from its code) and
vLLM 0.33's (``tests/support/vllm_spec.py``, its logging computation).
"""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from tests.support import speclogs
from tests.support.files import write_log
from tests.support.loglines import T0
from tests.support.vllm_spec import Interval, lookup_interval

BASELINE = ("--baseline-curve", "1:82,4:330,48:1500,96:2040,128:2370")


def judged(
    capsys: pytest.CaptureFixture[str], tmp: Path, lines: list[str], *flags: str
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """doctor's exit status and JSON, and report's JSON, of one log."""
    log = write_log(tmp, lines)
    status = main(["doctor", "--log-file", log, "--json", *flags])
    doctor = json.loads(capsys.readouterr().out)
    assert main(["report", log, "--json", *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert doctor["verdict"] == report["verdict"]  # one judgement, whoever asks
    return status, doctor, report


def minutes(start: float, end: float, accept: float, every: float = 10.0, **kw: Any) -> list[str]:
    """SGLang decode lines every ``every`` seconds from ``start`` to ``end`` minutes."""
    at, lines = start * 60, []
    while at < end * 60:
        lines.append(speclogs.decode(at, accept, **kw))
        at += every
    return lines


def at_minute(minute: float) -> str:
    return (T0 + timedelta(minutes=minute)).isoformat()


def test_a_collapse_three_minutes_old_after_two_healthy_hours_is_the_state_now(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = [speclogs.server_args("EAGLE3", draft_path="/models/eagle3")]
    lines += minutes(1, 121, 3.1, tput=1900.0)
    lines += minutes(121, 124, 1.0, tput=700.0)
    status, doctor, report = judged(capsys, tmp_path, lines, *BASELINE)
    assert status == 3
    verdict = doctor["verdict"]
    assert verdict["state"] == "collapsed"
    assert verdict["since"] == at_minute(121)
    assert verdict["accept_length"] == pytest.approx(1.0)
    assert "accept_length_collapsed" in [v["code"] for v in doctor["verdicts"]]
    assert report["headline"].startswith("Speculative decoding collapsed")


def test_a_collapse_that_ended_an_hour_ago_is_told_as_past_not_judged_as_now(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = [speclogs.server_args("EAGLE3", draft_path="/models/eagle3")]
    lines += minutes(1, 30, 3.1, tput=1900.0)
    lines += minutes(30, 50, 1.0, tput=700.0)
    lines += minutes(50, 110, 3.1, tput=1900.0)
    status, doctor, _report = judged(capsys, tmp_path, lines, *BASELINE)
    assert status == 0
    assert doctor["verdict"]["state"] == "healthy"
    assert doctor["verdict"]["since"] == at_minute(50)
    [past] = doctor["verdict"]["past"]
    assert past["state"] == "collapsed"
    assert (past["start"], past["accept_length"]) == (at_minute(30), pytest.approx(1.0))
    assert any("Earlier in this run: collapsed" in line for line in report_text(capsys, tmp_path))


def report_text(capsys: pytest.CaptureFixture[str], tmp: Path) -> list[str]:
    assert main(["report", str(next(tmp.glob("*.log")))]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_slow_drift_below_the_expected_accept_length_is_low_and_says_where_it_fell_from(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """3.2 to 1.9 over six hours, with 3.0 expected: the run's mean (2.55) is above 2.1."""
    lines = [speclogs.server_args("EAGLE3", draft_path="/models/eagle3")]
    for hour in range(6):
        lines += minutes(1 + 60 * hour, 61 + 60 * hour, 3.2 - 0.26 * hour, every=30.0)
    status, doctor, _ = judged(capsys, tmp_path, lines, "--expected-accept-length", "3.0")
    assert status == 1
    assert doctor["verdict"]["state"] == "accept_length_low"
    [low] = doctor["verdicts"]
    assert "down from 3.20 in the run's first hour" in low["seen"]


def test_a_slow_drift_above_the_floor_is_its_own_state(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = [speclogs.server_args("EAGLE3", draft_path="/models/eagle3")]
    for hour in range(4):
        lines += minutes(1 + 60 * hour, 61 + 60 * hour, 3.2 - 0.3 * hour, every=30.0)
    status, doctor, _ = judged(capsys, tmp_path, lines)
    assert status == 1
    assert doctor["verdict"]["state"] == "drifting"
    assert [v["code"] for v in doctor["verdicts"]] == ["accept_length_drifting"]


def test_drafting_off_tolerance_applies_to_the_windows_judged_not_to_the_whole_log(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An adaptive node speculating for an hour, then 30 minutes all drafting off at 0.96x:
    37 % of the log is off, so the old run-wide share called it slower than the baseline."""
    lines = speclogs.adaptive_start()
    lines += minutes(1, 51, 3.1, running=4, tput=600.0)
    lines.append(speclogs.runtime_switched(3, 0, 51 * 60))
    lines += minutes(51.1, 81, 1.0, running=96, tput=0.96 * 2040)
    status, doctor, _ = judged(capsys, tmp_path, lines, *BASELINE)
    assert doctor["verdict"]["state"] == "drafting_off"
    assert doctor["verdicts"] == []
    assert status == 0


def vllm_log(intervals: list[Interval], method: str = "ngram", k: int = 4) -> list[str]:
    model = "None" if method == "ngram" else "'/models/draft'"
    lines = [
        "INFO 12-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.33.0) with config: "
        "model='/models/target', speculative_config="
        f"SpeculativeConfig(method='{method}', model={model}, num_spec_tokens={k}), "
        "tokenizer='/models/target', enforce_eager=False, seed=None",
    ]
    for i, interval in enumerate(intervals):
        at = f"12-01 10:{1 + i // 6:02d}:{10 * (i % 6):02d}"
        lines += [
            f"INFO {at} [loggers.py:111] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
            "Avg generation throughput: 1210.0 tokens/s, Running: 32 reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
            f"INFO {at} [metrics.py:82] {interval.body()}",
        ]
    return lines


def test_ngram_drafting_a_few_dozen_times_is_too_few_drafts_never_a_collapse(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Traffic that never repeats: 27 drafts in six intervals, 2 accepted (vLLM's counters:
    1.074); the old mean of the six printed means paged critical."""
    rng = random.Random(7)
    intervals = []
    for drafts in (5, 4, 6, 4, 4, 4):
        interval = Interval(4)
        for _ in range(drafts):
            interval.observe_draft(rng.randint(1, 4), 0)
        intervals.append(interval)
    intervals[0].observe_draft(2, 1)
    intervals[3].observe_draft(3, 1)
    status, doctor, _ = judged(capsys, tmp_path, vllm_log(intervals))
    verdict = doctor["verdict"]
    assert verdict["state"] == "too_few_drafts"
    # A line with nothing accepted tells only the fewest rounds it can hold (drafted / 4).
    assert 8 <= verdict["drafts"] <= 29
    note = f"too few drafts: {verdict['drafts']} draft rounds in 6 decode windows"
    assert any(n.startswith(note) for n in verdict["notes"])
    assert status == 0


def test_window_means_are_weighed_by_their_drafts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A busy interval near 4 and five quiet ones near 1.1: the rounds say 3.5, not 1.6."""
    rng = random.Random(3)
    busy = lookup_interval(rng, 4, 1000, 0.9)
    quiet = [lookup_interval(rng, 4, 40, 0.1) for _ in range(5)]
    _, doctor, _ = judged(capsys, tmp_path, vllm_log([busy, *quiet]))
    rounds = busy.drafts + sum(q.drafts for q in quiet)
    accepted = busy.accepted + sum(q.accepted for q in quiet)
    assert doctor["verdict"]["accept_length"] == pytest.approx(1 + accepted / rounds, abs=0.002)


RECORDED = Path(__file__).parent / "recordings" / "vllm-0.24.0"


@pytest.mark.parametrize(
    ("scenario", "state"),
    [
        ("healthy", "healthy"),
        ("collapsed", "collapsed"),
        # n-gram on traffic that never repeats: a handful of drafts, 1.07 by vLLM's counters.
        ("ngram", "too_few_drafts"),
        ("cuda-graphs-off", "healthy"),
    ],
)
def test_a_real_vllm_servers_log_is_judged_on_its_drafts(
    scenario: str, state: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(RECORDED / scenario / "server.log.gz")
    main(["doctor", "--log-file", log, "--json"])
    doctor = json.loads(capsys.readouterr().out)
    assert doctor["verdict"]["state"] == state
    if state == "too_few_drafts":
        assert doctor["verdicts"] == []
        # Nothing to size the drafter by either: no draft-token advice on a few dozen drafts.
        assert not [note for note in doctor["notes"] if note.startswith("draft tokens:")]
