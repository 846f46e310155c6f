"""Every PromQL expression a generated dashboard runs, with Grafana's variables filled in.

Grafana expands ``$job``-style variables and ``$__rate_interval`` before a query reaches
Prometheus. Checking the queries outside Grafana (promtool, a real Prometheus) needs the same
expansion, so it lives here, next to the generator, rather than in each test.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What "All" expands to for each variable (the variables' allValue); dp_rank may be absent.
# `cluster` exists in multi-cluster renderings only.
ALL_VALUES: dict[str, str] = {
    "job": ".+",
    "instance": ".+",
    "target": ".+",
    "dp_rank": ".*",
    "cluster": ".+",
}
# Names start with a letter or "_", so label_replace's "$1" group reference is left alone.
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")
_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$", re.S)


@dataclass(frozen=True)
class Query:
    """One expression and where it comes from (for readable test failures)."""

    where: str
    expr: str
    repeat: str | None = None  # the variable its panel is repeated for, one copy per value


def dashboard_queries(board: dict[str, Any]) -> list[Query]:
    """Panel targets, annotation queries and the selectors behind query variables."""
    title = board["title"]
    found = [
        Query(
            f"{title} / {panel['title']} / {target.get('refId', '?')}",
            target["expr"],
            panel.get("repeat") or None,
        )
        for panel in board.get("panels", [])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
    found += [
        Query(f"{title} / annotation {anno['name']}", anno["expr"])
        for anno in board.get("annotations", {}).get("list", [])
        if anno.get("expr")
    ]
    for variable in board.get("templating", {}).get("list", []):
        match = _LABEL_VALUES.match(str(variable.get("query", "")))
        if variable.get("type") == "query" and match:
            found.append(Query(f"{title} / variable {variable['name']}", match["selector"]))
    return found


def expand(expr: str, rate_interval: str, chosen: Mapping[str, str] | None = None) -> str:
    """The expression as Grafana would send it with every variable on "All", or on the value
    ``chosen`` gives it (a repeated panel's copy has its own)."""
    values = {**ALL_VALUES, **(chosen or {})}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "__rate_interval":
            return rate_interval
        if name not in values:
            raise KeyError(f"unknown dashboard variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(value, expr)
