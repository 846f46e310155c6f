"""The generated Grafana dashboards: committed = generated, linted, schema-valid, valid PromQL.

The lint rules are those of grafana/dashboard-linter (datasource/job/instance variables,
reload on time change, templated datasource, title+description, units, `$__rate_interval`,
job/instance matchers, counters only under rate), re-stated here because the Go linter cannot
be built on the project's machines. Expectations come from docs/metrics.md (uids, finding codes,
metric names) and Grafana's formats, not from the generator.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from exporter.mixin.dashboards.build import render
from exporter.mixin.dashboards.queries import dashboard_queries, expand
from tests.support.tools import REPO, promtool_check, shipped_rules

SCHEMAS = REPO / "tests" / "data" / "grafana-schema"
NODE, FLEET = "specwatch-node.json", "specwatch-fleet.json"
# The Dashboards section of docs/metrics.md: file name -> uid.
UIDS = {NODE: "specwatch-node", FLEET: "specwatch-fleet"}
# The Findings table of docs/metrics.md: every finding code the node dashboard must explain.
FINDING_CODES = {
    "eagle3_draft_with_eagle_algorithm",
    "cuda_graph_disabled",
    "draft_tokens_excessive",
    "decode_stats_not_logged",
    "metrics_endpoint_disabled",
    "log_format_unrecognized",
    "running_requests_capped",
}
TEMPLATED_DS = {"$datasource", "${datasource}"}
# Unit ids from Grafana's value-format registry (the ones dashboard-linter accepts, subset).
GRAFANA_UNITS = {
    "none", "short", "percent", "percentunit", "s", "ms", "cps", "ops", "reqps",
    "bool", "bool_on_off", "bool_yes_no", "bytes",
}  # fmt: skip
# Grafana panel type -> schema file (the file names drop the dash of "state-timeline").
PANEL_SCHEMA = {
    "timeseries": "timeseries",
    "stat": "stat",
    "table": "table",
    "state-timeline": "statetimeline",
    "heatmap": "heatmap",
}
SELECTOR = re.compile(r"\b([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}")


def committed(name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads((REPO / "dashboards" / name).read_text(encoding="utf-8"))
    return board


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Visual panels (rows are layout, not panels)."""
    return [p for p in board["panels"] if p["type"] != "row"]


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


def exprs(board: dict[str, Any]) -> list[str]:
    return [q.expr for q in dashboard_queries(board)]


@pytest.fixture(params=[NODE, FLEET])
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    return committed(request.param)


# --- generated == committed -------------------------------------------------------------


def test_committed_json_equals_generator_output() -> None:
    generated = render()
    assert set(generated) == set(UIDS)
    for name, text in generated.items():
        on_disk = (REPO / "dashboards" / name).read_text(encoding="utf-8")
        assert on_disk == text, f"dashboards/{name} is stale: run `make mixin`"


def test_dashboards_have_the_uids_fixed_by_the_spec() -> None:
    for name, uid in UIDS.items():
        assert committed(name)["uid"] == uid


# --- dashboard-linter rules -------------------------------------------------------------


def test_datasource_variable_is_a_prometheus_datasource_variable(board: dict[str, Any]) -> None:
    ds = variables(board)["datasource"]
    assert ds["type"] == "datasource"
    assert ds["query"] == "prometheus"
    assert ds["label"] == "Data source"


@pytest.mark.parametrize("name,label", [("job", "Job"), ("instance", "Instance")])
def test_job_and_instance_variables_are_multi_select_on_the_datasource(
    board: dict[str, Any], name: str, label: str
) -> None:
    var = variables(board)[name]
    assert var["type"] == "query"
    assert var["label"] == label
    assert var["datasource"]["uid"] in TEMPLATED_DS
    assert var["multi"] is True
    assert var["includeAll"] is True
    assert var["allValue"] == ".+"


def test_query_variables_use_label_values_and_reload_on_time_change(
    board: dict[str, Any],
) -> None:
    for var in variables(board).values():
        if var["type"] == "query":
            assert re.fullmatch(r"label_values\(.+, \w+\)", var["query"]), var["name"]
            assert var["refresh"] == 2, var["name"]
            assert var["datasource"]["uid"] in TEMPLATED_DS


