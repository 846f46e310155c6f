"""The rendering as data for the jsonnet face (``specwatch-mixin/mixin.libsonnet``).

jsonnet users (kube-prometheus, GitOps) cannot run the Python, so ``make mixin`` writes its
rules and dashboards into ``specwatch-mixin/rendered.json`` once per shape (one cluster, many
clusters), rendered with placeholder values for what ``_config`` may override: the selector,
the cluster label, the runbook address, the dashboard uid prefix and tags. The libsonnet puts
the user's values where the placeholders are, so Python stays the one source of every rule.
Thresholds are not placeholders: they are part of the expressions (render a YAML config with
``specwatch mixin`` to change them).
"""

from __future__ import annotations

import json
from typing import Any

from exporter.mixin.dashboards.build import render as render_dashboards
from exporter.mixin.rules import alert_groups, recording_rules
from exporter.mixin_config import MixinConfig

# Values no real config uses, each valid where it stands, so the rendering accepts them.
PLACEHOLDERS = {
    "selector": 'specwatch_mixin_selector="placeholder"',
    "runbook": "https://specwatch-runbook.invalid/",
    "cluster": "specwatch_mixin_cluster",
    "uid": "specwatchmixinuid",
    "tag": "specwatch-mixin-tag",
}
LIBRARY_PATH = "specwatch-mixin/rendered.json"


def _shape(multi_cluster: bool) -> dict[str, Any]:
    config = MixinConfig(
        selector=PLACEHOLDERS["selector"],
        runbook_url_template=PLACEHOLDERS["runbook"] + "{alertname}",
        cluster_label=PLACEHOLDERS["cluster"],
        dashboard_uid_prefix=PLACEHOLDERS["uid"],
        dashboard_tags=[PLACEHOLDERS["tag"]],
        multi_cluster=multi_cluster,
    )
    dashboards = {name: json.loads(text) for name, text in render_dashboards(config).items()}
    return {
        "alerts": alert_groups(config),
        "rules": recording_rules(config),
        "dashboards": dashboards,
    }


def library() -> str:
    """The text of ``rendered.json``: placeholders, then both shapes."""
    data = {"placeholders": PLACEHOLDERS, "single": _shape(False), "multi_cluster": _shape(True)}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"
