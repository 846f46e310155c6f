"""The optional speed-budget alerts: rendered only when asked for, proven by promtool.

``alerts/tests/speed-budget/speed-budget.yaml`` holds the promtool scenarios (written for a
``speed_slo`` of 0.99); they run here against that rendering, with the real promtool.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from exporter.mixin.render import render, write
from exporter.mixin_config import MixinConfig
from exporter.settings import validate
from tests.support.tools import (
    REPO,
    group_order_problem,
    load_yaml,
    parse_yaml,
    require_tool,
    speed_budget_rendering,
)

SCENARIOS = REPO / "alerts" / "tests" / "speed-budget" / "speed-budget.yaml"
NAMES = {"SpecDecodeSpeedBudgetFastBurn", "SpecDecodeSpeedBudgetSlowBurn"}


def alert_names(rendering: dict[str, str]) -> set[str]:
    groups = parse_yaml(rendering["prometheus_alerts.yaml"])["groups"]
    return {r["alert"] for g in groups for r in g["rules"]}


def test_the_default_rendering_has_no_speed_budget() -> None:
    assert not NAMES & alert_names(render(MixinConfig()))
    assert alert_names(speed_budget_rendering()) >= NAMES


def test_scenarios_fix_the_order_of_the_rendered_groups() -> None:
    rendering = speed_budget_rendering()
    groups = [
        group
        for name in load_yaml(SCENARIOS)["rule_files"]
        for group in parse_yaml(rendering[name])["groups"]
    ]
    assert group_order_problem(load_yaml(SCENARIOS), groups) is None


@pytest.mark.e2e
def test_promtool_scenarios_pass_on_the_speed_budget_rendering(tmp_path: Path) -> None:
    write(speed_budget_rendering(), tmp_path)
    shutil.copy(SCENARIOS, tmp_path / SCENARIOS.name)
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", SCENARIOS.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_slo_outside_zero_to_one_is_refused() -> None:
    for bad in (0, 1, 1.5):
        with pytest.raises(ValueError, match="speed_slo"):
            validate(MixinConfig, {"speed_slo": bad})
