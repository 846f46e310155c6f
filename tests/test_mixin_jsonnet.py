"""The jsonnet face of the mixin, evaluated by the real ``jsonnet`` as kube-prometheus would.

A consumer vendors ``specwatch-mixin/`` (as jsonnet-bundler does), imports
``mixin.libsonnet``, overrides ``_config`` and builds its PrometheusRule and dashboards from
``prometheusRules``, ``prometheusAlerts`` and ``grafanaDashboards``. What it gets must be what
the Python rendering (``specwatch mixin``) gives for the same settings: jsonnet fills in the
strings, and a rendering of the user's own config (thresholds, speed budget) is the file
``specwatch mixin`` writes as ``rendered.json``.
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
from exporter.settings import validate
from tests.support.daemon import in_process
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
  dashboardsV2: specwatch.grafanaDashboardsV2,
}
"""
# Settings a kube-prometheus user overrides.
USER_JSONNET = {
    "selector": 'job="specwatch", namespace="llm"',
    "alertLabels": {"team": "inference", "tier": "gpu"},
    "runbookUrlBase": "https://wiki.example.com/specwatch/runbook.md",
    "runbookUrlTemplate": "{base}?alert={alertname}",
    "grafanaUrl": "https://grafana.example.com",
    "multiCluster": True,
    "clusterLabel": "region",
    "dashboardUidPrefix": "llm-spec",
    "dashboardTags": ["llm", "specwatch"],
}
# A user's own rendering: thresholds and a speed budget, which jsonnet takes from it.
TUNED_YAML = {
    "selector": 'job="spec", namespace="prod"',
    "thresholds": {
        "collapsed_accept_length": 1.1,
        "low_accept_fraction": 0.65,
        "slower_for": "30m",
    },
    "speed_slo": 0.95,
    "alert_labels": {"team": "inference"},
}


def snake(config: dict[str, Any]) -> dict[str, Any]:
    """The YAML config spells each key in snake case."""
    return {re.sub(r"([A-Z])", r"_\1", k).lower(): v for k, v in config.items()}


USER_YAML = snake(USER_JSONNET)


def evaluate(config: str | dict[str, Any], tmp_path: Path, source: str = CONSUMER) -> Any:
    """The consumer file with ``config`` (jsonnet text, or a dict written as JSON) as its
    ``_config`` overrides, through jsonnet."""
    vendor = tmp_path / "vendor"
    vendor.mkdir(exist_ok=True)
    if not (vendor / "specwatch-mixin").exists():
        (vendor / "specwatch-mixin").symlink_to(REPO / "specwatch-mixin")
    consumer = tmp_path / "specwatch.jsonnet"
    text = config if isinstance(config, str) else json.dumps(config)
    consumer.write_text(source.replace("%s", text))
    # Two CPU-seconds of jsonnet each: the limit is for a hang, not for a loaded machine (120 s
    # failed there).
    result = subprocess.run(
        [require_tool("jsonnet"), "-J", str(vendor), str(consumer)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


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


def test_overridden_strings_give_the_python_rendering(tmp_path: Path) -> None:
    out = evaluate(USER_JSONNET, tmp_path)
    groups, dashboards = python_rendering(validate(MixinConfig, USER_YAML))
    assert out["prometheusRule"]["spec"]["groups"] == groups
    assert out["dashboards"] == dashboards
    v2 = render(validate(MixinConfig, USER_YAML))
    assert out["dashboardsV2"] == {
        name: json.loads(v2[f"dashboards_v2_out/{name}"]) for name in dashboards
    }
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert alerts and all(r["labels"]["team"] == "inference" for r in alerts)
    assert all('namespace="llm"' in r["expr"] for g in groups for r in g["rules"])
    assert alerts[0]["annotations"]["runbook_url"].startswith("https://wiki.example.com/")
    assert alerts[0]["annotations"]["dashboard_url"].startswith("https://grafana.example.com/")


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
        v2 = json.loads((REPO / "dashboards-v2" / name).read_text())
        assert out["dashboardsV2"][name] == v2, name


def test_a_users_own_rendering_gives_its_thresholds_and_speed_budget(tmp_path: Path) -> None:
    """``specwatch mixin --config`` writes rendered.json beside the rules; the jsonnet face
    given that file renders exactly those rules and dashboards, speed budget included."""
    config = tmp_path / "mixin.yaml"
    config.write_text(yaml.safe_dump(TUNED_YAML))
    out_dir = tmp_path / "out"
    done = in_process("mixin", "--config", str(config), "--out", str(out_dir))
    assert done.returncode == 0, done.stderr
    out = evaluate(f"{{ rendered: import '{out_dir / 'rendered.json'}' }}", tmp_path)
    written = [
        g
        for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml")
        for g in yaml.safe_load((out_dir / name).read_text())["groups"]
    ]
    assert out["prometheusRule"]["spec"]["groups"] == written
    assert "specwatch.speed-budget" in [g["name"] for g in written]
    for path in (out_dir / "dashboards_out").iterdir():
        assert out["dashboards"][path.name] == json.loads(path.read_text()), path.name
    for path in (out_dir / "dashboards_v2_out").iterdir():
        assert out["dashboardsV2"][path.name] == json.loads(path.read_text()), path.name


def test_an_alert_label_named_severity_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="severity is set by each alert"):
        evaluate({"alertLabels": {"severity": "page"}}, tmp_path)


def test_thresholds_in_jsonnet_are_refused_naming_where_they_are_set(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"thresholds: set them in a specwatch mixin config"):
        evaluate({"thresholds": {"slowerFor": "30m"}}, tmp_path)


def test_the_documented_consumer_gets_its_labels(tmp_path: Path) -> None:
    source = doc("alerts.md").split("```jsonnet\n", 1)[1].split("```", 1)[0]
    out = evaluate({}, tmp_path, source)
    rule = out.pop("specwatch-prometheusrule")
    groups, dashboards = python_rendering(
        MixinConfig(
            selector='job="specwatch", namespace="llm"',
            alert_labels={"team": "inference"},
            runbook_url_base="https://runbooks.example.com/specwatch",
            grafana_url="https://grafana.example.com",
        )
    )
    assert rule["spec"]["groups"] == groups
    assert {k.removeprefix("grafana-dashboard-"): v for k, v in out.items()} == dashboards
