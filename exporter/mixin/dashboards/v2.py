"""The dashboards in Grafana's v2 schema (``dashboard.grafana.app/v2``), beside the classic JSON.

Grafana 12 and later import v2 resources; 11 and older read only the classic (v1) JSON the
builders write. The v2 form is derived from the classic one, field by field, so the two never
say different things: panels become ``elements`` referenced from a rows layout (each classic
row a ``RowsLayoutRow`` holding a grid of its panels, positions relative to the row),
variables, annotations and links take their v2 kinds, and the panels keep their options and
field config as they are.
"""

from __future__ import annotations

from typing import Any

API_VERSION = "dashboard.grafana.app/v2"
DATASOURCE = "${datasource}"
CURSOR_SYNC = {0: "Off", 1: "Crosshair", 2: "Tooltip"}
REFRESH = {0: "never", 1: "onDashboardLoad", 2: "onTimeRangeChanged"}
HIDE = {0: "dontHide", 1: "hideLabel", 2: "hideVariable"}
SORT = [
    "disabled",
    "alphabeticalAsc",
    "alphabeticalDesc",
    "numericalAsc",
    "numericalDesc",
    "alphabeticalCaseInsensitiveAsc",
    "alphabeticalCaseInsensitiveDesc",
    "naturalAsc",
    "naturalDesc",
]
# The refresh choices Grafana offers when a dashboard names none.
REFRESH_INTERVALS = ["5s", "10s", "30s", "1m", "5m", "15m", "30m", "1h", "2h", "1d"]
Json = dict[str, Any]


def data_query(group: str, datasource: str, spec: Json) -> Json:
    return {
        "kind": "DataQuery",
        "group": group,
        "version": "v0",
        "datasource": {"name": datasource},
        "spec": spec,
    }


def panel_query(target: Json) -> Json:
    """A classic target: its expression and options become the query's spec."""
    spec = {k: v for k, v in target.items() if k not in ("refId", "hide", "datasource")}
    return {
        "kind": "PanelQuery",
        "spec": {
            "refId": target["refId"],
            "hidden": bool(target.get("hide", False)),
            "query": data_query("prometheus", DATASOURCE, spec),
        },
    }


def element(panel: Json) -> Json:
    transformations = [
        {"kind": "Transformation", "group": t["id"], "spec": {"options": t.get("options", {})}}
        for t in panel.get("transformations", [])
    ]
    links = [
        {"title": link["title"], "url": link["url"], "targetBlank": link.get("targetBlank", False)}
        for link in panel.get("links", [])
    ]
    field_config = panel.get("fieldConfig", {})
    return {
        "kind": "Panel",
        "spec": {
            "id": panel["id"],
            "title": panel.get("title", ""),
            "description": panel.get("description", ""),
            "links": links,
            "data": {
                "kind": "QueryGroup",
                "spec": {
                    "queries": [panel_query(t) for t in panel.get("targets", [])],
                    "transformations": transformations,
                    "queryOptions": {},
                },
            },
            "vizConfig": {
                "kind": "VizConfig",
                "group": panel["type"],
                "version": panel.get("pluginVersion", ""),
                "spec": {
                    "options": panel.get("options", {}),
                    "fieldConfig": {
                        "defaults": field_config.get("defaults", {}),
                        "overrides": field_config.get("overrides", []),
                    },
                },
            },
        },
    }


def grid_item(panel: Json, row_y: int) -> Json:
    position = panel["gridPos"]
    spec: Json = {
        "x": position["x"],
        "y": position["y"] - row_y,
        "width": position["w"],
        "height": position["h"],
        "element": {"kind": "ElementReference", "name": f"panel-{panel['id']}"},
    }
    if panel.get("repeat"):
        spec["repeat"] = {
            "mode": "variable",
            "value": panel["repeat"],
            "direction": panel.get("repeatDirection", "h"),
        }
    return {"kind": "GridLayoutItem", "spec": spec}


