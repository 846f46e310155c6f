"""The rendering as data for the jsonnet face (``specwatch-mixin/mixin.libsonnet``).

jsonnet users (kube-prometheus, GitOps) cannot run the Python, so the rendering is written as
``rendered.json``: ``make mixin`` keeps the defaults' in ``specwatch-mixin/``, and
``specwatch mixin --config FILE --out DIR`` writes one for the user's config beside the rules.
Its rules, alerts (the speed budget's included) and dashboards are rendered once per shape
(one cluster, many clusters) with placeholder strings where ``_config`` may put its own: the
selector, the cluster label, the runbook and Grafana addresses, the dashboard uid prefix and
tags. The libsonnet only replaces those strings, so Python stays the one source of every rule
and every number in it. Thresholds and the speed budget are numbers written into rule text,
so they are set in the YAML config that renders the file, never in jsonnet.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from exporter.mixin.dashboards.build import render as render_dashboards
from exporter.mixin.dashboards.build import render_v2
from exporter.mixin.groups import alerting, recorded
from exporter.mixin_config import MixinConfig

# Values no real config uses, each valid where it stands, so the rendering accepts them.
PLACEHOLDERS = {
    "selector": 'specwatch_mixin_selector="placeholder"',
    "runbook": "https://specwatch-runbook.invalid/",
    "grafana": "https://specwatch-grafana.invalid",
    "cluster": "specwatch_mixin_cluster",
    "uid": "specwatchmixinuid",
    "tag": "specwatch-mixin-tag",
}
LIBRARY_PATH = "specwatch-mixin/rendered.json"
LIBRARY_NAME = "rendered.json"
# The placeholders found inside longer strings, each named as mixin.libsonnet's `values` names
# the user's string that replaces it.
_FILLED = {"selector": "selector", "cluster": "cluster", "uid": "uid", "grafana": "grafana"}
_INSIDE = re.compile("(" + "|".join(re.escape(PLACEHOLDERS[k]) for k in _FILLED) + ")")
_NAMES = {PLACEHOLDERS[k]: name for k, name in _FILLED.items()}


def marked(value: Any) -> Any:
    """``value`` with each string that holds a placeholder cut at it, so that the libsonnet
    joins the parts instead of searching every string: ``{"@fill": ["sum(x{", ["selector"],
    "})"]}`` (a one-item list names the value put there), and a runbook link as
    ``{"@runbook": alertname}`` ("" for the runbook itself)."""
    if isinstance(value, str):
        if value.startswith(PLACEHOLDERS["runbook"]):
            return {"@runbook": value.removeprefix(PLACEHOLDERS["runbook"])}
        parts = _INSIDE.split(value)
        if len(parts) == 1:
            return value
        return {"@fill": [[_NAMES[p]] if i % 2 else p for i, p in enumerate(parts) if p]}
    if value == [PLACEHOLDERS["tag"]]:
        return {"@tags": True}
    if isinstance(value, list):
        return [marked(item) for item in value]
    if isinstance(value, dict):
        return {key: marked(item) for key, item in value.items()}
    return value


def _shape(config: MixinConfig, multi_cluster: bool) -> dict[str, Any]:
    placeholder = msgspec.structs.replace(
        config,
        selector=PLACEHOLDERS["selector"],
        runbook_url_template=PLACEHOLDERS["runbook"] + "{alertname}",
        grafana_url=PLACEHOLDERS["grafana"],
        cluster_label=PLACEHOLDERS["cluster"],
        dashboard_uid_prefix=PLACEHOLDERS["uid"],
        dashboard_tags=[PLACEHOLDERS["tag"]],
        alert_labels={},
        multi_cluster=multi_cluster,
    )
    dashboards = render_dashboards(placeholder)
    shape: dict[str, Any] = marked(
        {
            "alerts": alerting(placeholder),
            "rules": recorded(placeholder),
            "dashboards": {name: json.loads(text) for name, text in dashboards.items()},
            "dashboards_v2": {
                name: json.loads(text) for name, text in render_v2(dashboards).items()
            },
        }
    )
    return shape


def defaults(config: MixinConfig) -> dict[str, Any]:
    """``_config``'s defaults in mixin.libsonnet: the strings of the rendering's own config."""
    return {
        "selector": config.selector,
        "alertLabels": config.alert_labels,
        "runbookUrlBase": config.runbook_url_base,
        "runbookUrlTemplate": config.runbook_url_template,
        "grafanaUrl": config.grafana_url,
        "multiCluster": config.multi_cluster,
        "clusterLabel": config.cluster_label,
        "dashboardUidPrefix": config.dashboard_uid_prefix,
        "dashboardTags": config.dashboard_tags,
    }


def library(config: MixinConfig) -> str:
    """The text of ``rendered.json`` for ``config``: placeholders, defaults, both shapes."""
    data = {
        "placeholders": PLACEHOLDERS,
        "defaults": defaults(config),
        "single": _shape(config, multi_cluster=False),
        "multi_cluster": _shape(config, multi_cluster=True),
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"
