"""Concurrency bands: a run's decode moments summed by how many requests the node was running.

Speculation pays off differently at each load, so throughput, speed-up and accept length are
kept per band, in sums (bounded whatever the log's size), and a run is judged at the band it
spent most windows in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from exporter.analysis.node import Moment
from exporter.analysis.schedule import BandDrafting
from exporter.report.summary import BandStats

# (label, lowest, highest running requests on the node); the top band is open-ended.
BANDS: tuple[tuple[str, int, int | None], ...] = (
    ("1", 1, 1),
    ("2-7", 2, 7),
    ("8-31", 8, 31),
    ("32-63", 32, 63),
    ("64+", 64, None),
)


class BandAccumulator:
    """One band's sums: every moment's throughput and baseline, and the drafting moments'."""

    __slots__ = (
        "accept_sum",
        "baseline_sum",
        "drafting",
        "judged",
        "judged_throughput",
        "off",
        "running",
        "steps",
        "throughput_sum",
        "windows",
    )

    def __init__(self) -> None:
        self.windows = 0
        self.throughput_sum = 0.0
        # The windows a baseline spoke for (a learned one speaks for some loads only, and
        # only once learned): their throughput and baseline sums, which the speedup compares.
        self.judged = 0
        self.judged_throughput = 0.0
        self.baseline_sum = 0.0
        self.running: dict[int, int] = {}  # windows by running requests (a dict is cheaper)
        # The windows that drafted: count, then the throughput and baseline sums of those a
        # baseline spoke for; their accept length and the draft steps adaptive speculation
        # had in force.
        self.drafting = [0.0, 0.0, 0.0]
        self.accept_sum = 0.0
        self.steps: dict[int, int] = {}
        self.off = 0  # windows adaptive speculation ran with drafting off

    def add(self, running: int, throughput: float, baseline: float | None) -> None:
        self.windows += 1
        self.throughput_sum += throughput
        if baseline is not None:
            self.judged += 1
            self.judged_throughput += throughput
            self.baseline_sum += baseline
        self.running[running] = self.running.get(running, 0) + 1

    def add_drafting(self, moment: Moment, baseline: float | None) -> None:
        """The moment's speculation: its accept length, or that drafting was off."""
        if moment.steps == 0:
            self.off += 1
            return
        if moment.accept_length is None or moment.throughput is None:
            return
        self.drafting[0] += 1
        if baseline is not None:
            self.drafting[1] += moment.throughput
            self.drafting[2] += baseline
        self.accept_sum += moment.accept_length
        if moment.steps is not None:
            self.steps[moment.steps] = self.steps.get(moment.steps, 0) + 1

    def drafting_figures(self, band: tuple[str, int, int | None]) -> BandDrafting:
        count, tput, base = self.drafting
        return BandDrafting(
            band=band,
            windows=int(count),
            off_windows=self.off,
            accept_length=self.accept_sum / count if count else None,
            speedup=tput / base if count and base else None,
            steps=max(self.steps, key=self.steps.__getitem__) if self.steps else None,
        )

    def result(self, label: str, has_baseline: bool) -> BandStats:
        return BandStats(
            label=label,
            windows=self.windows,
            median_running=quantile(self.running, 0.5),
            mean_throughput=self.throughput_sum / self.windows,
            mean_baseline=self.baseline_sum / self.judged if has_baseline and self.judged else None,
            # A baseline that spoke for some windows only (a learned one) is compared with them.
            judged_throughput=(
                self.judged_throughput / self.judged if 0 < self.judged < self.windows else None
            ),
        )


def _band_table() -> dict[int, int]:
    """The band index of every running count below the open-ended top band's lowest."""
    return {
        running: index
        for index, (_, low, high) in enumerate(BANDS)
        if high is not None
        for running in range(low, high + 1)
    }


_BAND_OF = _band_table()


def band_index(running: int) -> int:
    """The band of ``running`` requests: a look-up, as every node moment asks."""
    index = _BAND_OF.get(running)
    if index is not None:
        return index
    if running >= BANDS[-1][1]:
        return len(BANDS) - 1
    raise ValueError(f"no band for {running} running requests")


def quantile(counts: Mapping[int, int], q: float) -> int:
    """Nearest-rank quantile of a histogram: the smallest value with ``q`` of the mass at or
    below it."""
    total = sum(counts.values())
    rank = max(1, math.ceil(q * total - 1e-9))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return max(counts)
