"""``specwatch-mixin/pyformat.libsonnet`` writes numbers as Python does, through the real jsonnet.

A threshold set in the jsonnet ``_config`` must read, in every rule and dashboard, as
``specwatch mixin`` writes the same value: ``str()``, ``format(x, 'g')`` and ``round(x, 3)``.
"""

from __future__ import annotations

import json
import random
import subprocess
from typing import Any

import pytest

from tests.support.tools import REPO, require_tool

pytestmark = pytest.mark.e2e


def written(forms: str, values: list[float]) -> list[list[Any]]:
    """``forms`` (a jsonnet array over ``x``, with ``f`` the module) of each value."""
    module = "local f = import 'specwatch-mixin/pyformat.libsonnet';"
    source = f"{module} [{forms} for x in {json.dumps(values)}]"
    result = subprocess.run(
        [require_tool("jsonnet"), "-J", str(REPO), "-e", source],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    output: list[list[Any]] = json.loads(result.stdout)
    return output


def test_thresholds_people_write_read_as_python_writes_them() -> None:
    # Up to three places, as the rules write them, as a percent, and the dashboards' step a
    # tenth above (1.045 * 1.1 lies beside a tie at three places: which side decides).
    values = [i / 1000 for i in range(1, 2001, 3)]
    assert written("[f.str(x), f.g(x), f.g(x * 100), f.round(x * 1.1, 3)]", values) == [
        [str(x), f"{x:g}", f"{x * 100:g}", round(x * 1.1, 3)] for x in values
    ]


EDGES = [
    1.0, 0.1, 0.7, 1e-05, 0.0001, 0.00015, 100000.0, 999999.5, 1234567.0, 1e16, 1.5e16,
    9999999999999998.0, 1e300, 5e-324, 0.125, 2.5, 0.0005, 0.57, 99.99995, 2.068025, 0.1 + 0.2,
]  # fmt: skip


def test_extremes_read_as_python_writes_them() -> None:
    """Scientific notation either way, exact binary ties, rounding that carries a digit."""
    assert written("[f.str(x), f.g(x), f.round(x, 3)]", EDGES) == [
        [str(x), f"{x:g}", round(x, 3)] for x in EDGES
    ]


def test_numbers_of_up_to_fifteen_digits_read_as_python_writes_them() -> None:
    draw = random.Random(20261201)
    values = [
        float(f"{draw.randint(1, 10 ** draw.randint(1, 15) - 1)}e{draw.randint(-12, 12)}")
        for _ in range(200)
    ]
    assert written("[f.str(x), f.g(x), f.round(x, 3)]", values) == [
        [str(x), f"{x:g}", round(x, 3)] for x in values
    ]
