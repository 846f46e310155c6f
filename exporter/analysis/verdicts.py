"""Verdicts on a node's state: is speculation working, and is it paying for itself?

Findings name a cause from the configuration; verdicts judge what the node did: an accept
length collapsed or below expectation, throughput under the non-speculative baseline, or a
baseline that cannot be right. Their words live here; whether one holds is decided in
``analysis.judge``, by the thresholds the shipped alert rules use (``analysis.thresholds``), so
a one-shot tool never contradicts the page an on-call just got.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.analysis.algorithms import UNKNOWN_METHOD, Standard, off_cause
from exporter.analysis.findings import (
    CRITICAL,
    WARNING,
    Finding,
    judgement_json,
    slow_with_drafting_off,
)
from exporter.analysis.thresholds import Thresholds

# A verify round costs at least one plain decode step and yields ``accept_length`` tokens, so
# speculation can be at most ``accept_length`` times faster than no speculation. Above that
# (with this margin for window-to-window noise) the baseline, not the node, is wrong.
PLAUSIBLE_MARGIN = 1.1
# Below this speedup even a drafter accepting nothing, with CUDA graphs off, is not that slow:
# the baseline was measured on other hardware or another model.
IMPLAUSIBLY_SLOW = 0.1


@dataclass(frozen=True, slots=True)
class Verdict:
    """One judgement of the node's state, shaped like a finding: seen, why, fix."""

    code: str
    severity: str
    summary: str
    seen: str
    why: str
    fix: str

    def to_json_dict(self) -> dict[str, str]:
        return judgement_json(self)


@dataclass(frozen=True, slots=True)
class RunFigures:
    """The judged windows' figures, as plain numbers (node-wide: DP ranks summed), in the
    shape the verdicts' words are written for (``analysis.judge`` fills it)."""

    windows: int  # decode windows that logged an accept length
    accept_length: float | None  # mean over those windows
    throughput: float | None  # mean node throughput at the run's usual concurrency
    baseline: float | None  # mean baseline at the same concurrency
    running: int | None  # median node running requests there
    baseline_option: str | None = None  # the flag or config key the baseline came from
    drafting_off: int = 0  # decode windows adaptive speculation ran with drafting off
    # What the accept length was measured over, when not the log's decode windows (doctor
    # --url: the server's counters between two scrapes).
    basis: str | None = None
    # The judged log windows in words (their count, drafts and span), when the judge says.
    windows_text: str | None = None

    @property
    def measured_over(self) -> str:
        return self.basis or self.windows_text or f"{self.windows} decode windows"

    @property
    def speedup(self) -> float | None:
        if self.throughput is None or not self.baseline:
            return None
        return self.throughput / self.baseline


def implausible(run: RunFigures) -> bool:
    """The baseline cannot be right for this run: its speedup is no evidence of anything."""
    return baseline_implausible(run) is not None


def collapsed(run: RunFigures, thresholds: Thresholds, standard: Standard) -> Verdict:
    """The drafter accepts nothing: every round yields the target's own token only."""
    length = run.accept_length
    assert length is not None
    return Verdict(
        code="accept_length_collapsed",
        severity=CRITICAL,
        summary="Speculative decoding collapsed: no draft token is accepted",
        seen=(
            f"mean accept length {length:.2f}, at or below the collapse line of "
            f"{thresholds.collapsed_accept_length:g}, over {run.measured_over}{_speed_note(run)}."
        ),
        why=(
            f"Every verify round yields only the target's own token ({standard.collapse}), "
            "so each round pays for drafting and verifying for nothing: the node is slower "
            "than it would be without speculation."
        ),
        fix=standard.collapse_fix,
    )


def low(
    run: RunFigures,
    expected: float | None,
    limit: float,
    standard: Standard,
    thresholds: Thresholds,
    drift: str = "",
) -> Verdict:
    """The drafter accepts less than it should: a share of the expected accept length, else
    its algorithm's floor; ``drift`` says where it fell from, when it fell slowly."""
    length = run.accept_length
    assert length is not None
    if expected is not None:
        basis = f" ({thresholds.low_accept_fraction:.0%} of the expected {expected:g})"
    elif standard is UNKNOWN_METHOD:
        basis = ", the lowest floor of any method (the method is not known)"
    else:
        basis = f", the floor of {standard.family} drafters (no --expected-accept-length given)"
    return Verdict(
        code="accept_length_low",
        severity=WARNING,
        summary="Accept length below expectation",
        seen=(
            f"mean accept length {length:.2f} over {run.measured_over}, below "
            f"{limit:.2f}{basis}{drift}{_speed_note(run)}."
        ),
        why=(
            "Each round yields fewer tokens than this drafter should, and the gain over "
            "plain decoding shrinks or turns into a loss."
        ),
        fix=standard.low_fix,
    )


