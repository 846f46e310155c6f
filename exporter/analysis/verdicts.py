"""Verdicts on a node's state: is speculation working, and is it paying for itself?

Findings name a cause from the configuration; verdicts judge what the node did: an accept
length collapsed or below expectation, throughput under the non-speculative baseline, or a
baseline that cannot be right. ``specwatch doctor`` and ``specwatch report`` judge a server run
with :func:`judge`, by the thresholds the shipped alert rules use (``analysis.thresholds``),
so a one-shot tool never contradicts the page an on-call just got.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.analysis import algorithms
from exporter.analysis.algorithms import Standard, floor_for, off_cause
from exporter.analysis.findings import (
    CRITICAL,
    OFF_SHARE,
    SEVERITY_ORDER,
    WARNING,
    Finding,
    judgement_json,
    slow_with_drafting_off,
)
from exporter.analysis.thresholds import DEFAULT, MIN_WINDOWS, Thresholds

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
    """What one server run did, as plain numbers (node-wide: DP ranks summed)."""

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
    # Whether windows that draft amid drafting-off ones are probes (``ServerConfig.probes``).
    probes: bool = True

    @property
    def measured_over(self) -> str:
        return self.basis or f"{self.windows} decode windows"

    @property
    def mostly_off(self) -> bool:
        """Drafting was off (adaptive, or a schedule at k = 0) in at least ``OFF_SHARE`` of
        the decode windows: the run's speed is that of a server not speculating."""
        total = self.windows + self.drafting_off
        return total > 0 and self.drafting_off / total >= OFF_SHARE

    @property
    def probing_only(self) -> bool:
        """Drafting was off in nearly every window: the windows with it on are adaptive's
        probes, judged by the finding adaptive_drafter_given_up, not by accept length."""
        return self.probes and self.mostly_off

    @property
    def speedup(self) -> float | None:
        if self.throughput is None or not self.baseline:
            return None
        return self.throughput / self.baseline


def judge(
    run: RunFigures,
    expected_accept_length: float | None,
    thresholds: Thresholds = DEFAULT,
    standard: Standard | None = algorithms.DEFAULT,
    steps: int | None = None,
    engine: str | None = None,
) -> list[Verdict]:
    """The verdicts that hold for ``run``, most severe first.

    ``standard`` is the run's algorithm's (``None``: an algorithm specwatch does not know,
    judged on speed only), ``steps`` its draft steps, which cap the floor, and ``engine`` the
    engine that logged it (the fix of a slow run with drafting off is in its terms).
    """
    if run.windows + run.drafting_off < MIN_WINDOWS:
        return []
    accept = None
    judged = run.windows >= MIN_WINDOWS and not run.probing_only
    if standard is not None and judged and run.accept_length is not None:
        accept = _accept_length(run, expected_accept_length, thresholds, standard, steps)
    speed = _baseline_implausible(run) or (
        _slow_with_drafting_off(run, thresholds, engine)
        if run.mostly_off
        else _slower_than_baseline(run, thresholds)
    )
    found = [accept, speed]
    verdicts = [v for v in found if v is not None]
    return sorted(verdicts, key=lambda v: SEVERITY_ORDER[v.severity])


def implausible(run: RunFigures) -> bool:
    """The baseline cannot be right for this run: its speedup is no evidence of anything."""
    return _baseline_implausible(run) is not None


def _accept_length(
    run: RunFigures,
    expected: float | None,
    thresholds: Thresholds,
    standard: Standard,
    steps: int | None,
) -> Verdict | None:
    length = run.accept_length
    assert length is not None
    speed = _speed_note(run)
    if length <= thresholds.collapsed_accept_length:
        return Verdict(
            code="accept_length_collapsed",
            severity=CRITICAL,
            summary="Speculative decoding collapsed: no draft token is accepted",
            seen=(
                f"mean accept length {length:.2f} over {run.measured_over} (collapsed "
                f"at <= {thresholds.collapsed_accept_length:g}){speed}."
            ),
            why=(
                f"Every verify round yields only the target's own token ({standard.collapse}), "
                "so each round pays for drafting and verifying for nothing: the node is slower "
                "than it would be without speculation."
            ),
            fix=standard.collapse_fix,
        )
    limit = thresholds.low_accept_limit(expected, floor_for(standard, steps))
    if limit is None or length >= limit:
        return None
    basis = (
        f" ({thresholds.low_accept_fraction:.0%} of the expected {expected:g})"
        if expected is not None
        else f", the floor of {standard.family} drafters (no --expected-accept-length given)"
    )
    return Verdict(
        code="accept_length_low",
        severity=WARNING,
        summary="Accept length below expectation",
        seen=(
            f"mean accept length {length:.2f} over {run.measured_over}, below "
            f"{limit:.2f}{basis}{speed}."
        ),
        why=(
            "Each round yields fewer tokens than this drafter should, and the gain over "
            "plain decoding shrinks or turns into a loss."
        ),
        fix=standard.low_fix,
    )


def _slower_than_baseline(run: RunFigures, thresholds: Thresholds) -> Verdict | None:
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


def _slow_with_drafting_off(
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


def _baseline_implausible(run: RunFigures) -> Verdict | None:
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
            f"Measure the baseline again on this node, without --speculative-algorithm and at "
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
