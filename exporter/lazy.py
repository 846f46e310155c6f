"""A package's names imported when first asked for (a module ``__getattr__``, PEP 562).

A one-shot command that needs one module of a package (``sources.tail.lines`` to split a
log's lines) then does not pay at every start for the package's other modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def importer(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name in ``homes`` imported from its module."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return __getattr__
