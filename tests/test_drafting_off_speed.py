"""Speed while drafting is off: SGLang's --speculative-adaptive turns drafting off at high load
by design, and SGLang 0.5.23 still runs the draft model's extend every round at 0 steps to keep
its cache warm. So a healthy node at 96 running requests runs a little below the
non-speculative baseline; that is no warning. Far below it is, named as the cost of keeping
speculation ready, with SGLang's own remedy, and never as "speculation is slower".

Logs in SGLang 0.5.23's format (``tests/support/speclogs.py``): 6 windows drafting 3 steps at
4 running, then 20 with drafting off at 96 running, against 2,000 tok/s at 96 running.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.config import BaselineConfig, TargetConfig
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.files import write_log
from tests.support.metrics import Clock, Scrape, render
from tests.support.speclogs import adaptive_start, decode, healthy_adaptive

CURVE = "1:82,96:2000"
TOLERATED = 1900.0  # 0.95x the baseline at 96 running: what keeping speculation ready costs
FAR_BELOW = 1200.0  # 0.60x: far more than that


def doctor_json(
    capsys: pytest.CaptureFixture[str], lines: list[str], tmp_path: Path, *flags: str
) -> tuple[int, dict[str, Any]]:
    log = write_log(tmp_path, lines)
    code = main(["doctor", "--log-file", log, "--json", "--baseline-curve", CURVE, *flags])
    return code, json.loads(capsys.readouterr().out)


def codes(items: list[dict[str, str]]) -> list[str]:
    return [item["code"] for item in items]


def test_a_small_shortfall_with_drafting_off_is_no_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = doctor_json(capsys, healthy_adaptive(tput_off=TOLERATED), tmp_path)
    assert round(data["run"]["speedup"], 2) == 0.95
    assert (code, data["verdicts"], data["findings"]) == (0, [], [])


def test_far_below_the_baseline_with_drafting_off_names_the_cost_and_sglangs_remedy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = doctor_json(capsys, healthy_adaptive(tput_off=FAR_BELOW), tmp_path)
    assert code == 1
    [verdict] = data["verdicts"]
    assert (verdict["code"], verdict["severity"]) == ("drafting_off_below_baseline", "warning")
    assert verdict["summary"].startswith("Drafting is off at this load")
    assert "slower than serving without it" not in verdict["summary"]
    assert verdict["seen"] == (
        "1,200 tok/s at 96 running requests against a baseline of 2,000 tok/s there (0.60x), "
        "with drafting off (adaptive) in 20 of 26 decode windows: below the 0.9x that keeping "
        "speculation ready may cost."
    )
    assert "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1" in verdict["fix"]
    assert "--speculative-adaptive-config" in verdict["fix"]
    assert "cold" in verdict["fix"]
    assert "vLLM" not in verdict["fix"]


def test_report_gives_the_same_verdict_for_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for tput, expected in ((TOLERATED, []), (FAR_BELOW, ["drafting_off_below_baseline"])):
        log = write_log(tmp_path, healthy_adaptive(tput_off=tput))
        main(["report", log, "--json", "--baseline-curve", CURVE])
        run = json.loads(capsys.readouterr().out)["runs"][-1]
        assert codes(run["verdicts"]) == expected


def test_drafting_on_keeps_todays_judgement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same adaptive server drafting 3 steps at 96 running: speculation runs, so 0.95x is
    slower than serving without it."""
    lines = adaptive_start() + [decode(100 + 5 * i, 3.1, running=96, tput=1900.0) for i in range(8)]
    code, data = doctor_json(capsys, lines, tmp_path)
    assert code == 1
    assert codes(data["verdicts"]) == ["slower_than_baseline"]
    assert data["verdicts"][0]["summary"] == "Speculation is slower than serving without it"


def test_the_tolerance_is_the_mixin_configs_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixin = tmp_path / "mixin.yaml"
    mixin.write_text("thresholds: {drafting_off_speedup: 0.5}\n")
    lines = healthy_adaptive(tput_off=FAR_BELOW)
    code, data = doctor_json(capsys, lines, tmp_path, "--mixin-config", str(mixin))
    assert (code, data["verdicts"]) == (0, [])
    mixin.write_text("thresholds: {drafting_off_speedup: 1.2}\n")
    log = write_log(tmp_path, lines)
    assert main(["doctor", "--log-file", log, "--mixin-config", str(mixin)]) == 2
    assert "drafting_off_speedup" in capsys.readouterr().err


def daemon_scrape(lines: list[str]) -> Scrape:
    """The lines through the daemon's pipeline into a target with the baseline, one scrape."""
    target = Target.from_config(TargetConfig(name="node", baseline=BaselineConfig(curve=CURVE)))
    LogFeed(target.state, engine="sglang").on_lines([line.encode() for line in lines])
    clock = Clock()
    clock.now = time.time()
    return render([target], clock)


def test_the_daemon_finds_it_from_the_same_windows() -> None:
    slow = daemon_scrape(healthy_adaptive(tput_off=FAR_BELOW))
    assert slow.value("specwatch_speedup", target="node") == pytest.approx(0.6)
    assert slow.value(
        "specwatch_finding", target="node", code="drafting_off_below_baseline", severity="warning"
    )
    quiet = daemon_scrape(healthy_adaptive(tput_off=TOLERATED))
    assert quiet.value("specwatch_speedup", target="node") == pytest.approx(0.95)
    assert quiet.values("specwatch_finding", target="node") == []


def test_the_headline_speaks_of_drafting_off_not_of_slower_speculation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for tput, said in (
        (TOLERATED, "runs 5% below the baseline (0.95x), within what keeping speculation ready"),
        (FAR_BELOW, "runs 40% below the baseline (0.6x), far more than keeping speculation ready"),
        (2100.0, "With drafting off the node runs 5% above the baseline (1.1x), 2,100 tok/s"),
    ):
        log = write_log(tmp_path, healthy_adaptive(tput_off=tput))
        main(["report", log, "--baseline-curve", CURVE])
        headline = capsys.readouterr().out.splitlines()[0]
        assert said in headline
        assert "Speculation is" not in headline
