"""The jsonnet face of the mixin, evaluated by the real ``jsonnet`` as kube-prometheus would.

A consumer vendors ``specwatch-mixin/`` (as jsonnet-bundler does), imports
``mixin.libsonnet``, overrides ``_config`` and builds its PrometheusRule and dashboards from
``prometheusRules``, ``prometheusAlerts`` and ``grafanaDashboards``. What it gets must be what
the Python rendering (``specwatch mixin``) gives for the same settings.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.mixin.render import render
from exporter.mixin_config import MixinConfig
from tests.support.docs import doc
from tests.support.tools import REPO, require_tool

pytestmark = pytest.mark.e2e

# kube-prometheus style: the mixin's groups become one PrometheusRule; dashboards by file name.
CONSUMER = """
local specwatch = (import 'specwatch-mixin/mixin.libsonnet') + {
  _config+:: %s,
};
{
  prometheusRule: {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: { name: 'specwatch', namespace: 'monitoring' },
    spec: { groups: specwatch.prometheusRules.groups + specwatch.prometheusAlerts.groups },
  },
  dashboards: specwatch.grafanaDashboards,
}
"""
# Settings a kube-prometheus user overrides.
USER_JSONNET = {
    "selector": 'job="specwatch", namespace="llm"',
    "alertLabels": {"team": "inference", "tier": "gpu"},
    "runbookUrlTemplate": "https://runbooks.example.com/specwatch/{alertname}",
    "multiCluster": True,
    "clusterLabel": "region",
    "dashboardUidPrefix": "llm-spec",
    "dashboardTags": ["llm", "specwatch"],
}
# The YAML config spells each key in snake case.
USER_YAML = {re.sub(r"([A-Z])", r"_\1", k).lower(): v for k, v in USER_JSONNET.items()}


def evaluate(config: dict[str, Any], tmp_path: Path, source: str = CONSUMER) -> dict[str, Any]:
    """The consumer file with ``config`` as its ``_config`` overrides, through jsonnet."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "specwatch-mixin").symlink_to(REPO / "specwatch-mixin")
    consumer = tmp_path / "specwatch.jsonnet"
    consumer.write_text(source.replace("%s", json.dumps(config)))
    result = subprocess.run(
        [require_tool("jsonnet"), "-J", str(vendor), str(consumer)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    output: dict[str, Any] = json.loads(result.stdout)
    return output


def python_rendering(config: MixinConfig) -> tuple[list[Any], dict[str, Any]]:
    files = render(config)
    groups = [
        g
        for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml")
        for g in yaml.safe_load(files[name])["groups"]
    ]
    dashboards = {
        name.removeprefix("dashboards_out/"): json.loads(text)
        for name, text in files.items()
        if name.startswith("dashboards_out/")
    }
    return groups, dashboards


def test_overridden_selector_and_labels_give_the_python_rendering(tmp_path: Path) -> None:
    out = evaluate(USER_JSONNET, tmp_path)
    groups, dashboards = python_rendering(MixinConfig.model_validate(USER_YAML))
    assert out["prometheusRule"]["spec"]["groups"] == groups
    assert out["dashboards"] == dashboards
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert alerts and all(r["labels"]["team"] == "inference" for r in alerts)
    assert all('namespace="llm"' in r["expr"] for g in groups for r in g["rules"])


def test_without_overrides_it_gives_the_committed_rules_and_dashboards(tmp_path: Path) -> None:
    out = evaluate({}, tmp_path)
    committed = [
        g
        for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml")
        for g in yaml.safe_load((REPO / "alerts" / name).read_text())["groups"]
    ]
    assert out["prometheusRule"]["spec"]["groups"] == committed
    for name, dashboard in out["dashboards"].items():
        assert dashboard == json.loads((REPO / "dashboards" / name).read_text()), name


def test_an_alert_label_named_severity_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="severity is set by each alert"):
        evaluate({"alertLabels": {"severity": "page"}}, tmp_path)


def test_the_documented_consumer_gets_its_labels(tmp_path: Path) -> None:
    source = doc("alerts.md").split("```jsonnet\n", 1)[1].split("```", 1)[0]
    out = evaluate({}, tmp_path, source)
    rule = out.pop("specwatch-prometheusrule")
    groups, dashboards = python_rendering(
        MixinConfig(
            selector='job="specwatch", namespace="llm"',
            alert_labels={"team": "inference"},
            runbook_url_template="https://runbooks.example.com/specwatch#{alertname_lower}",
        )
    )
    assert rule["spec"]["groups"] == groups
    assert {k.removeprefix("grafana-dashboard-"): v for k, v in out.items()} == dashboards
