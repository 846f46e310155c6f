"""The shipped alert rules judge by the same numbers as doctor and report."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from exporter.analysis.findings import OFF_SHARE
from exporter.analysis.thresholds import DEFAULT
from tests.support.tools import load_yaml

RULES = Path(__file__).resolve().parent.parent / "alerts" / "prometheus_alerts.yaml"


@cache
def _groups() -> list[dict[str, Any]]:
    """The shipped alert groups, read once for the file's tests (only read)."""
    groups: list[dict[str, Any]] = load_yaml(RULES)["groups"]
    return groups


def _alert(name: str) -> dict[str, str]:
    for group in _groups():
        rule: dict[str, str]
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return rule
    raise AssertionError(f"no alert {name} in {RULES.name}")


def _numbers(expr: str) -> list[float]:
    return [float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", expr)]


def test_collapse_alert_uses_the_collapse_threshold() -> None:
    rule = _alert("SpecDecodeAcceptLengthCollapsed")
    assert f"<= {DEFAULT.collapsed_accept_length}" in rule["expr"]
    assert rule["for"] == DEFAULT.collapsed_for


def test_low_accept_alert_uses_the_low_accept_thresholds() -> None:
    rule = _alert("SpecDecodeAcceptLengthLow")
    assert f"< {DEFAULT.low_accept_fraction} * specwatch_expected_accept_length" in rule["expr"]
    assert "< specwatch_accept_length_floor" in rule["expr"]
    assert rule["for"] == DEFAULT.low_accept_for


def test_slower_alert_uses_the_speedup_threshold() -> None:
    rule = _alert("SpecDecodeSlowerThanBaseline")
    assert _numbers(rule["expr"].split("and")[0]) == [DEFAULT.slower_than_baseline_speedup]
    assert rule["for"] == DEFAULT.slower_for


def test_drafting_off_alert_uses_its_own_speedup_threshold_and_the_off_share() -> None:
    """The finding's and the verdict's numbers: the tolerance, OFF_SHARE, and for: as slower."""
    rule = _alert("SpecDecodeDraftingOffBelowBaseline")
    assert _numbers(rule["expr"].split("and")[0]) == [DEFAULT.drafting_off_speedup]
    assert f'specwatch_drafting_off_ratio{{job="specwatch"}} >= {OFF_SHARE:g}' in rule["expr"]
    assert rule["for"] == DEFAULT.slower_for
    # While drafting is off the general speed alert stands aside, on the same condition.
    slower = _alert("SpecDecodeSlowerThanBaseline")["expr"]
    off = rule["expr"].split("and")[1].split("\n", 1)[1].strip()  # past "ignoring (source)"
    assert f"unless ignoring (source)\n{off}\nunless" in slower


def test_accept_length_alerts_judge_only_drafters_with_a_floor() -> None:
    """Both accept-length alerts need the floor specwatch exports for a known algorithm."""
    for name in ("SpecDecodeAcceptLengthCollapsed", "SpecDecodeAcceptLengthLow"):
        assert "specwatch_accept_length_floor" in _alert(name)["expr"]


def test_low_accept_limit_scales_with_the_expected_length() -> None:
    assert DEFAULT.low_accept_limit(4.0, 1.2) == DEFAULT.low_accept_fraction * 4.0
    assert DEFAULT.low_accept_limit(None, 1.2) == 1.2
    assert DEFAULT.low_accept_limit(None, None) is None
