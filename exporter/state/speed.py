"""Counters of what a node produced and how its speed compared with its baseline.

Gauges of the newest window cannot be summed over a fleet or a day; counters can.

- Generated tokens: each rank's logged throughput times the logged time since that rank's
  previous decode line (the throughput integrated over the log's own clock, summed over ranks
  as the node's is). A gap longer than ``MAX_GAP`` seconds, an idle or restarted server, adds
  nothing rather than a guess.
- Windows against the baseline: each node load the evidence closes (DP ranks of one moment
  summed, as the baseline describes the whole node) adds one to ``at_or_below`` or ``above``, by
  its throughput against the baseline at its running requests, when one is configured.
  ``above / (above + at_or_below)`` is the share of windows in which speculation paid: an SLI,
  with a budget an alert can burn. A moment adaptive speculation ran with drafting off is
  plain decoding by design: it counts as ``drafting_off``, outside the SLI, as its own alert
  judges its speed.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.analysis.baseline import Baseline
from exporter.analysis.node import all_speak_for_node, speaks_for_node
from exporter.analysis.plain_speed import (
    DRAFTING,
    DRAFTING_OFF_MODE,
    MODES,
    PLAIN,
    PlainSpeed,
    drafting_off_baseline,
)
from exporter.engines.record import StatsRecord, logged_seconds
from exporter.state.evidence import NodeLoad

# Longest logged gap between two decode lines of a rank still counted as generating (SGLang
# and vLLM log every few seconds while busy; stale_after's default).
MAX_GAP = 60.0


class SpeedCounters:
    """Not thread-safe: the target state calls it under its lock."""

    def __init__(self, baseline: Baseline | None) -> None:
        self._configured = baseline
        self._learned: Baseline | None = None
        # Node moments by load band and how they decoded (``plain_speed.MODES``).
        self.bands = {mode: PlainSpeed() for mode in MODES}
        self._previous: dict[int | None, float] = {}  # rank -> logged time of its last line
        self.generated_tokens = 0.0
        self.at_or_below = 0
        self.above = 0
        self.drafting_off = 0

    @property
    def baseline(self) -> Baseline | None:
        """The configured baseline, else the one learned from drafting-off windows."""
        return self._configured or self._learned

    @property
    def judged(self) -> bool:
        """Whether windows are compared with a baseline (configured or learned)."""
        return self.baseline is not None

    def add(self, decodes: Sequence[StatsRecord]) -> None:
        """Add each line's tokens; a loop of locals, as a catch-up hands over batches of many
        thousand lines."""
        previous = self._previous
        total = self.generated_tokens
        text, at = None, None  # lines of one batch mostly share their second: read it once
        speak = all_speak_for_node(decodes)
        for record in decodes:
            if record.time != text:
                text, at = record.time, logged_seconds(record.time)
            tput, rank = record.gen_throughput, record.dp_rank
            # Other TP ranks and pipeline stages repeat their group's figures.
            if at is None or tput is None or not (speak or speaks_for_node(record)):
                continue
            before = previous.get(rank)
            previous[rank] = at
            if before is not None and 0 <= at - before <= MAX_GAP:
                total += tput * (at - before)
        self.generated_tokens = total

    def judge(self, loads: Sequence[NodeLoad], speculative: bool) -> None:
        """Fold node loads by band and mode, then count them against the baseline at their
        load. ``speculative``: the run drafts (its arguments or its windows say so)."""
        self._fold(loads, speculative)
        baseline = self.baseline
        if baseline is None:
            return
        for running, tput, off in loads:
            if not baseline.covers(running):
                continue  # a learned baseline judges only the loads it saw
            if off:
                self.drafting_off += 1
            elif tput <= baseline.at(running):
                self.at_or_below += 1
            else:
                self.above += 1

    def _fold(self, loads: Sequence[NodeLoad], speculative: bool) -> None:
        bands = self.bands
        moment_mode = DRAFTING if speculative else PLAIN
        learn = False
        for running, tput, off in loads:
            bands[DRAFTING_OFF_MODE if off else moment_mode].add(running, tput)
            learn = learn or off
        if learn and self._configured is None:
            self._learned = drafting_off_baseline(bands[DRAFTING_OFF_MODE])

    def restart(self) -> None:
        """A new server run: no line of it has a predecessor to measure a gap from."""
        self._previous.clear()
