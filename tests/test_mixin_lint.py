"""The mixin linted as ``mixtool lint`` lints it, so mixin users' CI passes on it.

mixtool (monitoring-mixins/mixtool, ``pkg/mixer/lint.go``) cannot be built here, so its
Prometheus rules are written out below, word for word in what they accept: group size and name
length, camel-case alert names of at most 40 characters, a severity of warning, critical or
info, a templated ``description``, and a ``summary`` that is a sentence without templates.
Two of specwatch's own join them: every alert links an absolute runbook and a dashboard, so
the page opens from Alertmanager as well as from Grafana. Its dashboard checks (a title and a
uid on each) close the file. ``make lint`` runs this file.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from exporter.mixin.groups import alerting
from exporter.mixin.render import render
from exporter.mixin_config import MixinConfig
from tests.support.tools import REPO, load_yaml

CAMEL_CASE = re.compile(r"^([A-Z]+[a-z0-9]+)+$")
GO_TEMPLATE = re.compile(r"\{\{.+}\}")
SENTENCE = re.compile(r"^[A-Z].+\.$")
SEVERITIES = ("warning", "critical", "info")

CONFIGS = {
    "shipped": MixinConfig(),
    "multi-cluster with a speed budget": MixinConfig(multi_cluster=True, speed_slo=0.95),
}


def group_problems(group: dict[str, Any]) -> list[str]:
    name, rules = group["name"], group["rules"]
    problems = []
    if len(rules) > 20:
        problems.append(f"[alert-group-rule-count] {name}: more than 20 rules ({len(rules)})")
    if len(name) > 40:
        problems.append(f"[alert-group-name-length] {name}: name exceeds 40 characters")
    return problems


def alert_problems(rule: dict[str, Any]) -> list[str]:
    """mixtool's guidelines for one alert, then specwatch's links."""
    name = rule["alert"]
    notes = rule.get("annotations", {})
    problems = []
    if not CAMEL_CASE.match(name):
        problems.append(f"[alert-name-camelcase] {name}")
    if len(name) > 40:
        problems.append(f"[alert-name-length] {name}")
    if rule.get("labels", {}).get("severity") not in SEVERITIES:
        problems.append(f"[alert-severity-rule] {name}: {rule.get('labels')}")
    if "description" not in notes:
        problems.append(f"[alert-description-missing-rule] {name}")
    elif not GO_TEMPLATE.search(notes["description"]):
        problems.append(f"[alert-description-templating] {name}: {notes['description']}")
    if "summary" not in notes:
        problems.append(f"[alert-summary-missing-rule] {name}")
    else:
        if GO_TEMPLATE.search(notes["summary"]):
            problems.append(f"[alert-summary-templating] {name}: {notes['summary']}")
        if not SENTENCE.match(notes["summary"]):
            problems.append(f"[alert-summary-style] {name}: {notes['summary']!r}")
    for link in ("runbook_url", "dashboard_url"):
        parts = urlsplit(notes.get(link, ""))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append(f"[{link}] {name}: not an absolute URL: {notes.get(link)!r}")
    return problems


def lint(groups: list[dict[str, Any]]) -> list[str]:
    problems = [p for group in groups for p in group_problems(group)]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    return problems + [p for rule in alerts for p in alert_problems(rule)]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_every_rendered_alert_passes_the_mixin_lint(config: MixinConfig) -> None:
    assert lint(alerting(config)) == []


def test_the_shipped_alert_file_passes_the_mixin_lint() -> None:
    shipped = load_yaml(REPO / "alerts" / "prometheus_alerts.yaml")
    assert lint(shipped["groups"]) == []


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"annotations": {"summary": "lowercase start."}}, "alert-summary-style"),
        ({"annotations": {"summary": "No full stop"}}, "alert-summary-style"),
        ({"annotations": {"summary": "On {{ $labels.target }}."}}, "alert-summary-templating"),
        ({"annotations": {"description": "Plain."}}, "alert-description-templating"),
        ({"labels": {"severity": "page"}}, "alert-severity-rule"),
        ({"alert": "spec_decode_down"}, "alert-name-camelcase"),
        ({"annotations": {"runbook_url": "alerts/runbook.md#x"}}, "runbook_url"),
        ({"annotations": {"dashboard_url": None}}, "dashboard_url"),
    ],
)
def test_the_lint_refuses_what_mixtool_refuses(change: dict[str, Any], rule: str) -> None:
    alert = alerting(MixinConfig())[0]["rules"][0]
    broken = {**alert, **change}
    for key in ("labels", "annotations"):
        broken[key] = {**alert[key], **change.get(key, {})}
        broken[key] = {k: v for k, v in broken[key].items() if v is not None}
    assert lint([{"name": "g", "rules": [alert]}]) == []
    assert [p for p in lint([{"name": "g", "rules": [broken]}]) if p.startswith(f"[{rule}]")]


def test_every_dashboard_has_a_title_and_a_uid() -> None:
    for name, text in render(MixinConfig()).items():
        if name.startswith("dashboards_out/"):
            dashboard = json.loads(text)
            assert dashboard.get("title") and dashboard.get("uid"), name
