"""The custom-rule example users copy from the documentation."""

from __future__ import annotations

from typing import Any

import yaml

import exporter.parse.custom_rules as custom_rules_module
from exporter.config import build_config
from exporter.parse.custom_rules import RULE_CPU_BUDGET, CustomRuleSet


def documented_rules() -> list[dict[str, Any]]:
    """The YAML example from the module docstring, exactly as a user would copy it."""
    doc = custom_rules_module.__doc__ or ""
    block = doc[doc.index("custom_rules:") : doc.index("gives ``")]
    rules: list[dict[str, Any]] = yaml.safe_load(block)["custom_rules"]
    return rules


def rule_set(entries: list[dict[str, Any]], cpu_budget: float = RULE_CPU_BUDGET) -> CustomRuleSet:
    """Rules as the daemon gets them: validated in the config, compiled for a target."""
    return CustomRuleSet(build_config({"custom_rules": entries}).custom_rules, cpu_budget)
