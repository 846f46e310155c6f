"""What a node decodes at without speculation, learned by load band from what it logged.

A measured baseline is rare in production: nobody restarts a serving node without speculation
to benchmark it. Three places already hold the figure, each as decode windows of a server that
was not drafting: an old log from before speculation was switched on (or a canary's), the
plain peers of a fleet that serve the same model on the same hardware, and the windows in which
adaptive speculation (SGLang at 0 steps, vLLM's per-batch-size schedule at 0 tokens) turned
drafting off. All three are folded the same way: node moments (DP ranks summed) by the node's
running requests, in the bands of :mod:`~exporter.analysis.load_bands`.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.analysis.baseline import DRAFTING_OFF, Baseline
from exporter.analysis.load_bands import PLAIN_BANDS, band_of

# Windows a band needs from one source before its throughput stands for the band: a decode
# line every few seconds gives this in a minute of steady load, and one odd window (a prefill
# burst, a request finishing mid-interval) moves the mean of ten by a tenth at most.
MIN_BAND_WINDOWS = 10

# What a window with drafting off still pays, as a share of a plain decode step: SGLang keeps
# running the draft model's extend at 0 steps (unless SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND
# is set), so a node that drafts nothing still decodes a little below a server without
# speculation. A baseline learned from such windows is their throughput divided by
# ``1 - DRAFTING_OFF_COST``: half the tolerance that drafting-off speed is judged with
# (``drafting_off_speedup``, 0.9), so a node is not held to more than it can reach.
DRAFTING_OFF_COST = 0.05
DRAFTING_OFF_WORDS = "learned from this node's windows with drafting off"

# How a node moment decoded, the ``mode`` label of the per-band throughput: a server run
# without speculation, one drafting, or one with drafting turned off at run time.
PLAIN = "plain"
DRAFTING = "drafting"
DRAFTING_OFF_MODE = "drafting_off"
MODES = (PLAIN, DRAFTING, DRAFTING_OFF_MODE)


@dataclass(slots=True)
class BandSpeed:
    """One band's sums: windows, running requests and throughput of each window."""

    windows: int = 0
    running_sum: float = 0.0
    tok_s_sum: float = 0.0

    def add(self, running: int, tok_s: float) -> None:
        self.windows += 1
        self.running_sum += running
        self.tok_s_sum += tok_s

    @property
    def point(self) -> tuple[float, float]:
        """The band's mean running requests and mean throughput."""
        return self.running_sum / self.windows, self.tok_s_sum / self.windows


@dataclass(frozen=True, slots=True)
class LearnedPoint:
    """A point of a learned curve, with the windows behind it."""

    band: str
    running: float
    tok_s: float
    windows: int


class PlainSpeed:
    """Node moments of plain decoding folded by band; a curve once bands have enough windows.

    ``factor`` scales what was measured into what a plain server would do: 1 for a server
    without speculation, more for drafting-off windows, which still pay for what the engine
    keeps running to switch drafting back on.
    """

    __slots__ = ("bands",)

    def __init__(self) -> None:
        self.bands = [BandSpeed() for _ in PLAIN_BANDS]

    def add(self, running: int | None, tok_s: float | None) -> None:
        """One node moment; a moment without load or throughput says nothing of speed."""
        if running and running > 0 and tok_s is not None and tok_s > 0:
            self.bands[band_of(running)].add(running, tok_s)

    def copy(self) -> PlainSpeed:
        """An independent copy, for a snapshot taken under a lock."""
        copied = PlainSpeed()
        copied.bands = [BandSpeed(b.windows, b.running_sum, b.tok_s_sum) for b in self.bands]
        return copied

    @property
    def windows(self) -> int:
        return sum(band.windows for band in self.bands)

    def points(self, minimum: int = MIN_BAND_WINDOWS, factor: float = 1.0) -> list[LearnedPoint]:
        """The bands with at least ``minimum`` windows, as points of a curve."""
        points = []
        for (label, _, _), band in zip(PLAIN_BANDS, self.bands, strict=True):
            if band.windows >= minimum:
                running, tok_s = band.point
                points.append(LearnedPoint(label, running, tok_s * factor, band.windows))
        return points

    def baseline(
        self, kind: str, source: str, minimum: int = MIN_BAND_WINDOWS, factor: float = 1.0
    ) -> Baseline | None:
        """The learned curve as a :class:`Baseline`, limited to the bands it covers (a band
        without enough windows is not judged from it); ``None`` when no band has enough."""
        points = self.points(minimum, factor)
        if not points:
            return None
        return Baseline(
            points=tuple((p.running, p.tok_s) for p in points),
            source=source,
            kind=kind,
            bands=frozenset(band_of(p.running) for p in points),
        )


def curve_text(points: list[LearnedPoint]) -> str:
    """The ``--baseline-curve`` value of learned points: ``RUNNING:TOK_S,...``."""
    return ",".join(f"{_number(p.running)}:{_number(p.tok_s)}" for p in points)


def _number(value: float) -> str:
    """Running requests to a tenth, tok/s to a whole token: what the figures can tell."""
    return f"{round(value, 1):g}" if value < 100 else f"{round(value):d}"


def drafting_off_baseline(speed: PlainSpeed) -> Baseline | None:
    """The baseline a node's drafting-off moments teach: their throughput divided by
    ``1 - DRAFTING_OFF_COST``, for the bands with enough of them; one rule for the daemon,
    ``doctor`` and ``report``."""
    return speed.baseline(DRAFTING_OFF, DRAFTING_OFF_WORDS, factor=1 / (1 - DRAFTING_OFF_COST))
