"""Where raw input comes from: the rotation-safe file tailer, standard input, and the scraper
of the server's own HTTP endpoints. Nothing here knows a log format.

The names below are imported when first asked for: the one-shot commands read files through
``sources.tail.lines`` alone, and need not pay for the tailer's modules at every start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter import lazy

if TYPE_CHECKING:
    from exporter.sources.stdin import StdinSource
    from exporter.sources.tail import FileTailer, TailLoop

__all__ = ["FileTailer", "StdinSource", "TailLoop"]

_HOMES = {
    "FileTailer": "exporter.sources.tail",
    "StdinSource": "exporter.sources.stdin",
    "TailLoop": "exporter.sources.tail",
}

__getattr__ = lazy.importer(__name__, _HOMES)
