"""vLLM's ``SpecDecoding metrics:`` lines, written by the computation of its own code.

``vllm/v1/spec_decode/metrics.py``: the scheduler calls ``SpecDecodingStats.observe_draft``
once per request and step that carried draft tokens (``num_drafts += 1``, the tokens drafted
and accepted added, each accepted position counted); ``SpecDecodingLogging.log`` sums an
interval and prints ``1 + accepted / num_drafts`` with ``%.2f``, each position's count over
``num_drafts`` with ``{:.3f}``, and accepted over drafted with ``%.1f%%``. An n-gram or suffix
drafter proposes fewer than ``num_speculative_tokens`` when its match is short.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Interval:
    """One logging interval's sums, as ``SpecDecodingLogging`` keeps them."""

    k: int
    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)

    def observe_draft(self, drafted: int, accepted: int) -> None:
        if not self.per_position:
            self.per_position = [0] * self.k
        assert 0 < drafted <= self.k and 0 <= accepted <= drafted
        self.drafts += 1
        self.drafted += drafted
        self.accepted += accepted
        for position in range(accepted):
            self.per_position[position] += 1

    def body(self, seconds: float = 10.0) -> str:
        """The line's body as ``SpecDecodingLogging.log`` formats it."""
        mean = 1 + self.accepted / self.drafts
        rates = ", ".join(f"{count / self.drafts:.3f}" for count in self.per_position)
        rate = self.accepted / self.drafted * 100 if self.drafted else float("nan")
        return (
            "SpecDecoding metrics: "
            f"Mean acceptance length: {mean:.2f}, "
            f"Accepted throughput: {self.accepted / seconds:.2f} tokens/s, "
            f"Drafted throughput: {self.drafted / seconds:.2f} tokens/s, "
            f"Accepted: {self.accepted} tokens, "
            f"Drafted: {self.drafted} tokens, "
            f"Per-position acceptance rate: {rates}, "
            f"Avg Draft acceptance rate: {rate:.1f}%"
        )


def lookup_interval(rng: random.Random, k: int, drafts: int, hit: float) -> Interval:
    """An n-gram (or suffix) drafter's interval: each draft as long as its match (1 to k
    tokens), each of its tokens accepted in turn with chance ``hit``."""
    interval = Interval(k)
    for _ in range(drafts):
        length = rng.randint(1, k)
        accepted = 0
        while accepted < length and rng.random() < hit:
            accepted += 1
        interval.observe_draft(length, accepted)
    return interval
