"""The alert rules, their promtool unit tests, the runbook and the shipped alerting configs.

The rules are checked by the tools that load them in production (promtool, amtool) and against
the table of docs/alerts.md: every alert listed there exists with its severity, is documented
in the runbook, and is proven to fire by at least one promtool scenario.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import PROJECT_URL, __version__
from exporter.analysis.findings import SEVERITIES
from exporter.exposition.families import FAMILIES, P
from exporter.mixin.groups import alerting, recorded
from exporter.mixin_config import MixinConfig
from tests.support.docs import runbook_queries, runbook_spans
from tests.support.loglines import decode, prefill, startup
from tests.support.speclogs import server_args
from tests.support.tools import (
    REPO,
    RULE_FILES,
    duration_seconds,
    group_order_problem,
    load_yaml,
    require_tool,
    shipped_rules,
)

ALERTS = REPO / "alerts"
ALERT_FILE = ALERTS / "prometheus_alerts.yaml"
RUNBOOK = ALERTS / "runbook.md"
UNIT_TESTS = sorted((ALERTS / "tests").glob("*.yaml"))
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
PROMETHEUS = REPO / "deploy" / "prometheus" / "prometheus.yml"
PROMETHEUS_RULE = REPO / "deploy" / "kubernetes" / "base" / "prometheusrule.yaml"
# The default runbook address: this release's runbook in the project's repository, absolute so
# that it opens from a notification too.
RUNBOOK_BASE = f"{PROJECT_URL}/blob/v{__version__}/alerts/runbook.md"

# The alerts docs/alerts.md lists: alert name -> severity.
LISTED_ALERTS = {
    "SpecDecodeAcceptLengthCollapsed": "critical",
    "SpecDecodeAcceptLengthLow": "warning",
    "SpecDecodeSlowerThanBaseline": "warning",
    "SpecDecodeDraftingOffBelowBaseline": "warning",
    "SpecDecodeCudaGraphDisabled": "warning",
    "SpecDecodeMisconfigured": "critical",
    "SpecDecodeServerCrashed": "critical",
    "SpecDecodeDpRankCollapsed": "critical",
    "SpecDecodeDraftTokensWasted": "info",
    "SpecDecodeDrafterGivenUp": "warning",
    "SpecDecodeRequestsWithoutBenefit": "warning",
    "SpecDecodeStatsMissing": "warning",
    "SpecDecodeLogFormatUnrecognized": "warning",
    "SpecwatchUpstreamDown": "warning",
    "SpecwatchLogNotFollowed": "warning",
    "SpecwatchLogInterleaved": "warning",
    "SpecwatchDown": "warning",
    "SpecwatchAbsent": "critical",
}
# Per-window gauges vanish when the server is idle; alerts on them must require traffic.
WINDOW_SERIES = re.compile(
    r"specwatch_(accept_length|accept_ratio|speedup|decode_windows_without_cuda_graph)\b"
)
TRAFFIC_GUARD = re.compile(r"target:specwatch_gen_throughput_tokens_per_second:sum(\{[^}]*\})? > 0")
RUNBOOK_SECTIONS = ("Meaning", "Impact", "Diagnosis", "Fix", "Escalation")
# Alerts whose value is a measurement (not a 0/1 flag): the description must quote it.
MEASURING_ALERTS = {
    "SpecDecodeAcceptLengthCollapsed",
    "SpecDecodeDpRankCollapsed",
    "SpecDecodeAcceptLengthLow",
    "SpecDecodeSlowerThanBaseline",
    "SpecDecodeDraftingOffBelowBaseline",
    "SpecDecodeDraftTokensWasted",
    "SpecDecodeRequestsWithoutBenefit",
    "SpecDecodeLogFormatUnrecognized",
}
# A specwatch series name standing alone, not inside a recording rule name (level:metric:ops).
SERIES_NAME = re.compile(r"(?<![\w:])specwatch_[a-z_]+")
RECORDED_NAME = re.compile(r"\btarget:specwatch_[a-z_]+:\w+")
FINDING_CODE = re.compile(r'code="(\w+)"')
# Series a promtool scenario may feed besides specwatch's own: Prometheus' scrape health.
PROMETHEUS_SERIES = {"up"}


@cache
def scenario_file(path: Path) -> dict[str, Any]:
    """A promtool scenario file, read once for the tests that look into it."""
    scenario: dict[str, Any] = load_yaml(path)
    return scenario


def load_rules() -> list[dict[str, Any]]:
    return [rule for group in shipped_rules()["groups"] for rule in group["rules"]]


def alert_rules() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in load_rules() if "alert" in rule}


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation dropped."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def runbook_sections() -> dict[str, str]:
    """Level-2 heading -> the text under it, from the runbook."""
    parts = re.split(r"^## (.+)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def run_tool(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    require_tool(argv[0])
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


# --- the rules themselves ---------------------------------------------------------------------


@pytest.mark.e2e
def test_promtool_accepts_every_rule() -> None:
    result = run_tool("promtool", "check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    found = sum(int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", result.stdout))
    assert found == len(load_rules())


@pytest.mark.parametrize("path", UNIT_TESTS, ids=lambda p: p.name)
@pytest.mark.e2e
def test_promtool_unit_scenarios_pass(path: Path) -> None:
    result = run_tool("promtool", "test", "rules", path.name, cwd=path.parent)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", UNIT_TESTS, ids=lambda p: p.name)
def test_unit_scenarios_fix_the_order_of_rule_groups(path: Path) -> None:
    scenario = scenario_file(path)
    assert group_order_problem(scenario, shipped_rules()["groups"]) is None


def test_every_listed_alert_exists_with_its_severity() -> None:
    rules = alert_rules()
    assert {name: rule["labels"]["severity"] for name, rule in rules.items()} == LISTED_ALERTS


@pytest.mark.parametrize("name", LISTED_ALERTS)
def test_alert_has_summary_description_and_runbook_anchor(name: str) -> None:
    annotations = alert_rules()[name]["annotations"]
    assert annotations["summary"].endswith("."), "a summary is one sentence"
    assert "{{" not in annotations["summary"], "one headline for every alert of a group"
    description = annotations["description"]
    assert "{{ $labels.target }}" in description or name.startswith("Specwatch")
    assert "{{ $labels.instance }}" in description or name == "SpecwatchAbsent"
    assert ("$value" in description) == (name in MEASURING_ALERTS)
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE}#{github_anchor(name)}"
    anchors = {github_anchor(heading) for heading in runbook_sections()}
    assert github_anchor(name) in anchors, f"runbook has no section for {name}"


@pytest.mark.parametrize("name", LISTED_ALERTS)
def test_runbook_section_covers_meaning_to_escalation(name: str) -> None:
    text = runbook_sections()[name]
    missing = [s for s in RUNBOOK_SECTIONS if not re.search(rf"^\*\*{s}", text, re.MULTILINE)]
    assert not missing, f"runbook section {name} lacks {missing}"


def runbook_greps() -> list[str]:
    """The ``grep`` command lines quoted in the runbook's prose."""
    return [s for s in runbook_spans() if s.startswith("grep ")]


