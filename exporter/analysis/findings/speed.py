"""Speed while drafting is off: adaptive speculation (SGLang) and a per-batch-size schedule
(vLLM) turn drafting off at high load by design. The server then speculates nothing, but keeps
speculation ready for when the load drops, and that costs a little. A node a few percent below
the non-speculative baseline is paying that cost, not failing at speculation; one far below is
a fault of its own, named with the engine's own remedy.

The daemon gives it as a finding (:func:`drafting_off_below_baseline`), ``doctor`` and
``report`` as a verdict on the run (``analysis.verdicts``), both written by
:func:`slow_with_drafting_off`, so the two read alike; the alert rule
SpecDecodeDraftingOffBelowBaseline judges by the same threshold and share.
"""

from __future__ import annotations

from exporter.analysis.algorithms import engine_fix, off_cause
from exporter.analysis.findings.acceptance import OFF_SHARE, drafting_off_share
from exporter.analysis.findings.shapes import Finding, Observations
from exporter.analysis.thresholds import Thresholds

DRAFTING_OFF_SLOW = "drafting_off_below_baseline"


def drafting_off_now(obs: Observations) -> bool:
    """Drafting was off in at least ``OFF_SHARE`` of the recent windows; with too few windows
    to tell, the draft steps in force (0: off, as the server's gauges or adaptive lines say)."""
    share = drafting_off_share(obs.windows)
    if share is None:
        return obs.config.active_steps == 0
    return share >= OFF_SHARE


def slow_with_drafting_off(
    speedup: float | None,
    seen_speed: str,
    seen_off: str,
    thresholds: Thresholds,
    engine: str | None,
) -> Finding | None:
    """The judgement of ``speedup`` measured while drafting was off: nothing down to the
    tolerance for keeping speculation ready, below it a warning.

    ``seen_speed`` says what was measured and ``seen_off`` how drafting was seen to be off, in
    the figures of whoever judges (a run's, or the daemon's recent windows).
    """
    limit = thresholds.drafting_off_speedup
    if speedup is None or speedup >= limit:
        return None
    return Finding(
        code=DRAFTING_OFF_SLOW,
        summary="Drafting is off at this load, and the node runs well below serving without it",
        seen=(
            f"{seen_speed} ({speedup:.2f}x), with {seen_off}: below the {limit:g}x that "
            "keeping speculation ready may cost."
        ),
        why=(
            f"At this load drafting is off ({off_cause(engine)}), by design, so each round is "
            "a plain decode step; but the speculative machinery still runs, ready for "
            "when the load drops. That costs a few percent of the baseline, not this much: "
            "here it makes the node slower than the same server without speculation."
        ),
        fix=(
            "Drafting off is not the fault; what it keeps running is. "
            f"{engine_fix('drafting_off_cost', engine)}."
        ),
    )


def drafting_off_below_baseline(obs: Observations) -> Finding | None:
    """The daemon's judgement of its recent windows' speed while drafting is off."""
    if obs.speedup is None or not drafting_off_now(obs):
        return None
    cause = off_cause(obs.config.engine)
    if drafting_off_share(obs.windows) is None:
        seen_speed = "throughput now against the non-speculative baseline at its load"
        seen_off = f"0 draft steps in force ({cause})"
    else:
        seen_speed = "throughput of the recent decode windows against the baseline at their load"
        off = sum(w.drafting_off for w in obs.windows)
        seen_off = f"drafting off ({cause}) in {off} of those {len(obs.windows)} windows"
    return slow_with_drafting_off(
        obs.speedup, seen_speed, seen_off, obs.thresholds, obs.config.engine
    )