def rows_layout(panels: list[Json]) -> Json:
    """Each classic row with the panels under it, as a row of the v2 rows layout."""
    rows: list[Json] = []
    row_y = 0
    for panel in panels:
        if panel["type"] == "row":
            row_y = panel["gridPos"]["y"] + panel["gridPos"]["h"]
            grid: Json = {"kind": "GridLayout", "spec": {"items": []}}
            spec = {"title": panel.get("title", ""), "collapse": panel.get("collapsed", False)}
            rows.append({"kind": "RowsLayoutRow", "spec": {**spec, "layout": grid}})
            continue
        if not rows:  # panels above the first row: a row without a header
            grid = {"kind": "GridLayout", "spec": {"items": []}}
            rows.append({"kind": "RowsLayoutRow", "spec": {"hideHeader": True, "layout": grid}})
        rows[-1]["spec"]["layout"]["spec"]["items"].append(grid_item(panel, row_y))
    return {"kind": "RowsLayout", "spec": {"rows": rows}}


def variable(v1: Json) -> Json:
    common = {
        "name": v1["name"],
        "label": v1.get("label", ""),
        "hide": HIDE[v1.get("hide", 0)],
        "skipUrlSync": v1.get("skipUrlSync", False),
        "current": v1.get("current") or {"text": "", "value": ""},
        "options": v1.get("options", []),
        "multi": v1.get("multi", False),
        "includeAll": v1.get("includeAll", False),
        "allowCustomValue": v1.get("allowCustomValue", True),
        "regex": v1.get("regex", ""),
        "refresh": REFRESH[v1.get("refresh", 0)],
    }
    if "allValue" in v1:
        common["allValue"] = v1["allValue"]
    if v1["type"] == "datasource":
        return {"kind": "DatasourceVariable", "spec": {**common, "pluginId": v1["query"]}}
    query = data_query("prometheus", DATASOURCE, {"query": v1["query"]})
    spec = {**common, "query": query, "sort": SORT[v1.get("sort", 0)]}
    return {"kind": "QueryVariable", "spec": spec}


def annotation(v1: Json) -> Json:
    datasource = v1.get("datasource", {})
    spec = {
        k: v
        for k, v in v1.items()
        if k not in ("builtIn", "datasource", "enable", "hide", "iconColor", "name")
    }
    return {
        "kind": "AnnotationQuery",
        "spec": {
            "query": data_query(datasource.get("type", ""), datasource.get("uid", ""), spec),
            "enable": v1.get("enable", True),
            "hide": v1.get("hide", False),
            "iconColor": v1.get("iconColor", ""),
            "name": v1.get("name", ""),
            "builtIn": bool(v1.get("builtIn", 0)),
        },
    }


def link(v1: Json) -> Json:
    defaults = {"icon": "", "tooltip": "", "tags": [], "asDropdown": False}
    flags = {"targetBlank": False, "includeVars": False, "keepTime": False}
    return {**defaults, **flags, **v1}


def to_v2(board: Json) -> Json:
    """The v2 resource of a classic dashboard (its uid as the resource's name)."""
    spec = {
        "title": board["title"],
        "description": board.get("description", ""),
        "tags": board.get("tags", []),
        "editable": board.get("editable", True),
        "cursorSync": CURSOR_SYNC[board.get("graphTooltip", 0)],
        "preload": False,
        "liveNow": False,
        "links": [link(x) for x in board.get("links", [])],
        "timeSettings": {
            "from": board["time"]["from"],
            "to": board["time"]["to"],
            "autoRefresh": board.get("refresh", ""),
            "autoRefreshIntervals": REFRESH_INTERVALS,
            "hideTimepicker": False,
            "fiscalYearStartMonth": board.get("fiscalYearStartMonth", 0),
            "timezone": board.get("timezone", "browser"),
        },
        "variables": [variable(v) for v in board.get("templating", {}).get("list", [])],
        "annotations": [annotation(a) for a in board.get("annotations", {}).get("list", [])],
        "elements": {f"panel-{p['id']}": element(p) for p in board["panels"] if p["type"] != "row"},
        "layout": rows_layout(board["panels"]),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "Dashboard",
        "metadata": {"name": board["uid"]},
        "spec": spec,
    }
