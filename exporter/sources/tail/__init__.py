"""The rotation-safe file tailer: complete raw lines and file events from log files.

The package knows nothing about engines or log formats. It delivers complete raw lines
(bytes, newline removed) and file events to a ``TailEvents`` receiver; decoding, envelopes and
parsing happen downstream.

The names below are imported when first asked for: a one-shot command splits lines with
``tail.lines`` alone, and need not import the tailer and its loop at every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporter.sources.tail.events import ReadErrorReason, SkipReason, TailEvents
    from exporter.sources.tail.file import FileTailer
    from exporter.sources.tail.loop import TailLoop

__all__ = [
    "FileTailer",
    "ReadErrorReason",
    "SkipReason",
    "TailEvents",
    "TailLoop",
]

_HOMES = {
    "FileTailer": "exporter.sources.tail.file",
    "ReadErrorReason": "exporter.sources.tail.events",
    "SkipReason": "exporter.sources.tail.events",
    "TailEvents": "exporter.sources.tail.events",
    "TailLoop": "exporter.sources.tail.loop",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
