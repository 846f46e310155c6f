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
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.daemon import in_process
from tests.support.tools import REPO, require_tool

pytestmark = pytest.mark.e2e

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
    """``specwatch mixin --config`` with ``{key: value}``, through the CLI's entry point in this
    process (test_mixin.py runs the installed script)."""
    config = tmp_path / "mixin.yaml"
    config.write_text(yaml.safe_dump({key: value}))
    return in_process("mixin", "--config", str(config), "--out", str(tmp_path / "out"))


def jsonnet(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    """``program`` evaluated by jsonnet, with the mixin vendored as a user vendors it."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "specwatch-mixin").symlink_to(REPO / "specwatch-mixin")
    consumer = tmp_path / "specwatch.jsonnet"
    consumer.write_text(program)
    return subprocess.run(
        [require_tool("jsonnet"), "-J", str(vendor), str(consumer)],
        capture_output=True,
        text=True,
        timeout=120,
    )


MIXIN = "local mixin = import 'specwatch-mixin/mixin.libsonnet';\n"
RULES = "{ groups: m.prometheusRules.groups + m.prometheusAlerts.groups }"


def user_config(key: str, value: Any) -> str:
    return f"{{ {key}: {json.dumps(value)} }}"


@pytest.fixture(scope="module")
def jsonnet_face(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case of the jsonnet face in one evaluation (each took a jsonnet start and a read
    of the rendering): for each refused value, what the mixin's check says of the config it
    would use (its own ``_config`` with the user's added, as ``_config+::`` adds it); for each
    accepted one, the rules a user of the mixin gets."""
    refused = ", ".join(f"validate.problems(mixin._config + {user_config(k, v)})"
                        for _, k, v, _ in REFUSED)  # fmt: skip
    accepted = ", ".join(f"local m = mixin + {{ _config+:: {user_config(k, v)} }}; {RULES}"
                         for _, k, v in ACCEPTED)  # fmt: skip
    program = (
        MIXIN + "local validate = import 'specwatch-mixin/validate.libsonnet';\n"
        f"{{ refused: [{refused}], accepted: [{accepted}] }}\n"
    )
    result = jsonnet(tmp_path_factory.mktemp("jsonnet"), program)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


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


def test_jsonnet_face_stops_a_user_with_what_its_check_says(tmp_path: Path) -> None:
    """The refusal a user of the mixin meets: jsonnet stops at the first problem found."""
    _, key, value, said = REFUSED[0]
    program = MIXIN + f"local m = mixin + {{ _config+:: {user_config(key, value)} }};\n{RULES}\n"
    result = jsonnet(tmp_path, program)
    assert result.returncode != 0, result.stdout
    first = result.stderr.splitlines()[0]
    assert f"RUNTIME ERROR: {key}" in first and said in first, result.stderr


@pytest.mark.parametrize(
    ("case", "key", "said"), [(n, k, s) for n, (_, k, _, s) in enumerate(REFUSED)]
)
def test_jsonnet_face_refuses_naming_the_key(
    jsonnet_face: dict[str, Any], case: int, key: str, said: str
) -> None:
    problems = jsonnet_face["refused"][case]
    assert problems and problems[0].startswith(key) and said in problems[0], problems


@pytest.mark.parametrize(
    ("case", "key", "value"), [(n, k, v) for n, (k, _, v) in enumerate(ACCEPTED)]
)
def test_values_at_the_edge_render_rules_promtool_accepts_in_both_faces(
    tmp_path: Path, jsonnet_face: dict[str, Any], case: int, key: str, value: Any
) -> None:
    result = python_face(tmp_path, key, value)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    files = (out / "prometheus_rules.yaml", out / "prometheus_alerts.yaml")
    from_jsonnet = tmp_path / "jsonnet-rules.yaml"
    from_jsonnet.write_text(yaml.safe_dump(jsonnet_face["accepted"][case]))
    checked = promtool_rules(*files, from_jsonnet)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len(alerts(files[1])) >= 17  # every alert there, none injected
    assert [a["alert"] for a in alerts(from_jsonnet)] == [a["alert"] for a in alerts(files[1])]
