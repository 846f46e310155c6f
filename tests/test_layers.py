"""The layer rule of ARCHITECTURE.md holds, and `make lint` refuses an import against it.

Each case copies the package and the contracts into a temporary directory, adds one import
there, and runs the same `lint-imports` that `make lint` runs on the copy.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # runs make and lint-imports

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_copy(
    tmp_path: Path, module: str = "", line: str = ""
) -> subprocess.CompletedProcess[str]:
    shutil.copytree(
        ROOT / "exporter", tmp_path / "exporter", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    if module:
        path = tmp_path / "exporter" / module
        path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_make_lint_checks_the_import_contracts() -> None:
    dry = subprocess.run(
        ["make", "-n", "lint"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert "lint-imports" in dry.stdout


def test_the_package_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint_copy(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "3 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # An engine reaching up into the pipeline that drives it (which imports engines: a
        # cycle as well).
        ("engines/record.py", "import exporter.parse.pipeline", ["layers", "no-cycles"]),
        # Judgement reaching up into per-target state.
        (
            "analysis/node.py",
            "from exporter.state import target_state",
            ["layers", "no-cycles"],
        ),
        # A scrape's code reaching the config loader: against both contracts.
        (
            "exposition/landing.py",
            "from exporter.config import TargetConfig",
            ["layers", "exposition-no-wiring"],
        ),
        # Indirect counts too: the scraper (below exposition) importing the daemon's target.
        (
            "sources/upstream.py",
            "import exporter.target",
            ["layers", "exposition-no-wiring", "no-cycles"],
        ),
        # Two modules of one layer importing each other: the reader cuts big logs with ranges.
        ("parse/ranges.py", "from exporter.parse import reader", ["no-cycles"]),
    ],
)
def test_an_import_against_the_rule_fails_lint(
    tmp_path: Path, module: str, line: str, broken: list[str]
) -> None:
    result = _lint_copy(tmp_path, module, line)
    assert result.returncode != 0
    names = {
        "layers": "Each layer imports only the layers below it BROKEN",
        "exposition-no-wiring": "What a scrape runs never reaches the wiring BROKEN",
        "no-cycles": "No two sibling modules or packages import each other, directly or through"
        " othersBROKEN",
    }
    for contract in broken:
        assert names[contract] in result.stdout, result.stdout
    assert f"{len(broken)} broken" in result.stdout