def test_node_dashboard_selects_a_target_and_its_dp_ranks() -> None:
    vars_ = variables(committed(NODE))
    assert vars_["target"]["multi"] is False, "the node dashboard shows one target"
    # dp_rank exists only on some engines: "All" must also match series without the label.
    assert vars_["dp_rank"]["includeAll"] is True
    assert re.fullmatch(vars_["dp_rank"]["allValue"], "")


def test_every_panel_and_query_uses_the_templated_datasource(board: dict[str, Any]) -> None:
    for panel in panels(board):
        assert panel["datasource"]["uid"] in TEMPLATED_DS, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in TEMPLATED_DS, panel["title"]


def test_no_datasource_uid_is_hard_coded(board: dict[str, Any]) -> None:
    def uids(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["datasource"]["uid"]] if isinstance(node.get("datasource"), dict) else []
            return found + [u for v in node.values() for u in uids(v)]
        if isinstance(node, list):
            return [u for v in node for u in uids(v)]
        return []

    # "-- Grafana --" is Grafana's built-in annotation source, present in every dashboard.
    assert set(uids(board)) <= TEMPLATED_DS | {"-- Grafana --"}


def test_every_panel_has_title_description_unit_and_thresholds(board: dict[str, Any]) -> None:
    for panel in panels(board):
        defaults = panel["fieldConfig"]["defaults"]
        assert panel["title"].strip()
        assert len(panel.get("description", "")) > 20, panel["title"]
        assert defaults.get("unit") in GRAFANA_UNITS, panel["title"]
        if panel["type"] != "heatmap":  # a heatmap colours cells by its scheme, not thresholds
            assert defaults["thresholds"]["steps"], panel["title"]


def test_rate_windows_are_the_rate_interval_variable(board: dict[str, Any]) -> None:
    for expr in exprs(board):
        for window in re.findall(r"\[([^\]]*)\]", expr):
            assert window == "$__rate_interval", expr


def test_counters_and_buckets_are_only_read_through_rate(board: dict[str, Any]) -> None:
    for expr in exprs(board):
        for match in SELECTOR.finditer(expr):
            if match[1].endswith(("_total", "_bucket")):
                assert expr[: match.start()].endswith("rate("), expr


def test_every_selector_filters_by_job_and_instance(board: dict[str, Any]) -> None:
    for query in dashboard_queries(board):
        if query.where.endswith(("variable job", "variable instance")):
            continue  # the variables that define $job and $instance
        selectors = SELECTOR.findall(query.expr)
        assert selectors, f"{query.where}: no label selector"
        for _, matchers in selectors:
            assert 'job=~"$job"' in matchers and 'instance=~"$instance"' in matchers, query


def test_node_queries_are_limited_to_the_selected_target() -> None:
    for query in dashboard_queries(committed(NODE)):
        if query.where.endswith("variable target"):
            continue  # the variable that lists the targets
        for metric, matchers in SELECTOR.findall(query.expr):
            if metric.startswith("specwatch_") and metric != "specwatch_build_info":
                assert 'target=~"$target"' in matchers, query


def test_tables_have_no_footer_option_grafana_13_dropped(board: dict[str, Any]) -> None:
    tables = [p for p in panels(board) if p["type"] == "table"]
    assert tables and [p["title"] for p in tables if "footer" in p["options"]] == []


def test_dashboards_are_read_only(board: dict[str, Any]) -> None:
    assert board["editable"] is False


# --- content ------------------------------------------------------------------------------


def panel(board: dict[str, Any], title: str) -> dict[str, Any]:
    matches = [p for p in panels(board) if p["title"] == title]
    assert len(matches) == 1, f"one panel titled {title!r}"
    return matches[0]


