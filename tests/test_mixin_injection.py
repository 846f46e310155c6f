"""Values of a mixin config that reach Prometheus, in both faces: each is refused naming its
key, or renders rules ``promtool check rules`` accepts, as the user meant them.

A carriage return in the selector, written raw into a YAML comment, made promtool read one
injected, always-firing rule instead of the 17 alerts; ``job="spec\\qwatch"``, ``job=~"("``,
``__name__="foo"`` and ``{{`` in an alert label or the runbook template passed the checks and
rendered rules Prometheus refused; the jsonnet face checked none of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tools import REPO, require_tool

pytestmark = pytest.mark.e2e

# The console script pip installs next to the interpreter, as a user runs it.
SPECWATCH = str(Path(sys.executable).with_name("specwatch"))

INJECTED = (
    'job="specwatch"\r\ngroups:\n- name: x\n  rules:\n  - alert: Injected\n    expr: vector(1)'
)
# (YAML key, jsonnet key, value, what the refusal says)
REFUSED = [
    ("selector", "selector", INJECTED, "control character"),
    ("selector", "selector", 'job="spec\rwatch"', "control character"),
    ("selector", "selector", 'job="spec\\qwatch"', "PromQL label matchers"),
    ("selector", "selector", 'job=~"("', "invalid regular expression"),
    ("selector", "selector", 'job=~"[a"', "invalid regular expression"),
    ("selector", "selector", '__name__="foo"', "reserved label name"),
    ("selector", "selector", 'job="x"\u2028', "control character"),
    ("alert_labels", "alertLabels", {"team": "{{ .Labels.job }}"}, "'{{' is not allowed"),
    ("alert_labels", "alertLabels", {"team": "a\nb"}, "control character"),
    ("alert_labels", "alertLabels", {"__team": "a"}, "not a Prometheus label name"),
    ("runbook_url_template", "runbookUrlTemplate", "https://x/{{alertname}}", "'{{'"),
    ("runbook_url_template", "runbookUrlTemplate", "https://x/\r{alertname}", "control"),
    ("runbook_url_base", "runbookUrlBase", "https://x/{{ $value }}", "'{{'"),
    ("grafana_url", "grafanaUrl", "https://grafana/\x01", "control character"),
    ("cluster_label", "clusterLabel", "__cluster", "not a Prometheus label name"),
    ("dashboard_tags", "dashboardTags", ["llm\n"], "control character"),
]
# Values at the edge of what Prometheus takes, which both faces must render as it takes them.
ACCEPTED = [
    ("selector", "selector", 'job="spec\\"watch", ns=~"a|(b)", pod!~"x\\\\d+", tier!="\\u00e9"'),
    ("alert_labels", "alertLabels", {"team": "a}} b", "site": "é"}),
    ("runbook_url_template", "runbookUrlTemplate", "https://x/{alertname}?q=$labels%7D"),
]


def python_face(tmp_path: Path, key: str, value: Any) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "mixin.yaml"
    config.write_text(yaml.safe_dump({key: value}))
    return subprocess.run(
        [SPECWATCH, "mixin", "--config", str(config), "--out", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def jsonnet_face(tmp_path: Path, key: str, value: Any) -> subprocess.CompletedProcess[str]:
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "specwatch-mixin").symlink_to(REPO / "specwatch-mixin")
    consumer = tmp_path / "specwatch.jsonnet"
    consumer.write_text(
        "local specwatch = (import 'specwatch-mixin/mixin.libsonnet') + "
        f"{{ _config+:: {{ {key}: {json.dumps(value)} }} }};\n"
        "{ groups: specwatch.prometheusRules.groups + specwatch.prometheusAlerts.groups }\n"
    )
    return subprocess.run(
        [require_tool("jsonnet"), "-J", str(vendor), str(consumer)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def promtool_rules(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), "check", "rules", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def alerts(path: Path) -> list[dict[str, Any]]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


@pytest.mark.parametrize(("key", "_", "value", "said"), REFUSED)
def test_python_face_refuses_naming_the_key(
    tmp_path: Path, key: str, _: str, value: Any, said: str
) -> None:
    result = python_face(tmp_path, key, value)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f": {key}" in line and said in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("_", "key", "value", "said"), REFUSED)
def test_jsonnet_face_refuses_naming_the_key(
    tmp_path: Path, _: str, key: str, value: Any, said: str
) -> None:
    result = jsonnet_face(tmp_path, key, value)
    assert result.returncode != 0, result.stdout
    first = result.stderr.splitlines()[0]
    assert f"RUNTIME ERROR: {key}" in first and said in first, result.stderr


@pytest.mark.parametrize(("key", "jsonnet_key", "value"), ACCEPTED)
def test_values_at_the_edge_render_rules_promtool_accepts_in_both_faces(
    tmp_path: Path, key: str, jsonnet_key: str, value: Any
) -> None:
    result = python_face(tmp_path, key, value)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    files = (out / "prometheus_rules.yaml", out / "prometheus_alerts.yaml")
    checked = promtool_rules(*files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(alerts(files[1])) >= 17  # every alert there, none injected
    evaluated = jsonnet_face(tmp_path, jsonnet_key, value)
    assert evaluated.returncode == 0, evaluated.stderr
    from_jsonnet = tmp_path / "jsonnet-rules.yaml"
    from_jsonnet.write_text(yaml.safe_dump(json.loads(evaluated.stdout)))
    checked = promtool_rules(from_jsonnet)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [a["alert"] for a in alerts(from_jsonnet)] == [a["alert"] for a in alerts(files[1])]
