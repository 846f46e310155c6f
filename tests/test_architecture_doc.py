"""ARCHITECTURE.md stays a true map: what it names exists, and every module has a place in it."""

from __future__ import annotations

import re

from tests.support.tools import REPO

ARCHITECTURE = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
# A module name as the page writes it: bare (``reader.py``) in the picture, or with its folders
# (``engines/record.py``); ``<engine>_engine.py`` is a pattern, not a name.
NAMED = re.compile(r"(?<![\w/<>.-])((?:[\w-]+/)*\w+\.py)\b")
# Folders the page describes as a whole instead of module by module.
DESCRIBED_WHOLE = ("commands", "demo", "report", "simulate", "mixin/dashboards", "sources/tail")
MODULES = sorted(
    path.relative_to(REPO / "exporter")
    for path in (REPO / "exporter").rglob("*.py")
    if path.name not in ("__init__.py", "__main__.py")
)
FILES = [path.relative_to(REPO).as_posix() for path in REPO.glob("[!.]*/**/*.py")]


def test_every_module_architecture_names_exists() -> None:
    named = set(NAMED.findall(ARCHITECTURE))
    assert "engines/record.py" in named and "stdin.py" in named  # the pattern reads the page
    missing = sorted(
        name for name in named if not any(f"/{file}".endswith(f"/{name}") for file in FILES)
    )
    assert missing == []


def test_every_module_of_exporter_has_a_place_in_architecture() -> None:
    named = {name.rsplit("/", 1)[-1] for name in NAMED.findall(ARCHITECTURE)}
    unplaced = [
        str(module)
        for module in MODULES
        if module.name not in named and not str(module.parent).startswith(DESCRIBED_WHOLE)
    ]
    assert unplaced == []