def drifting(run: RunFigures, reference: float, share: float, standard: Standard) -> Verdict:
    """A slow fall from the node's own earlier level, not yet below the low limit."""
    length = run.accept_length
    assert length is not None
    return Verdict(
        code="accept_length_drifting",
        severity=WARNING,
        summary="Accept length drifting down from the node's own earlier level",
        seen=(
            f"mean accept length {length:.2f} over {run.measured_over}, below {share:.0%} of "
            f"the {reference:.2f} this run accepted in its first hour{_speed_note(run)}."
        ),
        why=(
            "The drafter is no longer as good at this traffic as it was: the prompts moved "
            "away from what it drafts well, or something it depends on changed. Left alone, "
            "a drift ends below the low limit."
        ),
        fix=(
            "Compare the traffic now with that of the run's first hour (a new client, longer "
            f"or other prompts); {standard.low_fix}"
        ),
    )


def slower_than_baseline(run: RunFigures, thresholds: Thresholds) -> Verdict | None:
    speedup = run.speedup
    if speedup is None or speedup >= thresholds.slower_than_baseline_speedup:
        return None
    assert run.throughput is not None and run.baseline is not None
    return Verdict(
        code="slower_than_baseline",
        severity=WARNING,
        summary="Speculation is slower than serving without it",
        seen=(
            f"{run.throughput:,.0f} tok/s at {_requests(run.running)} against a baseline "
            f"of {run.baseline:,.0f} tok/s there ({speedup:.2f}x)."
        ),
        why=(
            "Speculation costs a draft pass and a wider verify per round; it pays only while "
            "enough draft tokens are accepted and verification stays memory-bound."
        ),
        fix=(
            "Fix what the other verdicts and findings name (accept length, CUDA graphs, "
            "draft-token count); if nothing is named, try fewer draft tokens, or serve this "
            "load without speculation."
        ),
    )


def drafting_off_slow(
    run: RunFigures, thresholds: Thresholds, engine: str | None
) -> Verdict | None:
    """A run that mostly did not draft is judged against the baseline with the tolerance for
    keeping speculation ready, in the words of the daemon's finding (``findings.speed``)."""
    speedup = run.speedup
    if speedup is None:
        return None
    assert run.throughput is not None and run.baseline is not None
    total = run.windows + run.drafting_off
    seen_off = (
        f"0 draft steps in force ({off_cause(engine)}), read from {run.basis}"
        if run.basis
        else f"drafting off ({off_cause(engine)}) in {run.drafting_off} of {total} decode windows"
    )
    found = slow_with_drafting_off(
        speedup,
        f"{run.throughput:,.0f} tok/s at {_requests(run.running)} against a baseline of "
        f"{run.baseline:,.0f} tok/s there",
        seen_off,
        thresholds,
        engine,
    )
    return None if found is None else _as_verdict(found)


def _as_verdict(finding: Finding) -> Verdict:
    return Verdict(
        finding.code, finding.severity, finding.summary, finding.seen, finding.why, finding.fix
    )


def baseline_implausible(run: RunFigures) -> Verdict | None:
    speedup, length = run.speedup, run.accept_length
    if speedup is None or length is None:
        return None
    assert run.throughput is not None and run.baseline is not None
    option = run.baseline_option or "the baseline"
    measured = (
        f"{run.throughput:,.0f} tok/s at {_requests(run.running)} against {option}'s "
        f"{run.baseline:,.0f} tok/s there ({speedup:.2f}x)"
    )
    if speedup > length * PLAUSIBLE_MARGIN:
        seen = (
            f"{measured}, with a mean accept length of {length:.2f}: speculation cannot be "
            f"more than {length:.2f}x faster, since a round costs at least one decode step."
        )
        fix = (
            f"Measure the baseline again on this node, without speculative decoding and at "
            f"about {run.running} concurrent requests, and give it with {option}."
        )
    elif speedup < IMPLAUSIBLY_SLOW:
        seen = f"{measured}: less than a tenth, slower than even a drafter that accepts nothing."
        fix = (
            f"Check {option} was measured on this hardware and model (a baseline from bigger "
            "GPUs or a smaller model raises false alarms)."
        )
    else:
        return None
    return Verdict(
        code="baseline_implausible",
        severity=WARNING,
        summary="The baseline looks wrong for this node",
        seen=seen,
        why=(
            "A speedup is only as good as the baseline it divides by; this one cannot be the "
            "same server without speculation at this load, so no speed verdict is given."
        ),
        fix=fix,
    )


def _requests(running: int | None) -> str:
    return f"{running} running request{'' if running == 1 else 's'}"


def _speed_note(run: RunFigures) -> str:
    speedup = run.speedup
    if speedup is None or run.throughput is None:
        return ""
    if implausible(run):
        return f", {run.throughput:,.0f} tok/s"
    return f", {run.throughput:,.0f} tok/s, {speedup:.2f}x the baseline"
