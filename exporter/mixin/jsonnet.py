"""The rendering as data for the jsonnet face (``specwatch-mixin/mixin.libsonnet``).

jsonnet users (kube-prometheus, GitOps) cannot run the Python, so ``make mixin`` writes its
rules and dashboards into ``specwatch-mixin/rendered.json`` once per shape (one cluster, many
clusters), rendered with placeholder values for what ``_config`` may override: the selector,
the cluster label, the runbook address, the dashboard uid prefix and tags, and the thresholds.
The libsonnet puts the user's values where the placeholders are, so Python stays the one
source of every rule.

A threshold is written in several forms (``str()`` in an expression, ``:g`` in another, a
percent in a description, a number in a dashboard's threshold steps), and the libsonnet must
write the user's value in the same form. So each shape is rendered with odd threshold values
no config uses, and every form of them becomes a token naming the threshold and the form. It
is done twice, with two sets of such values: the two must give the same tokens, or a
threshold reached the rendering in a form the tokens miss and ``make mixin`` refuses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from exporter.analysis.algorithms import LOWEST_FLOOR
from exporter.analysis.thresholds import DEFAULT, Thresholds
from exporter.mixin.dashboards.build import render as render_dashboards
from exporter.mixin.dashboards.common import speedup_green
from exporter.mixin.rules import alert_groups, recording_rules
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

Form = Callable[[Any], Any]
# How the rendering writes a threshold in text, by the kind of its value; mixin.libsonnet
# has a function of the same name for each.
TEXT_FORMS: dict[type, dict[str, Form]] = {
    str: {"text": str},
    int: {"int": str},
    float: {"str": str, "g": lambda v: f"{v:g}", "percent": lambda v: f"{v * 100:g}"},
}
# ... and as a JSON number (a dashboard's threshold steps).
NUMBER_FORMS: dict[type, dict[str, Form]] = {
    str: {},
    int: {"number": lambda v: v},
    float: {"number": lambda v: v, "tenthAbove": speedup_green},
}
# The exporter judges requests without benefit over this window: the rendering's is fixed.
FIXED = frozenset({"no_benefit_window"})
# Two sets of valid thresholds with more digits than anyone writes, every form of each unique
# in the rendering: the first and the second value of each.
_ODD: dict[str, tuple[Any, Any]] = {
    "collapsed_accept_length": (1.0123456789, 1.0987654321),
    "low_accept_fraction": (0.4567891234, 0.8765432198),
    "slower_than_baseline_speedup": (1.23456789, 2.87654321),
    "drafting_off_speedup": (0.8123456789, 0.6543219876),
    "collapsed_for": ("1h2m3s", "3h2m1s"),
    "low_accept_for": ("4h5m6s", "6h5m4s"),
    "slower_for": ("7h8m9s", "9h8m7s"),
    "no_benefit_share": (0.0345678912, 0.0876543219),
    "no_benefit_min_requests": (987654, 456789),
    "no_benefit_for": ("10h11m12s", "12h11m10s"),
}
SENTINELS = tuple(Thresholds(**{k: pair[i] for k, pair in _ODD.items()}) for i in (0, 1))


def camel(name: str) -> str:
    """A Python field name as ``_config`` spells it: collapsed_for -> collapsedFor."""
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def token(name: str, form: str) -> str:
    return f"@@threshold:{camel(name)}:{form}@@"


class Tokens:
    """Every form of one set of sentinel thresholds, and the token each becomes."""

    def __init__(self, sentinel: Thresholds) -> None:
        self.texts: list[tuple[str, str]] = []
        self.numbers: dict[float, str] = {}
        for field in fields(Thresholds):
            if field.name in FIXED:
                continue
            value = getattr(sentinel, field.name)
            for form, write in TEXT_FORMS[type(value)].items():
                self.texts.append((write(value), token(field.name, form)))
            for form, write in NUMBER_FORMS[type(value)].items():
                self.numbers[write(value)] = token(field.name, form)
        # A longer text first: none is then cut by a shorter one inside it.
        self.texts.sort(key=lambda pair: -len(pair[0]))

    def apply(self, data: Any) -> Any:
        """``data`` with every form of the sentinels replaced by its token."""
        if isinstance(data, str):
            for text, name in self.texts:
                data = data.replace(text, name)
            return data
        if isinstance(data, dict):
            return {key: self.apply(value) for key, value in data.items()}
        if isinstance(data, list):
            return [self.apply(value) for value in data]
        if isinstance(data, float | int) and not isinstance(data, bool):
            return self.numbers.get(data, data)
        return data


def _shape(multi_cluster: bool, thresholds: Thresholds) -> dict[str, Any]:
    config = MixinConfig(
        selector=PLACEHOLDERS["selector"],
        runbook_url_template=PLACEHOLDERS["runbook"] + "{alertname}",
        grafana_url=PLACEHOLDERS["grafana"],
        cluster_label=PLACEHOLDERS["cluster"],
        dashboard_uid_prefix=PLACEHOLDERS["uid"],
        dashboard_tags=[PLACEHOLDERS["tag"]],
        multi_cluster=multi_cluster,
        thresholds=thresholds,
    )
    dashboards = {name: json.loads(text) for name, text in render_dashboards(config).items()}
    return {
        "alerts": alert_groups(config),
        "rules": recording_rules(config),
        "dashboards": dashboards,
    }


def _shapes(sentinel: Thresholds) -> dict[str, Any]:
    tokens = Tokens(sentinel)
    return {
        "single": tokens.apply(_shape(False, sentinel)),
        "multi_cluster": tokens.apply(_shape(True, sentinel)),
    }


def _thresholds(shapes: dict[str, Any]) -> dict[str, Any]:
    """What mixin.libsonnet needs to fill the tokens: the tokens the shapes hold, by kind, and
    the defaults and bound of ``_config.thresholds``."""
    text = json.dumps(shapes)
    used: dict[str, dict[str, list[str]]] = {"texts": {}, "numbers": {}}
    for field in fields(Thresholds):
        kind = type(getattr(DEFAULT, field.name))
        for where, forms in (("texts", TEXT_FORMS[kind]), ("numbers", NUMBER_FORMS[kind])):
            for form in forms:
                if token(field.name, form) in text:
                    used[where][token(field.name, form)] = [camel(field.name), form]
    defaults = {camel(f.name): getattr(DEFAULT, f.name) for f in fields(Thresholds)}
    return {"defaults": defaults, "lowestFloor": LOWEST_FLOOR, **used}


def library() -> str:
    """The text of ``rendered.json``: placeholders, thresholds' tokens, then both shapes."""
    # A threshold without odd values would render its default twice, alike, unseen.
    unset = {f.name for f in fields(Thresholds)} - FIXED - set(_ODD)
    if unset:
        raise ValueError(f"{', '.join(sorted(unset))}: no odd values in _ODD")
    first, second = (_shapes(sentinel) for sentinel in SENTINELS)
    if first != second:
        raise ValueError(
            "a threshold reaches the rendering in a form TEXT_FORMS and NUMBER_FORMS do not "
            "name: add it there and to mixin.libsonnet"
        )
    default = MixinConfig()
    links = {
        "runbookUrlBase": default.runbook_url_base,
        "runbookUrlTemplate": default.runbook_url_template,
        "grafanaUrl": default.grafana_url,
    }
    data = {
        "placeholders": PLACEHOLDERS,
        "links": links,
        "thresholds": _thresholds(first),
        **first,
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"
