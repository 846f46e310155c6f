"""``make mixin``: alerts, recording rules and dashboards rendered for a user's own setup.

The rendering is checked by the tools that load it (promtool check and promtool unit tests on
the rendered files), and the repository's own ``alerts/``, ``dashboards/`` and PrometheusRule
must be exactly the rendering with the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from exporter.analysis.thresholds import Thresholds
from exporter.cli import main
from exporter.mixin.dashboards.queries import dashboard_queries, expand
from exporter.mixin.render import render
from exporter.mixin.repository import COMMITTED, committed_path
from exporter.mixin_config import MixinConfig, load_mixin_config
from exporter.settings import validate
from tests.support.daemon import in_process
from tests.support.deploy import OPERATOR_SCHEMAS
from tests.support.docs import doc
from tests.support.tools import REPO, promtool_check, require_tool

USER_CONFIG = {
    "selector": 'job="llm-spec", namespace="prod"',
    "runbook_url_template": "https://runbooks.example.com/specwatch/{alertname}",
    "grafana_url": "https://grafana.example.com/",
    "rule_labels": {"prometheus": "k8s", "role": "alert-rules"},
    "alert_labels": {"team": "inference"},
    "thresholds": {"collapsed_accept_length": 1.1, "collapsed_for": "3m"},
    "dashboard_tags": ["llm", "specwatch"],
    "dashboard_uid_prefix": "prod-specwatch",
    "multi_cluster": True,
}
# A series name with its matchers, anywhere in PromQL (raw series, recorded series and `up`).
# A series read from the exporter or a per-target recording rule; not the fleet's peers'
# baseline (``served_model_hardware_band:...``), which pools selected series by model.
SELECTED = re.compile(
    r"(?<![\w:])((?:target(?:_band)?:)?specwatch_[a-z_]+(?::\w+)?|\bup|ALERTS)(\{[^}]*\})?"
)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's config rendered by `make mixin CONFIG=... OUT=...`, as a user runs it."""
    base = tmp_path_factory.mktemp("mixin")
    config = base / "mixin.yaml"
    config.write_text(yaml.safe_dump(USER_CONFIG))
    out = base / "out"
    result = subprocess.run(
        ["make", "-s", "mixin", f"CONFIG={config}", f"OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def rules_in(path: Path) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


@pytest.mark.e2e
def test_render_writes_the_files_monitoring_mixins_name(rendered: Path) -> None:
    files = sorted(str(p.relative_to(rendered)) for p in rendered.rglob("*") if p.is_file())
    assert files == [
        "dashboards_out/specwatch-fleet.json",
        "dashboards_out/specwatch-node.json",
        "dashboards_v2_out/specwatch-fleet.json",
        "dashboards_v2_out/specwatch-node.json",
        "prometheus_alerts.yaml",
        "prometheus_rules.yaml",
        "prometheusrule.yaml",
        "rendered.json",
        "runbook.md",
    ]


@pytest.mark.e2e
def test_promtool_accepts_the_rendered_rules(rendered: Path) -> None:
    require_tool("promtool")
    files = [str(rendered / "prometheus_rules.yaml"), str(rendered / "prometheus_alerts.yaml")]
    result = subprocess.run(
        ["promtool", "check", "rules", *files], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.e2e
def test_every_series_in_rules_and_dashboards_carries_the_users_selector(
    rendered: Path,
) -> None:
    exprs = [r["expr"] for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml")
             for r in rules_in(rendered / name)]  # fmt: skip
    for board in (rendered / "dashboards_out").glob("*.json"):
        exprs += re.findall(r'"(?:expr|query)": "((?:[^"\\]|\\.)*)"', board.read_text())
    checked = 0
    for expr in exprs:
        for name, matchers in SELECTED.findall(expr.replace('\\"', '"')):
            assert 'job="llm-spec"' in matchers and 'namespace="prod"' in matchers, (name, expr)
            checked += 1
    assert checked > 50


@pytest.mark.e2e
def test_alerts_carry_the_users_labels_runbook_and_thresholds(rendered: Path) -> None:
    alerts = {r["alert"]: r for r in rules_in(rendered / "prometheus_alerts.yaml") if "alert" in r}
    for name, rule in alerts.items():
        assert rule["labels"]["team"] == "inference"
        assert (
            rule["annotations"]["runbook_url"] == f"https://runbooks.example.com/specwatch/{name}"
        )
    collapsed = alerts["SpecDecodeAcceptLengthCollapsed"]
    assert "<= 1.1\n" in collapsed["expr"] and collapsed["for"] == "3m"
    assert "{{ $labels.cluster }}" in collapsed["annotations"]["description"]


@pytest.mark.e2e
def test_prometheus_rule_carries_the_users_rule_labels(rendered: Path) -> None:
    manifest = yaml.safe_load((rendered / "prometheusrule.yaml").read_text())
    jsonschema.validate(manifest, OPERATOR_SCHEMAS["PrometheusRule"])
    assert manifest["metadata"]["labels"]["prometheus"] == "k8s"
    assert manifest["metadata"]["labels"]["role"] == "alert-rules"
    assert manifest["spec"]["groups"] == (
        yaml.safe_load((rendered / "prometheus_rules.yaml").read_text())["groups"]
        + yaml.safe_load((rendered / "prometheus_alerts.yaml").read_text())["groups"]
    )


@pytest.mark.e2e
def test_dashboards_take_the_users_uids_tags_and_a_cluster_variable(rendered: Path) -> None:
    for kind in ("node", "fleet"):
        board = json.loads((rendered / "dashboards_out" / f"specwatch-{kind}.json").read_text())
        assert board["uid"] == f"prod-specwatch-{kind}"
        assert board["tags"] == ["llm", "specwatch"]
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[:3] == ["datasource", "cluster", "job"]
        text = json.dumps(board)
        assert 'cluster=~\\"$cluster\\"' in text
        assert "https://runbooks.example.com/specwatch/" in text
        assert "github.com" not in text


@pytest.mark.e2e
def test_rendered_dashboard_queries_are_valid_promql(rendered: Path, tmp_path: Path) -> None:
    boards = [json.loads(p.read_text()) for p in (rendered / "dashboards_out").glob("*.json")]
    queries = [q for board in boards for q in dashboard_queries(board)]
    assert len(queries) > 40
    result = promtool_check([expand(q.expr, "1m") for q in queries], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.e2e
def test_rendered_alert_fires_for_the_users_series_only(rendered: Path) -> None:
    """A promtool unit test on the rendering: the user's threshold, `for:`, labels and runbook;
    a series outside the selector (another tenant, same metric names) never fires."""
    require_tool("promtool")
    mine = 'job="llm-spec",namespace="prod",cluster="eu",instance="n1:9477",target="t1"'
    theirs = 'job="specwatch",namespace="dev",cluster="eu",instance="n2:9477",target="t2"'
    series = (
        [
            {"series": f"specwatch_accept_length{{{labels}}}", "values": "1.08x20"}
            for labels in (mine, theirs)
        ]
        + [
            {
                "series": f"specwatch_gen_throughput_tokens_per_second{{{labels}}}",
                "values": "500x20",
            }
            for labels in (mine, theirs)
        ]
        + [
            {"series": f"specwatch_accept_length_floor{{{labels}}}", "values": "1.8x20"}
            for labels in (mine, theirs)
        ]
    )
    fired = {
        "exp_labels": {
            "severity": "critical", "team": "inference", "job": "llm-spec", "namespace": "prod",
            "cluster": "eu", "instance": "n1:9477", "target": "t1",
        },
        "exp_annotations": {
            "summary": "Speculative decoding accepts no draft tokens.",
            "description": "Accept length on t1 (n1:9477 in eu) averaged 1.08 over 5 minutes "
            "while serving: the drafter's proposals are all rejected, so every decode step pays "
            "for drafting and gains nothing.",
            "runbook_url": "https://runbooks.example.com/specwatch/SpecDecodeAcceptLengthCollapsed",
            "dashboard_url": "https://grafana.example.com/d/prod-specwatch-node/prod-specwatch-node"
            "?var-cluster=eu&var-job=llm-spec&var-instance=n1%3A9477&var-target=t1",
        },
    }  # fmt: skip
    alert = "SpecDecodeAcceptLengthCollapsed"
    unit = {
        "rule_files": ["prometheus_rules.yaml", "prometheus_alerts.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "2m", "alertname": alert},
                    {"eval_time": "5m", "alertname": alert, "exp_alerts": [fired]},
                ],
            }
        ],
    }
    (rendered / "unit.yaml").write_text(yaml.safe_dump(unit))
    try:
        result = subprocess.run(
            ["promtool", "test", "rules", "unit.yaml"],
            cwd=rendered,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        (rendered / "unit.yaml").unlink()
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.e2e
def test_repository_files_are_the_default_rendering() -> None:
    """``make mixin``'s check, in a process of its own with deprecation warnings as errors:
    the SDK's notice that v1 is deprecated, on every build, is answered by the v2 rendering
    beside it, and a render that warns fails here (its traceback on stderr), as does a stale
    file (named on stdout: run make mixin)."""
    cmd = [sys.executable, "-W", "error::DeprecationWarning", "-m", "exporter.mixin", "--check"]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_names_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import exporter.mixin.repository as module

    copy = tmp_path / "alerts"
    copy.mkdir()
    stale = (REPO / "alerts" / "prometheus_alerts.yaml").read_text().replace("15m", "16m")
    (copy / "prometheus_alerts.yaml").write_text(stale)
    real = module.committed_path
    monkeypatch.setattr(
        module,
        "committed_path",
        lambda name: copy / name if name == "prometheus_alerts.yaml" else real(name),
    )
    assert module.stale_files() == [copy / "prometheus_alerts.yaml"]


def test_mixin_thresholds_are_the_thresholds_doctor_and_report_judge_by(tmp_path: Path) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text(yaml.safe_dump(USER_CONFIG))
    assert load_mixin_config(path).thresholds == Thresholds(
        collapsed_accept_length=1.1, collapsed_for="3m"
    )
    assert load_mixin_config(None) == MixinConfig()


def test_defaults_render_the_same_as_no_config() -> None:
    assert render(load_mixin_config(None)) == render(MixinConfig())


def rendering_kept() -> dict[Path, bytes]:
    """Every file where the repository keeps the default rendering, with its bytes."""
    paths = {committed_path(name) for name in COMMITTED}
    paths |= {*(REPO / "dashboards").glob("*.json"), *(REPO / "dashboards-v2").glob("*.json")}
    return {path: path.read_bytes() for path in sorted(paths)}


@pytest.mark.e2e
def test_config_without_out_exits_2_in_one_line(tmp_path: Path) -> None:
    """The repository keeps the defaults: a user's rendering must go elsewhere."""
    path = tmp_path / "mixin.yaml"
    path.write_text("multi_cluster: true\n")
    before = rendering_kept()
    result = subprocess.run(
        [sys.executable, "-m", "exporter.mixin", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "--out" in result.stderr
    assert rendering_kept() == before


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"selector": "job=specwatch"}, "selector"),
        ({"selector": ""}, "selector"),
        ({"selectr": 'job="x"'}, "selectr"),
        ({"thresholds": {"collapsed_for": "soon"}}, "collapsed_for"),
        ({"thresholds": {"collapsed_accept_length": 2.5}}, "collapsed_accept_length"),
        ({"thresholds": {"colapsed_for": "5m"}}, "colapsed_for"),
        ({"thresholds": {"low_accept_length": 1.8}}, "own accept-length floor"),
        ({"thresholds": {"no_benefit_share": 1.5}}, "no_benefit_share"),
        ({"thresholds": {"no_benefit_window": "30m"}}, "no_benefit_window"),
        ({"thresholds": {"no_benefit_for": "later"}}, "no_benefit_for"),
        ({"runbook_url_template": "https://x/{alert}"}, "runbook_url_template"),
        ({"alert_labels": {"severity": "low"}}, "alert_labels"),
        ({"rule_labels": {"bad key!": "x"}}, "rule_labels"),
        ({"dashboard_uid_prefix": "a/b"}, "dashboard_uid_prefix"),
    ],
)
def test_bad_mixin_config_exits_2_naming_the_key(
    tmp_path: Path, config: dict[str, Any], named: str
) -> None:
    path = tmp_path / "mixin.yaml"
    path.write_text(yaml.safe_dump(config))
    result = in_process("mixin", "--config", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def documented_mixin_examples() -> list[dict[str, Any]]:
    part = doc("alerts.md").split("## Rendering for your setup", 1)[1].split("\n## ", 1)[0]
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", part, re.S)]


def test_the_docs_list_the_defaults_and_valid_examples() -> None:
    reference, *examples = documented_mixin_examples()
    assert validate(MixinConfig, reference) == MixinConfig()
    assert set(reference["thresholds"]) == {f.name for f in dataclasses.fields(Thresholds)}
    assert len(examples) == 3
    for example in examples:
        validate(MixinConfig, example)


def test_a_rendering_of_your_own_names_the_command_that_made_it(tmp_path: Path) -> None:
    """Not "GENERATED by make mixin": that is the repository's copy, and a user comparing the
    two must tell them apart."""
    config = tmp_path / "mixin.yaml"
    config.write_text(yaml.safe_dump(USER_CONFIG))
    assert main(["mixin", "--config", str(config), "--out", str(tmp_path / "out")]) == 0
    for name in ("prometheus_alerts.yaml", "prometheus_rules.yaml", "prometheusrule.yaml"):
        text = (tmp_path / "out" / name).read_text()
        assert f"GENERATED by `specwatch mixin --config {config}`" in text.replace("\n# ", " ")
        assert "make mixin" not in text
    shipped = (REPO / "alerts" / "prometheus_alerts.yaml").read_text()
    assert "GENERATED by `make mixin`" in shipped
