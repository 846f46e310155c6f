"""The numbers every verdict is judged by, defined once.

The alert rules in ``alerts/``, ``specwatch doctor`` and ``specwatch report`` must call the
same node collapsed or slow, or an on-call gets a page that the one-shot tools contradict.
``tests/test_thresholds.py`` keeps the shipped rule file equal to these values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    """When accept length and speedup become a verdict, and how long they must hold."""

    # At or below this accept length (5-minute average) the drafter contributes nothing:
    # every round yields the bonus token only.
    collapsed_accept_length: float = 1.05
    # Below this share of the expected accept length the drafter underperforms.
    low_accept_fraction: float = 0.7
    # Below this speedup over the non-speculative baseline, speculation costs more than it saves.
    slower_than_baseline_speedup: float = 1.0
    # ... and below this one while drafting is off (adaptive speculation, a per-batch-size
    # schedule at k = 0): the server is not speculating, but still keeps speculation ready
    # (SGLang runs the draft model's extend every round to keep its cache warm; vLLM serves
    # piecewise instead of full CUDA graphs), which costs a few percent of a decode step, and
    # window-to-window noise as much again. Above it a node with drafting off is healthy.
    drafting_off_speedup: float = 0.9
    collapsed_for: str = "5m"
    low_accept_for: str = "10m"
    slower_for: str = "10m"
    # More than this share of recent speculative requests at or below the collapsed accept
    # length, while the windows average no lower than the algorithm's floor, is a class of
    # traffic the drafter does not serve (docs/metrics.md, "Per-request acceptance").
    no_benefit_share: float = 0.1
    # ... judged on at least this many requests, over this window (the exporter's recent
    # requests: fixed). The finding judges by the defaults; a rendering may move the alert's.
    no_benefit_min_requests: int = 20
    no_benefit_window: str = "15m"
    no_benefit_for: str = "10m"

    def low_accept_limit(
        self, expected_accept_length: float | None, floor: float | None
    ) -> float | None:
        """The accept length below which the drafter counts as underperforming: a share of
        what the user expects of it, else its algorithm's floor (``analysis.algorithms``);
        ``None`` when neither is known."""
        if expected_accept_length is None:
            return floor
        return self.low_accept_fraction * expected_accept_length


DEFAULT = Thresholds()
# Decode windows a judgement needs (a window-based finding, a verdict, a band's draft-step
# advice): one odd batch is not the node's state.
MIN_WINDOWS = 3
# Seconds after which a log window no longer counts as current: the daemon's default
# ``stale_after``, the moments that sum DP ranks, and the dashboards' staleness marks.
STALE_AFTER = 60.0
