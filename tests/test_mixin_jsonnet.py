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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.analysis.thresholds import DEFAULT
from exporter.mixin import jsonnet
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


def snake(config: dict[str, Any]) -> dict[str, Any]:
    """The YAML config spells each key in snake case."""
    return {re.sub(r"([A-Z])", r"_\1", k).lower(): v for k, v in config.items()}


USER_YAML = snake(USER_JSONNET)


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
            thresholds=replace(DEFAULT, slower_than_baseline_speedup=0.95, slower_for="30m"),
        )
    )
    assert rule["spec"]["groups"] == groups
    assert {k.removeprefix("grafana-dashboard-"): v for k, v in out.items()} == dashboards


# Thresholds a user tunes: numbers written with str() and :g, durations, a fraction the Low
# alert's description shows as a percent, and speedups whose dashboard step a tenth above
# rounds to three places (1.045 * 1.1 is a tie there). 1 is 1.0 to Python, 0.57 * 100 is
# 56.99999999999999.
TUNED = [
    {
        "collapsedAcceptLength": 1.1,
        "lowAcceptFraction": 0.65,
        "slowerThanBaselineSpeedup": 0.95,
        "slowerFor": "30m",
        "collapsedFor": "2m30s",
        "noBenefitShare": 0.25,
        "noBenefitMinRequests": 50,
    },
    {
        "collapsedAcceptLength": 1,
        "lowAcceptFraction": 0.57,
        "slowerThanBaselineSpeedup": 1.045,
        "noBenefitShare": 0.00005,
        "lowAcceptFor": "1h",
        "noBenefitFor": "90s",
    },
]


@pytest.mark.parametrize("thresholds", TUNED)
@pytest.mark.parametrize("multi_cluster", [False, True])
def test_thresholds_in_config_give_the_python_rendering(
    tmp_path: Path, thresholds: dict[str, Any], multi_cluster: bool
) -> None:
    out = evaluate({"multiCluster": multi_cluster, "thresholds": thresholds}, tmp_path)
    # As `specwatch mixin` reads the same settings from its YAML config.
    yaml_config = {"thresholds": snake(thresholds), "multi_cluster": multi_cluster}
    groups, dashboards = python_rendering(MixinConfig.model_validate(yaml_config))
    assert out["prometheusRule"]["spec"]["groups"] == groups
    assert out["dashboards"] == dashboards
    assert groups != python_rendering(MixinConfig(multi_cluster=multi_cluster))[0]


def test_a_tuned_config_reads_as_its_user_wrote_it(tmp_path: Path) -> None:
    out = evaluate({"thresholds": TUNED[0]}, tmp_path)
    alerts = {
        r["alert"]: r for g in out["prometheusRule"]["spec"]["groups"] for r in g["rules"]
        if "alert" in r
    }  # fmt: skip
    assert "<= 1.1\n" in alerts["SpecDecodeAcceptLengthCollapsed"]["expr"]
    assert alerts["SpecDecodeAcceptLengthCollapsed"]["for"] == "2m30s"
    assert (
        "below 65% of the expected"
        in alerts["SpecDecodeAcceptLengthLow"]["annotations"]["description"]
    )
    assert "< 0.65 * specwatch_expected" in alerts["SpecDecodeAcceptLengthLow"]["expr"]
    assert "< 0.95\n" in alerts["SpecDecodeSlowerThanBaseline"]["expr"]
    assert alerts["SpecDecodeSlowerThanBaseline"]["for"] == "30m"
    assert ">= 50\n" in alerts["SpecDecodeRequestsWithoutBenefit"]["expr"]
    speedup = [
        [step["value"] for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]
        for panel in out["dashboards"]["specwatch-node.json"]["panels"]
        if panel.get("title") == "Speedup vs baseline now"
    ]
    assert speedup == [[None, 0.95, 1.045]]  # green from a tenth above the line


def test_thresholds_left_out_keep_their_defaults_with_or_without_plus(tmp_path: Path) -> None:
    groups, _ = python_rendering(MixinConfig(thresholds=replace(DEFAULT, slower_for="30m")))
    for name, source in {
        "plus": CONSUMER.replace("%s", "{ thresholds+: { slowerFor: '30m' } }"),
        "plain": CONSUMER.replace("%s", "{ thresholds: { slowerFor: '30m' } }"),
    }.items():
        (tmp_path / name).mkdir()
        assert evaluate({}, tmp_path / name, source)["prometheusRule"]["spec"]["groups"] == groups


# A value `specwatch mixin` refuses, with what the jsonnet says about it.
BAD = [
    ("collapsedAcceptLength", 1.3, "thresholds.collapsedAcceptLength: must be at least 1"),
    ("lowAcceptFraction", 70, "thresholds.lowAcceptFraction: must be above 0 and at most 1"),
    ("slowerThanBaselineSpeedup", 0, "thresholds.slowerThanBaselineSpeedup: must be above 0"),
    (
        "draftingOffSpeedup",
        1.1,
        "thresholds.draftingOffSpeedup: must be above 0 and at most slowerThanBaselineSpeedup",
    ),
    ("noBenefitShare", 1, "thresholds.noBenefitShare: must be above 0 and below 1"),
    ("noBenefitMinRequests", 2.5, "thresholds.noBenefitMinRequests: must be a whole number"),
    ("slowerFor", "10 minutes", "thresholds.slowerFor: must be a Prometheus duration"),
    ("noBenefitFor", "5", "thresholds.noBenefitFor: must be a Prometheus duration"),
    ("noBenefitWindow", "30m", "thresholds.noBenefitWindow: is 15m"),
    ("slowerfor", "30m", "thresholds.slowerfor: not a threshold; they are collapsedAcceptLength"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_threshold_is_refused_naming_its_key(
    tmp_path: Path, key: str, value: Any, message: str
) -> None:
    with pytest.raises(AssertionError, match=re.escape(message)):
        evaluate({"thresholds": {key: value}}, tmp_path)
    with pytest.raises(ValueError, match=snake({key: value}).popitem()[0]):
        MixinConfig.model_validate({"thresholds": snake({key: value})})


def test_a_threshold_form_the_tokens_miss_stops_make_mixin(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Low alert's description writes its fraction as a percent: without that form the
    # sentinel's digits stay in the text, different in each of the two renderings.
    forms = {k: v for k, v in jsonnet.TEXT_FORMS[float].items() if k != "percent"}
    monkeypatch.setitem(jsonnet.TEXT_FORMS, float, forms)
    with pytest.raises(ValueError, match="a threshold reaches the rendering in a form"):
        jsonnet.library()


def test_a_threshold_without_odd_values_stops_make_mixin(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its default would be rendered in both renderings alike: a value jsonnet could not set.
    odd = {k: v for k, v in jsonnet._ODD.items() if k != "slower_for"}
    monkeypatch.setattr(jsonnet, "_ODD", odd)
    with pytest.raises(ValueError, match="slower_for: no odd values"):
        jsonnet.library()