# Issue text for each dashboard -> (panel types that can show it, patterns all found in one
# panel's queries). Metric names are those of docs/metrics.md.
WANTED_PANELS: dict[str, dict[str, tuple[set[str], tuple[str, ...]]]] = {
    NODE: {
        "accept length over time": ({"timeseries"}, (r"\bspecwatch_accept_length\{",)),
        "derived accept rate": ({"timeseries", "stat"}, (r"\bspecwatch_accept_ratio\{",)),
        "throughput against the baseline": (
            {"timeseries"},
            (
                r"\bspecwatch_gen_throughput_tokens_per_second\{",
                r"\bspecwatch_baseline_gen_throughput_tokens_per_second\{",
            ),
        ),
        # The rules' ratio: the node's own baseline, else the fleet's, named by its source.
        "speedup ratio": ({"timeseries"}, (r"\btarget:specwatch_speedup:avg5m\{",)),
        "running and queued requests": (
            {"timeseries"},
            (r"\bspecwatch_running_requests\{", r"\bspecwatch_queued_requests\{"),
        ),
        "token usage": ({"timeseries"}, (r"\bspecwatch_token_usage_ratio\{",)),
        "CUDA-graph state over time": ({"state-timeline"}, (r"\bspecwatch_cuda_graph\{",)),
        "active findings": ({"table"}, (r"\bspecwatch_finding\{",)),
        "exporter health": ({"state-timeline", "stat"}, (r"\bup\{",)),
        "upstream health": ({"state-timeline", "stat"}, (r"\bspecwatch_upstream_up\{",)),
    },
    FLEET: {
        "worst accept lengths": ({"table"}, (r"bottomk\(", r"\bspecwatch_accept_length\{")),
        "worst speedups": ({"table"}, (r"bottomk\(", r"\btarget:specwatch_speedup:avg5m\{")),
        "nodes slower than their baseline": (
            {"stat"},
            (r"\btarget:specwatch_speedup:avg5m\{", r"< bool 1\b"),
        ),
        "findings by code": ({"table"}, (r"count by \(code\b", r"\bspecwatch_finding\{")),
        "accept-length distribution over time": (
            {"heatmap"},
            (r"\bspecwatch_accept_length_windows_bucket\{",),
        ),
        "exporter coverage now": ({"table"}, (r"\bup\{", r"\bspecwatch_build_info\{")),
        "exporter coverage over time": ({"state-timeline"}, (r"\bup\{",)),
    },
}


@pytest.mark.parametrize(
    ("name", "wanted"),
    [(name, wanted) for name, wants in WANTED_PANELS.items() for wanted in wants],
    ids=lambda value: value.removesuffix(".json").replace(" ", "-"),
)
def test_dashboard_has_every_panel_the_issue_lists(name: str, wanted: str) -> None:
    types, patterns = WANTED_PANELS[name][wanted]
    showing = [
        p["title"]
        for p in panels(committed(name))
        if p["type"] in types
        and all(
            re.search(pattern, " ".join(t["expr"] for t in p["targets"])) for pattern in patterns
        )
    ]
    assert showing, f"{name}: no {'/'.join(sorted(types))} panel shows {wanted}"


