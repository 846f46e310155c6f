"""Would more or fewer draft tokens help? A break-even estimate from three observed numbers.

Every verify round checks ``N = num_draft_tokens`` positions and yields ``accept_length``
tokens (the bonus token included, so 1 <= AL <= N). Compared with one plain decode step, which
yields one token, a round costs ``C`` steps, and the measured speedup is ``S = AL / C``. So the
measured speedup tells us what a round really costs: ``C = AL / S``.

Two simple models turn that into advice:

* cost: ``C = 1 + k * (N - 1)``, i.e. each drafted token costs ``k`` decode steps (drafting it
  plus verifying it). Putting all overhead on the per-token cost makes ``k`` an upper bound, so
  "fewer" is the optimistic and "more" the cautious direction.
* acceptance: drafts are accepted as a prefix, position ``i`` with probability ``a ** i``
  (``a`` = per-position acceptance), so ``AL = 1 + a + a**2 + ... + a**(N-1)``.

Position ``N-1`` therefore earns ``a ** (N-1)`` tokens for ``k`` steps; the expected speedup at
``n`` tokens is ``(1 + a + ... + a**(n-1)) / (1 + k * (n - 1))`` and the best ``n`` is the
suggestion. Without a baseline ``k`` is not measurable and ``DEFAULT_COST_PER_DRAFT_TOKEN`` is
assumed instead (a small EAGLE head while verification is memory-bound).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from exporter.engines import registry
from exporter.engines.chain import accepted_drafts, per_position_acceptance

Verdict = Literal["more", "fewer", "ok"]

# Cost of one drafted token in decode steps when no measured speedup is available; the
# draft/target step-cost ratio of the worked examples in Leviathan et al. (2023).
DEFAULT_COST_PER_DRAFT_TOKEN = 0.05
# A different draft-token count is only recommended when it is expected to gain this much.
MIN_GAIN = 1.05
# The acceptance model is fitted at N; it is trusted up to twice that and no further.
MAX_EXTRAPOLATION = 2


@dataclass(frozen=True, slots=True)
class Assessment:
    """The verdict plus the numbers behind it, so callers can show or alert on either."""

    verdict: Verdict
    explanation: str
    per_position_acceptance: float
    cost_per_draft_token: float
    suggested_num_draft_tokens: int
    expected_speedup: float
    cost_measured: bool


# Every /metrics scrape asks again for the same inputs until the next decode window arrives;
# the answer (60 bisection steps, then a scan of candidate counts) is a pure function of them.
@functools.lru_cache(maxsize=64)
def assess(
    accept_length: float,
    num_draft_tokens: int,
    speedup: float | None = None,
    engine: str | None = None,
) -> Assessment:
    """Break-even verdict for ``num_draft_tokens`` given the observed accept length and speedup.

    ``speedup`` is measured throughput over the non-speculative baseline at the same load
    (``None`` when no baseline is configured). Raises ``ValueError`` for inputs that describe
    no speculation at all (fewer than 2 draft tokens) or a non-positive speedup.
    """
    if num_draft_tokens < 2:
        raise ValueError(f"num_draft_tokens must be at least 2, got {num_draft_tokens}")
    if speedup is not None and speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup}")
    n = num_draft_tokens
    length = min(max(accept_length, 1.0), float(n))
    alpha = per_position_acceptance(length, n)
    cost = _cost_per_draft_token(length, n, speedup)
    candidates = range(1, MAX_EXTRAPOLATION * n + 1)
    best = max(candidates, key=lambda m: expected_speedup(alpha, cost, m))
    current = expected_speedup(alpha, cost, n)
    if expected_speedup(alpha, cost, best) < current * MIN_GAIN:
        best = n
    verdict: Verdict = "ok" if best == n else ("fewer" if best < n else "more")
    return Assessment(
        verdict=verdict,
        explanation=_explain(length, n, speedup, alpha, cost, best, verdict, engine),
        per_position_acceptance=alpha,
        cost_per_draft_token=cost,
        suggested_num_draft_tokens=best,
        expected_speedup=expected_speedup(alpha, cost, best),
        cost_measured=speedup is not None,
    )


def advise(
    accept_length: float | None,
    num_draft_tokens: int | None,
    speedup: float | None,
    engine: str | None = None,
) -> Assessment | None:
    """The draft-token advice of ``doctor``, ``report`` and the daemon's finding alike.

    One entry point, so the three never advise different counts for the same figures. ``None``
    where there is nothing to advise on (no accept length, or no speculation to size).
    """
    if accept_length is None or num_draft_tokens is None or num_draft_tokens < 2:
        return None
    faster = speedup if speedup and speedup > 0 else None
    return assess(accept_length, num_draft_tokens, faster, engine)


def advise_measured(
    rates: tuple[float, ...], speedup: float | None, engine: str | None = None
) -> Assessment:
    """The draft-token advice where the engine logs acceptance by position (vLLM): the same
    count and estimate as the ``draft_positions_unprofitable`` finding, no fitted curve."""
    advice = assess_positions(rates, speedup if speedup and speedup > 0 else None)
    n = len(rates) + 1
    best = advice.suggested + 1
    length = 1.0 + sum(rates)
    verdict: Verdict = "ok" if best == n else "fewer"
    cost = advice.cost_per_draft_token
    if best == 1:
        advice_text = (
            "No draft-token count is expected to beat the baseline with this drafter: "
            "the drafter itself needs fixing (or speculation turned off)."
        )
    elif verdict == "ok":
        advice_text = (
            f"{count_of(n, engine)} is about right (estimated {advice.expected_speedup:.2f}x)."
        )
    else:
        advice_text = (
            f"Fewer draft tokens would help: about {count_of(best, engine)} (estimated "
            f"{advice.expected_speedup:.2f}x)."
        )
    parts = [
        _yield_and_cost(length, n, speedup if advice.cost_measured else None, cost, engine),
        f"A draft position pays only if accepted more than {cost:.0%} of the time; measured "
        f"acceptance by position: {', '.join(f'{rate:.2f}' for rate in rates)}.",
        advice_text,
    ]
    return Assessment(
        verdict=verdict,
        explanation=" ".join(parts),
        per_position_acceptance=per_position_acceptance(length, n),
        cost_per_draft_token=cost,
        suggested_num_draft_tokens=best,
        expected_speedup=advice.expected_speedup,
        cost_measured=advice.cost_measured,
    )


def expected_speedup(alpha: float, cost_per_draft_token: float, num_draft_tokens: int) -> float:
    """Tokens per round over round cost; 1 token per 1 step (no speculation) at ``n == 1``."""
    tokens = 1.0 + accepted_drafts(alpha, num_draft_tokens)
    return tokens / (1.0 + cost_per_draft_token * (num_draft_tokens - 1))


def _cost_per_draft_token(accept_length: float, n: int, speedup: float | None) -> float:
    if speedup is None:
        return DEFAULT_COST_PER_DRAFT_TOKEN
    round_cost = accept_length / speedup
    return max(round_cost - 1.0, 0.0) / (n - 1)


def _explain(
    length: float,
    n: int,
    speedup: float | None,
    alpha: float,
    cost: float,
    best: int,
    verdict: Verdict,
    engine: str | None = None,
) -> str:
    drafts = n - 1
    parts = [
        _yield_and_cost(length, n, speedup, cost, engine),
        # Two rates, said so that they cannot read as one figure contradicting the other: the
        # last position is reached only when every draft before it was accepted.
        f"A draft position pays only if accepted more than {cost:.0%} of the time; position "
        f"{drafts} is accepted about {_percent(alpha**drafts)} of the time (each draft about "
        f"{alpha:.0%} of the times the one before it was).",
        _advice(n, alpha, cost, best, verdict, engine),
    ]
    return " ".join(parts)


def _yield_and_cost(
    length: float, n: int, speedup: float | None, cost: float, engine: str | None = None
) -> str:
    """What a round yields of its ``n`` draft tokens, and what a drafted token costs."""
    drafts = n - 1
    text = (
        f"Each verify round yields {length:.2f} tokens from {count_of(n, engine)}: "
        f"{length - 1:.2f} of {drafts} proposed drafts accepted ({(length - 1) / drafts:.0%})."
    )
    if speedup is None:
        return (
            f"{text} With no speedup measured (no baseline, or one that looks wrong), a drafted "
            f"token is assumed to cost {cost:.2f} of a decode step."
        )
    return (
        f"{text} At {speedup:.2f}x the baseline a round costs {length / speedup:.2f} decode "
        f"steps, about {cost:.2f} step per drafted token."
    )


def count_of(n: int, engine: str | None) -> str:
    """``n`` verified positions a round in the terms of ``engine``: SGLang's ``5 draft
    tokens`` (--speculative-num-draft-tokens), vLLM's ``4 speculative tokens``
    (num_speculative_tokens, the tokens drafted); every engine's word is its ``fixes``'
    ``draft_count`` template, SGLang's by default."""
    own = registry.BY_NAME.get(engine or "")
    template = own.fixes.get("draft_count") if own is not None else None
    return (template or "{count} draft tokens").format(count=n, steps=n - 1)


