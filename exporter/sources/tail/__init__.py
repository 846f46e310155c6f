"""The rotation-safe file tailer: complete raw lines and file events from log files.

The package knows nothing about engines or log formats. It delivers complete raw lines
(bytes, newline removed) and file events to a ``TailEvents`` receiver; decoding, envelopes and
parsing happen downstream.
"""

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
