"""Break-even advice on the draft-token count, checked against hand-worked scenario numbers.

Arithmetic (exporter/breakeven.py, docs/troubleshooting.md): a round costs ``C = AL / S`` decode
steps, each drafted token ``k = (C - 1) / (N - 1)``, and drafts are accepted as a prefix with
per-position probability ``a`` where ``AL = 1 + a + ... + a**(N-1)``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.analysis.breakeven import (
    DEFAULT_COST_PER_DRAFT_TOKEN,
    assess,
    expected_speedup,
)
from exporter.engines.chain import per_position_acceptance


def test_undertrained_drafter_with_16_tokens_should_use_fewer() -> None:
    # Accept len 2.5 with 16 draft tokens, 57 tok/s against a 90 tok/s baseline.
    result = assess(2.5, 16, 57 / 90)
    assert result.verdict == "fewer"
    # 0.6 + 0.36 + ... (15 terms) = 1.4993, so a = 0.6 reproduces 1.5 accepted drafts.
    assert result.per_position_acceptance == pytest.approx(0.6, abs=0.001)
    # C = 2.5 / (57/90) = 3.947 steps; (3.947 - 1) / 15 = 0.1965 step per drafted token.
    assert result.cost_per_draft_token == pytest.approx(0.1965, abs=0.0005)
    # n=2: 1.6/1.197=1.34, n=3: 1.96/1.393=1.41, n=4: 2.176/1.59=1.37 -> 3 is best.
    assert result.suggested_num_draft_tokens == 3
    assert result.expected_speedup == pytest.approx(1.41, abs=0.01)
    assert "Fewer draft tokens would help" in result.explanation
    assert "16 draft tokens" in result.explanation


def test_dead_drafter_gets_fix_the_drafter_advice() -> None:
    # A collapsed drafter: accept len 1.00 with 4 draft tokens, 600 tok/s against 1,560 at 48
    # running.
    result = assess(1.0, 4, 600 / 1560)
    assert result.verdict == "fewer"
    assert result.per_position_acceptance == 0.0
    assert result.suggested_num_draft_tokens == 1
    assert "drafter itself needs fixing" in result.explanation


def test_healthy_eagle3_keeps_its_draft_tokens() -> None:
    # Simulator "healthy": accept len 3.2 with 4 tokens at 1.8x. a ~ 0.85, k ~ 0.26: a 5th
    # token earns 0.85**4 = 0.53 tokens for 0.26 steps, +1.7% at best: below the 5% bar.
    result = assess(3.2, 4, 1.8)
    assert result.verdict == "ok"
    assert result.suggested_num_draft_tokens == 4


def test_nearly_always_accepted_drafts_ask_for_more() -> None:
    result = assess(3.9, 4, 2.5)
    assert result.verdict == "more"
    assert 4 < result.suggested_num_draft_tokens <= 8
    assert "More draft tokens would help" in result.explanation


def test_without_baseline_a_default_cost_is_assumed_and_said() -> None:
    result = assess(2.5, 16)
    assert result.cost_measured is False
    assert result.cost_per_draft_token == DEFAULT_COST_PER_DRAFT_TOKEN
    assert result.verdict == "fewer"
    assert "no baseline, or one that looks wrong" in result.explanation


@pytest.mark.parametrize(("length", "n", "speedup"), [(2.0, 1, 1.0), (2.0, 4, 0.0), (2.0, 4, -1)])
def test_inputs_without_speculation_are_rejected(length: float, n: int, speedup: float) -> None:
    with pytest.raises(ValueError):
        assess(length, n, speedup)


@given(st.integers(2, 32), st.floats(0.0, 1.0))
def test_acceptance_fit_reproduces_the_accept_length(n: int, fraction: float) -> None:
    length = 1 + fraction * (n - 1)
    alpha = per_position_acceptance(length, n)
    assert 1 + sum(alpha**i for i in range(1, n)) == pytest.approx(length, abs=1e-6)


@given(st.integers(2, 32), st.floats(0.0, 1.0), st.floats(0.05, 1.0))
def test_measured_cost_reproduces_the_measured_speedup(
    n: int, fraction: float, speed_fraction: float
) -> None:
    length = 1 + fraction * (n - 1)
    speedup = speed_fraction * length  # keeps the round cost C = AL / S at or above 1 step
    result = assess(length, n, speedup)
    modelled = expected_speedup(result.per_position_acceptance, result.cost_per_draft_token, n)
    assert modelled == pytest.approx(speedup, rel=1e-6)
    assert result.expected_speedup >= modelled - 1e-9
