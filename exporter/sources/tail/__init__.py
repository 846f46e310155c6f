"""The rotation-safe file tailer: complete raw lines and file events from log files.

The package knows nothing about engines or log formats. It delivers complete raw lines
(bytes, newline removed) and file events to a ``TailEvents`` receiver; decoding, envelopes and
parsing happen downstream.

The names below are imported when first asked for: a one-shot command splits lines with
``tail.lines`` alone, and need not import the tailer and its loop at every start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter import lazy

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

__getattr__ = lazy.importer(__name__, _HOMES)
