"""Line sources for the daemon: a rotation-safe file tailer and standard input.

The package knows nothing about engines or log formats. It delivers complete raw lines
(bytes, newline removed) and file events to a ``TailEvents`` receiver; decoding, envelopes and
parsing happen downstream.
"""

from exporter.tail.events import ReadErrorReason, SkipReason, TailEvents
from exporter.tail.file import FileTailer
from exporter.tail.stdin import StdinSource
from exporter.tail.wakeup import WakeupObserver

__all__ = [
    "FileTailer",
    "ReadErrorReason",
    "SkipReason",
    "StdinSource",
    "TailEvents",
    "WakeupObserver",
]
