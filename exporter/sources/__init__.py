"""Where raw input comes from: the rotation-safe file tailer, standard input, and the scraper
of the server's own HTTP endpoints. Nothing here knows a log format.

The names below are imported when first asked for: the one-shot commands read files through
``sources.tail.lines`` alone, and need not pay for the tailer's modules at every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.sources.stdin import StdinSource
    from exporter.sources.tail import FileTailer, TailLoop

__all__ = ["FileTailer", "StdinSource", "TailLoop"]

_HOMES = {
    "FileTailer": "exporter.sources.tail",
    "StdinSource": "exporter.sources.stdin",
    "TailLoop": "exporter.sources.tail",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