def run_on_log(command: str, lines: list[str], folder: Path) -> str:
    """What ``command`` prints in a folder whose ``server.log`` holds ``lines``."""
    (folder / "server.log").write_text("\n".join(lines) + "\n")
    return run_tool("bash", "-c", command, cwd=folder).stdout.strip()


def graph_count(lines: list[str], folder: Path) -> str:
    """What the runbook's count of decode windows without CUDA graphs prints for this log."""
    (command,) = [s for s in runbook_greps() if "cuda graph: False" in s]
    return run_on_log(command, lines, folder)


@pytest.mark.e2e
def test_runbook_counts_decode_windows_without_graphs_not_prefill_lines(tmp_path: Path) -> None:
    """SGLang's prefill lines print ``cuda graph: False`` whatever decode runs: a count over
    every line tells an on-call that a node decoding in graphs has them off."""
    prefills = [prefill(60 + 4 * i) for i in range(6)]
    in_graphs = startup() + prefills + [decode(62 + 4 * i, 3.2, 0.73) for i in range(4)]
    without = startup() + prefills + [decode(62 + 4 * i, 3.2, 0.73, graph=False) for i in range(4)]
    assert graph_count(in_graphs, tmp_path) == "0"
    assert graph_count(without, tmp_path) == "4"


# Server arguments the runbook reads from the log, which SGLang writes as ServerArgs(key=value)
# and, from 0.5.23, as a dict ({'key': value}).
SERVER_ARGS_READ = (
    "speculative_algorithm",
    "disable_cuda_graph",
    "log_level",
    "decode_log_interval",
)


