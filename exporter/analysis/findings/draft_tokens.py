"""Findings about how many tokens are drafted per round: too many for what is accepted, or
more positions than their measured acceptance pays for, with advice sized by break-even."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean

from exporter.analysis import algorithms
from exporter.analysis.algorithms import Standard, config_standard, engine_words
from exporter.analysis.breakeven import Assessment, advise, assess_positions, count_of
from exporter.analysis.findings.shapes import (
    DecodeSample,
    Finding,
    Observations,
    drafts_only_accept_rate,
    speedup_note,
)
from exporter.analysis.thresholds import MIN_WINDOWS

EXCESSIVE_DRAFT_TOKENS = 8
LOW_DRAFTS_ONLY_RATE = 0.2


def draft_tokens_excessive(obs: Observations) -> Finding | None:
    """Many draft tokens per round while few of them are accepted.

    Break-even arithmetic: a round proposes ``N - 1`` draft tokens, verifies ``N`` positions in
    one target pass and yields ``L`` tokens (accept length). Against plain decoding (one token
    per target pass) the round pays ``num_steps`` draft passes plus the verify pass's extra
    width; it wins only while ``L`` exceeds that cost in target-pass units. The drafts-only rate
    ``r = (L - 1) / (N - 1)`` is the share of that extra width that turns into tokens. Incident
    3: ``N = 16``, ``L = 2.5`` gives ``r = 0.10``: 13.5 of 15 proposed tokens are verified and
    thrown away every round, and at batch sizes where the verify pass is no longer free
    (memory-bound) that waste exceeds the 1.5 extra tokens gained. With ``r < 0.2`` a smaller
    tree (4-6 draft tokens) keeps most of ``L`` at a fraction of the verify cost.
    """
    tokens = obs.config.num_draft_tokens
    if tokens is None or tokens < EXCESSIVE_DRAFT_TOKENS or position_profile(obs.windows):
        return None  # measured per-position acceptance has its own, sharper finding
    standard = config_standard(obs.config) or algorithms.DEFAULT.for_engine(obs.config.engine)
    if not standard.has_draft_model:
        return None  # a lookup drafts for free: wide trees of rarely accepted tokens are its way
    if obs.config.adaptive:
        return None  # no one count runs: doctor and report advise a schedule by load instead
    lengths = [w.accept_length for w in obs.windows if w.accept_length is not None]
    if len(lengths) < MIN_WINDOWS:
        return None
    mean = obs.accept_length if obs.accept_length is not None else fmean(lengths)
    rate = drafts_only_accept_rate(mean, tokens)
    advice = advise(mean, tokens, obs.speedup, obs.config.engine)
    if rate is None or rate >= LOW_DRAFTS_ONLY_RATE or advice is None:
        return None
    return Finding(
        code="draft_tokens_excessive",
        summary=f"{count_of(tokens, obs.config.engine)} per round, few accepted",
        seen=(
            f"Mean accept length {mean:.2f}: "
            f"{rate:.0%} of proposed draft tokens accepted ({mean - 1:.1f} of {tokens - 1})"
            f"{speedup_note(obs.speedup)}."
        ),
        why=(
            "Every proposed token is verified by the target; rejected ones are pure cost. At "
            "this acceptance the wasted verify width outweighs the extra tokens gained."
        ),
        fix=_draft_tokens_fix(tokens, advice, standard),
    )


def position_profile(windows: Sequence[DecodeSample]) -> tuple[float, ...] | None:
    """Mean acceptance by draft position over recent windows of the newest draft length."""
    profiles = [w.accept_rate_by_position for w in windows if w.accept_rate_by_position]
    if len(profiles) < MIN_WINDOWS:
        return None
    length = len(profiles[-1])
    same = [profile for profile in profiles if len(profile) == length]
    if len(same) < MIN_WINDOWS:
        return None
    return tuple(fmean(profile[i] for profile in same) for i in range(length))


def draft_positions_unprofitable(obs: Observations) -> Finding | None:
    """Draft positions whose measured acceptance no longer pays for drafting them.

    Where the engine logs acceptance by position (vLLM), the break-even model needs no fitted
    acceptance curve: position ``i`` earns ``rate[i]`` tokens per round for ``cost`` steps.
    """
    rates = position_profile(obs.windows)
    if rates is None or len(rates) < 2:
        return None
    speedup = obs.speedup if obs.speedup and obs.speedup > 0 else None
    advice = assess_positions(rates, speedup)
    drafted = len(rates)
    if advice.suggested >= drafted:
        return None
    basis = "measured speedup" if advice.cost_measured else "assumed draft cost"
    profile = ", ".join(f"{rate:.2f}" for rate in rates)
    if advice.suggested == 0:
        fix = (
            "No number of speculative tokens is expected to beat plain decoding with this "
            f"drafter (break-even estimate from the {basis}): fix or retrain the drafter, or "
            "serve without speculation."
        )
    else:
        # A server drafting by batch size (its schedule) is told this load's entry.
        change = "speculative_tokens" if obs.config.schedule is None else "schedule_entry"
        setting = engine_words(change, obs.config.engine)
        fix = (
            f"Set the number of speculative tokens to {advice.suggested} ({setting}): "
            f"estimated {advice.expected_speedup:.2f}x plain decoding instead of "
            f"{advice.current_speedup:.2f}x (break-even estimate from the {basis})."
        )
    return Finding(
        code="draft_positions_unprofitable",
        summary=(
            f"More than {advice.suggested} speculative tokens per round do not pay"
            if advice.suggested
            else "No speculative token pays for itself"
        ),
        seen=(
            f"acceptance by draft position, first to last: {profile} ({drafted} speculative "
            f"tokens); a drafted token costs about {advice.cost_per_draft_token:.2f} of a "
            f"decode step{speedup_note(obs.speedup)}."
        ),
        why=(
            "Every drafted token is proposed and verified whether or not it is accepted. A "
            "position adds its acceptance in tokens to a round but its cost to every round: "
            "past the suggested count the positions are accepted too rarely to pay for it."
        ),
        fix=fix,
    )


def _draft_tokens_fix(tokens: int, advice: Assessment, standard: Standard) -> str:
    """Advice sized by the break-even estimate (``analysis.breakeven``), not a fixed number,
    in the algorithm's own settings (an MTP head has steps, an EAGLE tree draft tokens).

    With a baseline the estimate rests on the measured cost of a round; without one on an
    assumed draft cost, which the text says.
    """
    basis = "measured speedup" if advice.cost_measured else "assumed draft cost"
    best = advice.suggested_num_draft_tokens
    if best == 1:
        return (
            "No draft-token count is expected to beat plain decoding with this drafter "
            f"(break-even estimate from the {basis}): train the draft further, or serve "
            "without speculation until it accepts more."
        )
    if best < tokens:
        fewer = standard.fewer_tokens.format(count=best, steps=best - 1)
        return (
            f"{fewer} (break-even estimate from the {basis}: "
            f"{advice.expected_speedup:.2f}x plain decoding), or train the draft further "
            "before widening the tree."
        )
    return (
        f"The {basis} says {tokens} draft tokens still pay for themselves; raise acceptance "
        "by training the draft further rather than widening the tree."
    )
