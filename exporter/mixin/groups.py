"""Every rule group of a rendering, the optional speed budget's included, in load order."""

from __future__ import annotations

from exporter.mixin.budget import budget_alerts, budget_rules
from exporter.mixin.rules import Group, alert_groups, recording_rules
from exporter.mixin_config import MixinConfig


def recorded(config: MixinConfig) -> list[Group]:
    """Every recording rule group of the rendering, the optional ones included."""
    return recording_rules(config) + budget_rules(config)


def alerting(config: MixinConfig) -> list[Group]:
    """Every alert group of the rendering, the optional ones included."""
    return alert_groups(config) + budget_alerts(config)
