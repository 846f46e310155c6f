"""Drafts accepted as a prefix: position ``i`` of a round with probability ``a ** i``.

The model both the break-even advice (``analysis/breakeven.py``) and the engines' simulated
stats lines rest on: ``AL = 1 + a + a**2 + ... + a**(N-1)`` for ``N`` verified positions.
"""

from __future__ import annotations


def per_position_acceptance(accept_length: float, num_draft_tokens: int) -> float:
    """Solve ``1 + a + a**2 + ... + a**(N-1) = AL`` for ``a`` in [0, 1] by bisection."""
    target = accept_length - 1.0
    if target <= 0:
        return 0.0
    if target >= num_draft_tokens - 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if accepted_drafts(mid, num_draft_tokens) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def accepted_drafts(alpha: float, num_draft_tokens: int) -> float:
    return sum(alpha**i for i in range(1, num_draft_tokens))