def _advice(
    n: int, alpha: float, cost: float, best: int, verdict: Verdict, engine: str | None = None
) -> str:
    estimate = expected_speedup(alpha, cost, best)
    if verdict == "ok":
        return f"{count_of(n, engine)} is about right (estimated {estimate:.2f}x)."
    if best == 1:
        return (
            "No draft-token count is expected to beat the baseline with this drafter: "
            "the drafter itself needs fixing (or speculation turned off)."
        )
    if verdict == "fewer":
        return (
            f"Fewer draft tokens would help: about {count_of(best, engine)} "
            f"(estimated {estimate:.2f}x)."
        )
    return (
        f"More draft tokens would help: try up to {count_of(best, engine)} "
        f"(estimated {estimate:.2f}x)."
    )


def _percent(fraction: float) -> str:
    """Two significant digits: a last position accepted 0.05% of the time must not read 0.0%."""
    return f"{100 * fraction:.2g}%"


@dataclass(frozen=True, slots=True)
class PositionAdvice:
    """How many draft tokens the measured per-position acceptance pays for.

    ``rates[i]`` is the share of rounds whose drafts 0..i were all accepted (vLLM's
    per-position acceptance), so with ``n`` drafted tokens a round yields ``1 + sum(rates[:n])``
    tokens for ``1 + cost * n`` decode steps: the same cost model as :func:`assess`, with the
    acceptance measured instead of fitted.
    """

    suggested: int  # drafted tokens per round; 0 = no count beats plain decoding
    cost_per_draft_token: float
    cost_measured: bool
    expected_speedup: float
    current_speedup: float


def assess_positions(rates: tuple[float, ...], speedup: float | None = None) -> PositionAdvice:
    """The draft count (at most the current ``len(rates)``) the measured acceptance pays for.

    Raises ``ValueError`` for an empty profile or a non-positive speedup.
    """
    if not rates:
        raise ValueError("no per-position acceptance")
    if speedup is not None and speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup}")
    drafted = len(rates)
    length = 1.0 + sum(rates)
    # assess() counts verified positions (drafted + 1), as SGLang's num_draft_tokens does.
    cost = _cost_per_draft_token(length, drafted + 1, speedup)

    def gain(n: int) -> float:
        return (1.0 + sum(rates[:n])) / (1.0 + cost * n)

    best = max(range(drafted + 1), key=gain)
    if gain(best) < gain(drafted) * MIN_GAIN:
        best = drafted
    return PositionAdvice(
        suggested=best,
        cost_per_draft_token=cost,
        cost_measured=speedup is not None,
        expected_speedup=gain(best),
        current_speedup=gain(drafted),
    )
