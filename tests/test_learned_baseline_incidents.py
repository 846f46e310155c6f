"""The incidents that were found only by comparing with a server without speculation, replayed
with nothing but a log of that plain server (no curve given): ``doctor``, ``report`` and the
daemon each name the node slower than the baseline, and say where the baseline came from.

- undertrained (an EAGLE-3 draft with CUDA graphs off): 57 against 90 tok/s, single stream;
- mismatched (a drafter for the previous model version): 52 against 82 tok/s.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from exporter.simulate import generate
from tests.support.daemon import doctor, in_process, run_daemon
from tests.support.plainlogs import sglang_plain

pytestmark = pytest.mark.e2e

INCIDENTS = [("undertrained", 90.0), ("mismatched", 82.0)]


def _logs(tmp_path: Path, scenario: str, plain_tok_s: float) -> tuple[Path, Path]:
    incident = tmp_path / f"{scenario}.log"
    incident.write_text("\n".join(generate(scenario, duration=300)) + "\n")
    plain = tmp_path / "before-speculation.log"
    plain.write_text(sglang_plain(((1, 40),), ((1, plain_tok_s),)))
    return incident, plain


@pytest.mark.parametrize(("scenario", "plain_tok_s"), INCIDENTS)
def test_report_names_the_node_slower_than_its_own_plain_past(
    tmp_path: Path, scenario: str, plain_tok_s: float
) -> None:
    incident, plain = _logs(tmp_path, scenario, plain_tok_s)
    done = in_process("report", "--json", "--baseline-log", str(plain), str(incident))
    report = json.loads(done.stdout)
    run = report["runs"][-1]
    assert "slower_than_baseline" in {v["code"] for v in run["verdicts"]}
    assert "learned from before-speculation.log" in report["baseline"]
    text = in_process("report", "--baseline-log", str(plain), str(incident)).stdout
    assert "Baseline: " in text and "learned from before-speculation.log" in text


@pytest.mark.parametrize(("scenario", "plain_tok_s"), INCIDENTS)
def test_doctor_names_the_node_slower_than_its_own_plain_past(
    tmp_path: Path, scenario: str, plain_tok_s: float
) -> None:
    incident, plain = _logs(tmp_path, scenario, plain_tok_s)
    done = doctor("--baseline-log", str(plain), "--log-file", str(incident))
    assert done.returncode == 1, done.stderr
    assert "slower_than_baseline" in done.stdout
    assert "learned from before-speculation.log" in done.stdout


@pytest.mark.parametrize(("scenario", "plain_tok_s"), INCIDENTS)
def test_daemon_names_the_node_slower_than_its_own_plain_past(
    tmp_path: Path, port: int, scenario: str, plain_tok_s: float
) -> None:
    incident, plain = _logs(tmp_path, scenario, plain_tok_s)
    watched = tmp_path / "server.log"
    args = ["--log-file", str(watched), "--baseline-log", str(plain)]
    with run_daemon(args, port) as daemon:
        shutil.copy(incident, watched)
        # The last window of the log: the speed the alert rules judge.
        scrape = daemon.wait_metric("specwatch_speedup", lambda v: v is not None, 20)
    base = scrape.value("specwatch_baseline_gen_throughput_tokens_per_second", source="own_log")
    assert base == pytest.approx(plain_tok_s, rel=0.01)
    speedup = scrape.value("specwatch_speedup")
    assert speedup is not None and speedup < 0.75