@pytest.mark.e2e
@pytest.mark.parametrize("key", SERVER_ARGS_READ)
def test_runbook_reads_server_arguments_from_either_form_sglang_logs(
    key: str, tmp_path: Path
) -> None:
    (command,) = [s for s in runbook_greps() if s.startswith("grep -o") and key in s]
    older = run_on_log(command, startup(algorithm="EAGLE"), tmp_path)
    dict_form = run_on_log(command, [server_args("EAGLE", draft_path="/models/d")], tmp_path)
    assert older.startswith(f"{key}=") and dict_form.startswith(f"{key}': "), (older, dict_form)


def test_alerts_on_window_gauges_require_traffic() -> None:
    for name, rule in alert_rules().items():
        if WINDOW_SERIES.search(rule["expr"]):
            assert TRAFFIC_GUARD.search(rule["expr"]), f"{name} could fire on an idle server"


# The longest scrape interval docs/deployment.md supports. Since Prometheus 3 a range leaves out
# its start, so a window of n intervals holds n samples at most, one fewer when a scrape is late.
LONGEST_SCRAPE = 60
RANGE = re.compile(r"(\w+)\((?:[^()]|\([^()]*\))*?\[(\w+)\]")
# Functions of two samples or more (a rate), and of one (a mean over time).
SLOPES = ("rate", "increase", "irate", "delta", "idelta", "deriv")


def range_problems(expr: str) -> list[str]:
    """Ranges too short for the longest supported scrape interval: a mean needs a sample left
    when one scrape is late (two intervals), a rate two (four intervals, as Grafana's
    ``$__rate_interval``)."""
    return [
        f"{function}(...[{window}])"
        for function, window in RANGE.findall(expr)
        if duration_seconds(window) < LONGEST_SCRAPE * (4 if function in SLOPES else 2)
    ]


@pytest.mark.parametrize(
    "config", [MixinConfig(), MixinConfig(speed_slo=0.95)], ids=["shipped", "speed budget"]
)
def test_every_range_holds_at_the_longest_supported_scrape_interval(config: MixinConfig) -> None:
    rules = [rule for group in recorded(config) + alerting(config) for rule in group["rules"]]
    assert range_problems("avg_over_time(x[1m])") and range_problems('rate(x{a="b"}[2m])')
    assert {
        rule.get("alert", rule.get("record")): range_problems(rule["expr"])
        for rule in rules
        if range_problems(rule["expr"])
    } == {}


def exposed_series() -> set[str]:
    """Series names specwatch's /metrics can carry, as Prometheus stores them (a histogram as
    classic series, or under its own name where Prometheus 3 converts it to a native one)."""
    parts = {
        "gauge": ("",),
        "counter": ("_total",),
        "histogram": ("", "_bucket", "_count", "_sum"),
        "summary": ("_count", "_sum"),
    }
    return {P + short + part for short, (kind, _) in FAMILIES.items() for part in parts[kind]}


def recorded_names() -> set[str]:
    return {rule["record"] for rule in load_rules() if "record" in rule}


def unit_test_series() -> list[str]:
    """Every input series of the promtool scenarios."""
    return [
        series["series"]
        for path in UNIT_TESTS
        for group in scenario_file(path)["tests"]
        for series in group.get("input_series", [])
    ]


def test_rules_read_only_series_the_exporter_exports() -> None:
    """A metric renamed in the exporter must break the rules here, not silence them in prod."""
    exprs = " ".join(rule["expr"] for rule in load_rules())
    assert set(SERIES_NAME.findall(exprs)) <= exposed_series()
    assert set(RECORDED_NAME.findall(exprs)) <= recorded_names()
    assert set(FINDING_CODE.findall(exprs)) <= set(SEVERITIES)


def test_unit_scenarios_feed_series_the_exporter_exports() -> None:
    """Hand-written input series must look like a real scrape: names, codes and severities."""
    for series in unit_test_series():
        name = series.split("{", 1)[0]
        assert name in exposed_series() | PROMETHEUS_SERIES, series
        if name == P + "finding":
            labels = dict(re.findall(r'(\w+)="([^"]*)"', series))
            assert SEVERITIES[labels["code"]] == labels["severity"], series


