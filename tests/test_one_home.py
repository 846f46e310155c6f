"""Facts kept once: the dashboards' finding texts are the findings' own, and the constants
shared by the daemon, the one-shot commands and the dashboards have a single definition."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.analysis import findings
from exporter.analysis.findings import EXPLANATIONS, SEVERITIES
from exporter.analysis.thresholds import STALE_AFTER
from exporter.config import build_config
from exporter.engines.record import StatsRecord
from exporter.engines.server_config import ServerConfig
from exporter.state.evidence import RECENT_WINDOWS, Evidence
from tests.support.tools import REPO

DASHBOARDS = sorted((REPO / "dashboards").glob("*.json"))


def _strings(node: ast.AST) -> set[str]:
    return {
        c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }


def _constants(trees: list[ast.Module]) -> dict[str, str]:
    """The package's module-level string constants (``NAME = "text"``), by name."""
    return {
        target.id: node.value.value
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _finding_codes() -> set[str]:
    """Every code the findings package builds a Finding with: given as ``code=`` (both branches
    of a conditional too, or a module constant), or assigned to a variable named ``code``
    first."""
    package = Path(findings.__file__).parent
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in package.glob("*.py")]
    constants = _constants(trees)
    codes: set[str] = set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
            for value in (k.value for k in node.keywords if k.arg == "code"):
                codes.update(_strings(value))
                if isinstance(value, ast.Name) and value.id in constants:
                    codes.add(constants[value.id])
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                codes.update(
                    *(
                        _strings(value)
                        for name, value in pairs
                        if isinstance(name, ast.Name) and name.id == "code"
                    )
                )
    return codes


def test_every_finding_has_a_severity_and_an_explanation() -> None:
    assert _finding_codes() == set(SEVERITIES) == set(EXPLANATIONS)


def _mappings(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get("type") == "value" and isinstance(value.get("options"), dict):
            yield value["options"]
        for item in value.values():
            yield from _mappings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _mappings(item)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_the_rendered_dashboards_explain_findings_in_the_findings_own_words(path: Path) -> None:
    shown = [
        {code: option["text"] for code, option in options.items()}
        for options in _mappings(json.loads(path.read_text(encoding="utf-8")))
        if set(options) & set(EXPLANATIONS)
    ]
    assert shown, "no panel explains findings"
    for texts in shown:
        assert texts == {code: f"{code}: {text}" for code, text in EXPLANATIONS.items()}


def test_the_stale_window_has_one_default() -> None:
    assert build_config({}).stale_after == STALE_AFTER
    for path in DASHBOARDS:
        assert f"Past {STALE_AFTER:g} s (stale_after)" in path.read_text(encoding="utf-8") or (
            f"older than {STALE_AFTER:g} s" in path.read_text(encoding="utf-8")
        )


def test_evidence_keeps_the_recent_windows_the_report_judges() -> None:
    evidence = Evidence()
    for second in range(RECENT_WINDOWS + 5):
        evidence.add_record(StatsRecord("decode", accept_length=2.0 + second / 100), second)
    windows = evidence.observations(ServerConfig(), RECENT_WINDOWS + 5.0).windows
    assert len(windows) == RECENT_WINDOWS
    assert windows[0].accept_length == pytest.approx(2.05)


# Each of these is defined once in the package; a second definition is a drifting copy.
_SINGLE = [
    r"^MIN_WINDOWS = ",
    r"^RECENT_WINDOWS = ",
    r"^READER_SHARE = ",
    r"^STALE_AFTER\w* = \d",
    r"^def _real\(",
    r"^def _flag\(",
    r"^_?BOOLS\b.* = \{",
]


@pytest.mark.parametrize("pattern", _SINGLE)
def test_a_shared_constant_has_a_single_definition(pattern: str) -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "exporter").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.match(pattern, line)
    ]
    assert len(found) == 1, found