def test_node_accept_length_shows_collapse_line_and_expected_value() -> None:
    accept = panel(committed(NODE), "Accept length")
    assert accept["type"] == "timeseries"
    steps = accept["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert 1.0 in [s["value"] for s in steps]
    assert accept["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"
    queried = " ".join(t["expr"] for t in accept["targets"])
    assert "specwatch_accept_length{" in queried
    assert "specwatch_expected_accept_length{" in queried


def test_node_findings_table_explains_every_finding_code() -> None:
    findings = panel(committed(NODE), "Active findings")
    assert "specwatch_finding{" in findings["targets"][0]["expr"]
    mapped: set[str] = set()
    for override in findings["fieldConfig"]["overrides"]:
        for prop in override["properties"]:
            if prop["id"] == "mappings":
                for mapping in prop["value"]:
                    mapped |= {k for k, v in mapping["options"].items() if len(v["text"]) > 40}
    assert mapped >= FINDING_CODES


def test_node_shows_cuda_graph_state_over_time_and_its_share() -> None:
    board = committed(NODE)
    assert panel(board, "CUDA graph state")["type"] == "state-timeline"
    share = panel(board, "Decode windows by CUDA graph")["targets"][0]["expr"]
    assert "rate(specwatch_decode_windows_total{" in share


def test_node_marks_firing_alerts_as_annotations() -> None:
    annotations = committed(NODE)["annotations"]["list"]
    alerts = [a for a in annotations if "ALERTS{" in a.get("expr", "")]
    assert len(alerts) == 1 and 'alertstate="firing"' in alerts[0]["expr"]
    assert alerts[0]["datasource"]["uid"] in TEMPLATED_DS


@pytest.mark.parametrize(
    ("board", "histograms"),
    [
        (
            FLEET,
            ["specwatch_accept_length_windows_bucket{", "specwatch_request_accept_length_bucket{"],
        ),
        (NODE, ["specwatch_request_accept_length_bucket{"]),
    ],
)
def test_heatmaps_read_the_accept_length_histograms(board: str, histograms: list[str]) -> None:
    heat = [p for p in panels(committed(board)) if p["type"] == "heatmap"]
    assert len(heat) == len(histograms)
    for panel_, histogram in zip(heat, histograms, strict=True):
        target = panel_["targets"][0]
        assert histogram in target["expr"]
        assert target["format"] == "heatmap" and "by (le)" in target["expr"]
        assert panel_["options"]["calculate"] is False  # Prometheus already bucketed it


@pytest.mark.parametrize(
    ("board", "title"),
    [(NODE, "Requests without benefit"), (FLEET, "Requests without benefit per target")],
)
def test_the_share_without_benefit_is_drawn_against_the_alerts_line(board: str, title: str) -> None:
    shown = panel(committed(board), title)
    assert "target:specwatch_requests_without_benefit:ratio{" in shown["targets"][0]["expr"]
    steps_ = shown["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps_ if s["color"] == "red"] == [0.1]
    assert "specdecoderequestswithoutbenefit" in json.dumps(shown["links"]).lower()


def test_fleet_tables_link_each_target_to_the_node_dashboard() -> None:
    links = re.findall(r'"url": "(/d/[^"]+)"', json.dumps(committed(FLEET)))
    assert links and all(link.startswith(f"/d/{UIDS[NODE]}") for link in links)
    assert all("var-target=${__data.fields.target}" in link for link in links)


def test_dashboards_link_to_each_other_and_to_the_runbook(board: dict[str, Any]) -> None:
    links = board["links"]
    # A tag link lists every dashboard with the tag: both carry it, so each links the other.
    tagged = [link for link in links if link["type"] == "dashboards"]
    assert tagged and set(tagged[0]["tags"]) <= set(committed(NODE)["tags"])
    assert set(tagged[0]["tags"]) <= set(committed(FLEET)["tags"])
    assert tagged[0]["includeVars"] and tagged[0]["keepTime"]
    assert any(link.get("url", "").endswith("alerts/runbook.md") for link in links)
    # Shown above the panels, not folded into the controls menu.
    toggles = links + board["annotations"]["list"]
    assert all("placement" not in item for item in toggles)


def runbook_anchors() -> set[str]:
    """GitHub's anchors for the runbook's headings (lower case, spaces as dashes)."""
    text = (REPO / "alerts" / "runbook.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#{2,} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def panel_runbook_anchors(board: dict[str, Any]) -> list[str]:
    return [
        link["url"].partition("#")[2]
        for p in panels(board)
        for link in p.get("links", [])
        if "alerts/runbook.md#" in link["url"]
    ]


def test_panel_runbook_links_point_at_existing_runbook_sections(board: dict[str, Any]) -> None:
    anchors = panel_runbook_anchors(board)
    assert anchors
    assert set(anchors) <= runbook_anchors()


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in shipped_rules()["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_has_a_panel_linking_its_runbook_section() -> None:
    alerts = {r["alert"].lower() for r in alert_rules()}
    linked = {a for name in UIDS for a in panel_runbook_anchors(committed(name))}
    assert alerts and alerts <= linked, f"no panel explains {sorted(alerts - linked)}"


def test_dashboards_and_alerts_link_the_same_runbook(board: dict[str, Any]) -> None:
    from_alerts = {r["annotations"]["runbook_url"].partition("#")[0] for r in alert_rules()}
    urls = [link["url"] for p in panels(board) for link in p.get("links", [])] + [
        link["url"] for link in board["links"] if link["type"] == "link"
    ]
    assert {url.partition("#")[0] for url in urls} == from_alerts


def test_panels_fit_the_grid_without_overlapping(board: dict[str, Any]) -> None:
    taken: set[tuple[int, int]] = set()
    for p in board["panels"]:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, p["title"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
    ids = [p["id"] for p in board["panels"] if "id" in p]
    assert len(ids) == len(set(ids))


# --- JSON schema ------------------------------------------------------------------------


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (SCHEMAS / f"{name}.jsonschema.json").read_text(encoding="utf-8")
    )
    return loaded


def dashboard_validator() -> jsonschema.Draft7Validator:
    """Grafana's dashboard schema, with `any`-typed override fields accepting any JSON value.

    The SDK types `MatcherConfig.options` and `DynamicConfigValue.value` as `any`; the schema
    generator narrowed both to objects, which rejects the SDK's own `override_by_name` output.
    """
    relaxed = schema("dashboard")
    relaxed["definitions"]["MatcherConfig"]["properties"]["options"] = {}
    relaxed["definitions"]["DynamicConfigValue"]["properties"]["value"] = {}
    return jsonschema.Draft7Validator(relaxed)


def schema_errors(validator: jsonschema.Draft7Validator, instance: Any) -> list[str]:
    """Readable errors; for "panel or row" (anyOf) failures, the reasons inside each branch."""

    def leaves(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
        return [leaf for sub in error.context for leaf in leaves(sub)] if error.context else [error]

    return [
        f"{list(leaf.absolute_path)}: {leaf.message[:200]}"
        for error in validator.iter_errors(instance)
        for leaf in leaves(error)
    ]


def test_dashboards_validate_against_grafana_dashboard_schema(board: dict[str, Any]) -> None:
    assert schema_errors(dashboard_validator(), board) == []


def panel_schema_errors(p: dict[str, Any]) -> list[str]:
    """Errors of a panel's `options` and `fieldConfig.defaults.custom` against its type's schema."""
    definitions = schema(PANEL_SCHEMA[p["type"]])["definitions"]
    parts = {"Options": p.get("options"), "FieldConfig": p["fieldConfig"]["defaults"].get("custom")}
    errors = []
    for definition, instance in parts.items():
        if definition not in definitions:
            continue  # stat panels have no custom field config
        validator = jsonschema.Draft7Validator(
            {"$ref": f"#/definitions/{definition}", "definitions": definitions}
        )
        errors += [f"{p['title']} {definition} {e}" for e in schema_errors(validator, instance)]
    return errors


def test_panel_options_validate_against_their_panel_schema(board: dict[str, Any]) -> None:
    for p in panels(board):
        assert panel_schema_errors(p) == []


def test_panel_schema_validation_rejects_unknown_options() -> None:
    accept = copy.deepcopy(panel(committed(NODE), "Accept length"))
    accept["options"]["legend"]["displayMode"] = "grid"
    accept["fieldConfig"]["defaults"]["custom"]["lineWidth"] = "thick"
    errors = panel_schema_errors(accept)
    assert any("displayMode" in e for e in errors) and any("lineWidth" in e for e in errors)


def test_schema_validation_rejects_a_broken_panel() -> None:
    broken = copy.deepcopy(committed(NODE))
    broken["panels"][1]["gridPos"]["h"] = "tall"
    broken["panels"][2]["colour"] = "red"
    errors = schema_errors(dashboard_validator(), broken)
    assert any("gridPos" in e for e in errors) and any("colour" in e for e in errors)


# --- PromQL -------------------------------------------------------------------------------


def test_expand_fills_variables_like_grafana_all_and_keeps_regex_groups() -> None:
    expr = (
        'label_replace(rate(m{job=~"$job", dp_rank=~"${dp_rank}"}[$__rate_interval]), '
        '"e", "$1", "c", "(.+)")'
    )
    assert expand(expr, "2m") == (
        'label_replace(rate(m{job=~".+", dp_rank=~".*"}[2m]), "e", "$1", "c", "(.+)")'
    )


def test_expand_rejects_a_variable_no_dashboard_defines() -> None:
    with pytest.raises(KeyError, match="targte"):
        expand('m{target=~"$targte"}', "1m")


@pytest.mark.e2e
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    queries = [q for name in UIDS for q in dashboard_queries(committed(name))]
    result = promtool_check([expand(q.expr, "1m") for q in queries], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


@pytest.mark.e2e
def test_promtool_check_rejects_an_invalid_query(tmp_path: Path) -> None:
    result = promtool_check(['sum by (target (specwatch_accept_length{job=~".+"})'], tmp_path)
    assert result.returncode != 0


# --- Grafana provisioning ---------------------------------------------------------------

PROVISIONING = REPO / "deploy" / "grafana" / "provisioning"


def provisioning(kind: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (PROVISIONING / kind / "specwatch.yaml").read_text(encoding="utf-8")
    )
    return loaded


def test_provisioned_datasource_is_the_default_prometheus() -> None:
    config = provisioning("datasources")
    assert config["apiVersion"] == 1
    (datasource,) = config["datasources"]
    # The dashboards' datasource variable lists datasources of this type, the default first.
    assert datasource["type"] == variables(committed(NODE))["datasource"]["query"]
    assert datasource["isDefault"] is True and datasource["access"] == "proxy"
    assert re.fullmatch(r"\d+s", datasource["jsonData"]["timeInterval"])


def test_dashboard_provider_loads_files_unchanged_and_read_only() -> None:
    config = provisioning("dashboards")
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    assert provider["allowUiUpdates"] is False
    readme = (REPO / "deploy" / "grafana" / "README.md").read_text(encoding="utf-8")
    assert f"`{provider['options']['path']}`" in readme, "README must say where to mount"


def test_dashboards_need_no_import_step(board: dict[str, Any]) -> None:
    # `__inputs`/`${DS_...}` placeholders are only resolved by the import UI, not by provisioning.
    assert "__inputs" not in board and "__requires" not in board
    assert "${DS_" not in json.dumps(board)


# --- Grafana v2 (dashboard.grafana.app/v2) ------------------------------------------------


def committed_v2(name: str) -> dict[str, Any]:
    board: dict[str, Any] = json.loads((REPO / "dashboards-v2" / name).read_text("utf-8"))
    return board


def v2_validator() -> jsonschema.Draft7Validator:
    """The SDK's v2 schema of a dashboard's spec, its `any` override fields relaxed as above."""
    relaxed = schema("dashboardv2")
    relaxed["definitions"]["MatcherConfig"]["properties"]["options"] = {}
    relaxed["definitions"]["DynamicConfigValue"]["properties"]["value"] = {}
    return jsonschema.Draft7Validator({**relaxed, "$ref": "#/definitions/Dashboard"})


@pytest.mark.parametrize("name", [NODE, FLEET])
def test_v2_dashboards_validate_against_the_sdks_v2_schema(name: str) -> None:
    resource = committed_v2(name)
    assert resource["apiVersion"] == "dashboard.grafana.app/v2"
    assert resource["metadata"]["name"] == committed(name)["uid"]
    assert schema_errors(v2_validator(), resource["spec"]) == []


def test_v2_schema_validation_rejects_a_broken_dashboard() -> None:
    broken = copy.deepcopy(committed_v2(NODE))
    broken["spec"]["layout"]["spec"]["rows"][0]["spec"]["layout"]["kind"] = "Grid"
    del broken["spec"]["timeSettings"]["from"]
    assert len(schema_errors(v2_validator(), broken["spec"])) >= 2


@pytest.mark.parametrize("name", [NODE, FLEET])
def test_v2_dashboards_hold_every_panel_and_query_of_the_classic_ones(name: str) -> None:
    classic = [p for p in committed(name)["panels"] if p["type"] != "row"]
    spec = committed_v2(name)["spec"]
    placed = [
        item["spec"]["element"]["name"]
        for row in spec["layout"]["spec"]["rows"]
        for item in row["spec"]["layout"]["spec"]["items"]
    ]
    assert sorted(placed) == sorted(spec["elements"]) == sorted(f"panel-{p['id']}" for p in classic)
    for p in classic:
        v2 = spec["elements"][f"panel-{p['id']}"]["spec"]
        queries = [q["spec"]["query"]["spec"]["expr"] for q in v2["data"]["spec"]["queries"]]
        assert (v2["title"], queries) == (p["title"], [t["expr"] for t in p["targets"]])
    titles = [r["spec"].get("title") for r in spec["layout"]["spec"]["rows"]]
    assert titles == [p["title"] for p in committed(name)["panels"] if p["type"] == "row"]