@pytest.mark.e2e
def test_runbook_promql_is_valid_and_names_real_series(tmp_path: Path) -> None:
    queries = runbook_queries()
    assert len(queries) > 20, "the pattern no longer finds the runbook's queries"
    text = " ".join(queries)
    assert set(SERIES_NAME.findall(text)) <= exposed_series()
    assert set(RECORDED_NAME.findall(text)) <= recorded_names()
    assert set(FINDING_CODE.findall(text)) <= set(SEVERITIES)
    rules = [{"record": f"runbook:query_{i}:check", "expr": q} for i, q in enumerate(queries)]
    path = tmp_path / "runbook-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbook", "rules": rules}]}))
    result = run_tool("promtool", "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_rule_trusts_sglang_accept_rate() -> None:
    """SGLang's logged/exported accept rate changed meaning in 2026 (docs/alerts.md)."""
    for rule in load_rules():
        assert "sglang" not in rule["expr"], rule.get("alert") or rule["record"]


def test_recording_rules_are_named_level_metric_operations() -> None:
    for rule in load_rules():
        if "record" in rule:
            level, metric, operations = rule["record"].split(":")
            # The labels a rule keeps: a target's, a job's (a cluster's), a target's per load
            # band, or the fleet's peers (model, hardware, band).
            levels = ("target", "job", "target_band", "served_model_hardware_band")
            assert level in levels and operations, rule["record"]
            assert metric.startswith("specwatch_"), rule["record"]


@pytest.mark.parametrize("where", ["rules header", "runbook"])
def test_every_threshold_is_documented(where: str) -> None:
    """Thresholds are documented once at the top of the alert file and again in the runbook."""
    rules_header = [
        line for line in ALERT_FILE.read_text().splitlines(True) if line.startswith("#")
    ]
    text = "".join(rules_header) if where == "rules header" else runbook_sections()["Thresholds"]
    for name, rule in alert_rules().items():
        numbers = re.findall(r"(?:[<>]=?)\s*([0-9.]+)|([0-9.]+)\s*\*", rule["expr"])
        for number in {a or b for a, b in numbers} - {"0"}:
            assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text), (name, number)


def test_every_alert_fires_in_some_unit_scenario_and_stays_silent_in_another() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in UNIT_TESTS:
        for group in scenario_file(path)["tests"]:
            for case in group.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    assert fired == set(LISTED_ALERTS)
    assert silent == set(LISTED_ALERTS)


# --- generated Kubernetes rendering -----------------------------------------------------------


def test_prometheus_rule_holds_every_shipped_group_under_kube_prometheus_labels() -> None:
    manifest = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["metadata"]["labels"]["role"] == "alert-rules"
    assert manifest["spec"] == shipped_rules()


# --- shipped Alertmanager and Prometheus examples ---------------------------------------------


@pytest.mark.e2e
def test_amtool_accepts_the_alertmanager_example() -> None:
    result = run_tool("amtool", "check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("severity", "receiver"), [("critical", "pager"), ("warning", "tickets"), ("info", "null")]
)
@pytest.mark.e2e
def test_alertmanager_example_routes_by_severity(severity: str, receiver: str) -> None:
    result = run_tool(
        "amtool", "config", "routes", "test", f"--config.file={ALERTMANAGER}",
        "alertname=SpecDecodeAnything", f"severity={severity}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == [receiver]


@pytest.mark.e2e
def test_prometheus_example_scrapes_job_specwatch_and_loads_the_rules(tmp_path: Path) -> None:
    """Laid out as documented: the config beside a rules/ directory holding the rules file."""
    shutil.copy(PROMETHEUS, tmp_path / "prometheus.yml")
    (tmp_path / "rules").mkdir()
    for path in RULE_FILES:
        shutil.copy(path, tmp_path / "rules" / path.name)
    result = run_tool("promtool", "check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(RULE_FILES)} rule files found" in result.stdout
    found = sum(int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", result.stdout))
    assert found == len(load_rules())
    config = yaml.safe_load(PROMETHEUS.read_text())
    assert [job["job_name"] for job in config["scrape_configs"]] == ["specwatch"]
