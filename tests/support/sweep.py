"""A sweep's representative part for ``make unit``, the whole of it for ``make test``.

Where a test holds one behaviour over every case of a kind (every scenario's scrapes at every
batch in three writers, every recording) and each case costs a good part of a CPU-second, its
cases outside the representative ones carry the ``sweep`` marker: ``make unit`` runs ``-m "not
e2e and not sweep"`` (the Makefile), ``make test`` and CI run every case. Choose representative
cases that between them take each path the sweep takes (each engine, each state).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def sweep(
    cases: Iterable[T], representative: Collection[T], *, id: Callable[[T], str] = str
) -> list[Any]:
    """``cases`` as pytest parameters, each one not in ``representative`` marked ``sweep``."""
    chosen = list(cases)
    missing = [case for case in representative if case not in chosen]
    assert not missing, f"representative cases the sweep lacks: {missing}"
    return [
        pytest.param(case, id=id(case), marks=() if case in representative else pytest.mark.sweep)
        for case in chosen
    ]
