"""doctor never advises from what it has just said it cannot trust.

A baseline that cannot be right gives no speed, so no schedule of draft steps is built on it;
a drafter that accepts nothing is to be fixed, not rescheduled; and the two acceptance figures
of the draft-token advice are said so that one cannot read as contradicting the other.
"""

from __future__ import annotations

from pathlib import Path

from exporter.cli import build_parser
from exporter.commands.doctor import Diagnosis, diagnose
from exporter.simulate import generate


def doctored(tmp_path: Path, scenario: str, *baseline: str) -> Diagnosis:
    log = tmp_path / f"{scenario}.log"
    log.write_text("\n".join(generate(scenario)) + "\n", encoding="utf-8")
    argv = ["doctor", "--log-file", str(log), *baseline]
    return diagnose(build_parser(["doctor"]).parse_args(argv))


def test_a_baseline_that_looks_wrong_schedules_nothing_from_its_speed(tmp_path: Path) -> None:
    found = doctored(tmp_path, "healthy", "--baseline-tok-s", "10")
    assert [v.code for v in found.verdicts] == ["baseline_implausible"]
    assert not [n for n in found.notes if "Draft steps by load" in n]
    (advice,) = [n for n in found.notes if n.startswith("draft tokens:")]
    assert "one that looks wrong" in advice  # it says it did not use the baseline's speed


def test_a_collapsed_drafter_gets_no_schedule_beside_needs_fixing(tmp_path: Path) -> None:
    found = doctored(tmp_path, "collapsed", "--baseline-curve", "1:82,48:1500,128:2370")
    assert "accept_length_collapsed" in {v.code for v in found.verdicts}
    assert not [n for n in found.notes if "candidate_steps" in n or "Draft steps by load" in n]
    assert any("the drafter itself needs fixing" in n for n in found.notes)


def test_the_two_acceptance_figures_say_what_each_is(tmp_path: Path) -> None:
    found = doctored(tmp_path, "healthy")
    (advice,) = [n for n in found.notes if n.startswith("draft tokens:")]
    assert "per-position acceptance" not in advice
    assert "of the times the one before it was" in advice
