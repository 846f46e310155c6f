"""``make unit`` leaves out the modules whose every test is end-to-end without collecting them
(``pytest_ignore_collect`` in ``tests/conftest.py``): a fast loop that quietly lost a unit test
would be worse than a slow one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]


def _collected(markexpr: str) -> tuple[set[str], int]:
    """The test ids pytest selects under ``-m markexpr``, and how many it deselected."""
    out = subprocess.run(
        [*PYTEST, "-m", markexpr, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    ids = {line for line in out.splitlines() if "::" in line}
    deselected = re.search(r"\((\d+) deselected\)", out)
    assert deselected, out[-2000:]
    return ids, int(deselected.group(1))


@pytest.mark.parametrize("markexpr", ["not e2e", "not e2e and not sweep"])
def test_make_unit_runs_every_test_not_marked_end_to_end(markexpr: str) -> None:
    """``(not e2e)`` selects the same tests, but the hook answers only to the unit layer's and
    ``make unit``'s exact expressions: so it collects every module and deselects by marker, as
    pytest alone does."""
    unit, skipped_unseen = _collected(markexpr)
    every, deselected = _collected(f"({markexpr})")
    assert unit == every
    assert len(unit) > 1000
    assert skipped_unseen < deselected  # the all-e2e modules were not even collected
