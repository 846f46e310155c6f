"""ARCHITECTURE.md stays a true map: each module it names is one real file, and every module of
``exporter/`` is named there, both compared as whole paths.

A name with folders (``parse/reader.py``) is read from ``exporter/``, else from the repository
root (``tests/test_engines.py``). A bare name (``reader.py``) stands for the one module of that
name in the folder its line of the data-flow picture is about (``parse/``), and elsewhere for
the one module of that name in the whole package: a bare name two modules share must be
written with its folder.
"""

from __future__ import annotations

import re

from tests.support.tools import REPO

ARCHITECTURE = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
EXPORTER = REPO / "exporter"
# A module name as the page writes it; ``<engine>_engine.py`` is a pattern, not a name.
NAMED = re.compile(r"(?<![\w/<>.-])((?:[\w-]+/)*\w+\.py)\b")
# The folder a row of a picture is about: its first word, flush left (``parse/    reader.py``).
ROW = re.compile(r"^(?:(\w+)/\s|\S)")
MODULES = sorted(
    path.relative_to(REPO).as_posix()
    for path in EXPORTER.rglob("*.py")
    if path.name not in ("__init__.py", "__main__.py")
)


def mentions() -> list[tuple[str, str]]:
    """Every module name on the page, with the folder of ``exporter/`` it is read in ("" for
    the whole package)."""
    found, folder, in_picture = [], "", False
    for line in ARCHITECTURE.splitlines():
        if line.startswith("```"):
            in_picture, folder = not in_picture, ""
            continue
        if in_picture and (row := ROW.match(line)):
            folder = row.group(1) or ""
        found += [(name, folder) for name in NAMED.findall(line)]
    return found


def whole_path(name: str, folder: str) -> str | None:
    """The one file ``name`` stands for, relative to the repository; None if none or several."""
    if "/" in name:
        candidates = [f"exporter/{name}", name]
        return next((path for path in candidates if (REPO / path).is_file()), None)
    scope = f"exporter/{folder}/" if folder else "exporter/"
    matches = [m for m in MODULES if m.startswith(scope) and m.rsplit("/", 1)[1] == name]
    return matches[0] if len(matches) == 1 else None


def test_the_page_names_modules_both_ways() -> None:
    """Guard for the reading above: it sees names with folders and bare ones in their row."""
    assert ("engines/record.py", "") in mentions()
    assert ("stdin.py", "sources") in mentions()
    assert whole_path("shapes.py", "analysis") == "exporter/analysis/findings/shapes.py"
    assert whole_path("sglang.py", "") == "exporter/engines/sglang.py"


def test_every_module_architecture_names_is_one_real_file() -> None:
    unresolved = sorted({name for name, folder in mentions() if whole_path(name, folder) is None})
    assert unresolved == []


def test_every_module_of_exporter_is_named_in_architecture() -> None:
    named = {whole_path(name, folder) for name, folder in mentions()}
    assert [module for module in MODULES if module not in named] == []
