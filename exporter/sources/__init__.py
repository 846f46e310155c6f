"""Where raw input comes from: the rotation-safe file tailer, standard input, and the scraper
of the server's own HTTP endpoints. Nothing here knows a log format."""

from exporter.sources.stdin import StdinSource
from exporter.sources.tail import FileTailer, TailLoop

__all__ = ["FileTailer", "StdinSource", "TailLoop"]
