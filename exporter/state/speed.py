"""Counters of what a node produced and how its speed compared with its baseline.

Gauges of the newest window cannot be summed over a fleet or a day; counters can. Decode lines
are folded into node moments (DP ranks of one moment summed, as the baseline describes the whole
node), and each moment adds:

- its throughput times the logged time since the previous moment to the generated tokens (the
  logged throughput integrated over the log's own clock; a gap longer than ``MAX_GAP`` seconds,
  an idle or restarted server, adds nothing rather than a guess);
- one to ``at_or_below`` or ``above``, by its throughput against the baseline at its running
  requests, when a baseline is configured. ``above / (above + at_or_below)`` is the share of
  windows in which speculation paid: an SLI, with a budget an alert can burn.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.analysis.baseline import Baseline
from exporter.analysis.node import NodeMoments
from exporter.engines.record import StatsRecord, logged_seconds

# Longest logged gap between two moments still counted as generating (SGLang and vLLM log
# every few seconds while busy; stale_after's default).
MAX_GAP = 60.0


class SpeedCounters:
    """Not thread-safe: the target state calls it under its lock."""

    def __init__(self, baseline: Baseline | None) -> None:
        self._baseline = baseline
        self._moments = NodeMoments(stale_after=MAX_GAP)
        self._previous_at: float | None = None
        self.generated_tokens = 0.0
        self.at_or_below = 0
        self.above = 0

    @property
    def judged(self) -> bool:
        """Whether windows are compared with a baseline (one is configured)."""
        return self._baseline is not None

    def add(self, decodes: Sequence[StatsRecord]) -> None:
        times = [logged_seconds(record.time) for record in decodes]
        for moment in self._moments.add(decodes, times):
            tput, at = moment.throughput, moment.at
            if tput is None or at is None:
                continue
            gap = None if self._previous_at is None else at - self._previous_at
            self._previous_at = at
            if gap is not None and 0 <= gap <= MAX_GAP:
                self.generated_tokens += tput * gap
            if self._baseline is not None and moment.running:
                if tput <= self._baseline.at(moment.running):
                    self.at_or_below += 1
                else:
                    self.above += 1

    def restart(self) -> None:
        """A new server run: its first moment has no predecessor to measure a gap from."""
        self._moments.flush()
        self._previous_at = None
