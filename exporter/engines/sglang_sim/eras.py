"""SGLang's scheduler stats lines as they were printed in each era (facts: SGLang's history).

The same window must be written the way a given SGLang release wrote it, because format drift
after an upgrade is exactly what breaks log-based monitoring. Each era records only what
changed: the header, the trailing separator, the prefill field order, and the meaning of
``accept rate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Window:
    """One decode log window: the values the line reports."""

    running: int
    tokens: int
    token_usage: float
    accept_length: float
    cuda_graph: bool
    gen_throughput: float
    queued: int


@dataclass(frozen=True, slots=True)
class PrefillBatch:
    new_seq: int
    new_tokens: int
    cached_tokens: int
    token_usage: float
    running: int
    queued: int
    input_throughput: float


@dataclass(frozen=True, slots=True)
class Era:
    """How one range of SGLang releases printed its stats lines."""

    name: str
    releases: str
    base_time: datetime  # the fixed start of a reproducible log in this era
    separator: str  # what follows "Decode batch" / "Prefill batch"
    trailing: str  # what follows the last field
    rate_denominator: str  # "steps+1", "draft_tokens" or "drafts_only"
    prefill_tail: str  # "none", "throughput_then_graph" or "pending_graph_then_throughput"

    def accept_rate(self, accept_length: float, num_steps: int, num_draft_tokens: int) -> float:
        """``accept rate`` as this era computed it from the same window."""
        if self.rate_denominator == "steps+1":
            return accept_length / (num_steps + 1)
        if self.rate_denominator == "draft_tokens":
            return accept_length / num_draft_tokens
        return (accept_length - 1) / (num_draft_tokens - 1)

    def decode_line(self, window: Window, rate: float | None) -> str:
        spec = ""
        if rate is not None:
            spec = f"accept len: {window.accept_length:.2f}, accept rate: {rate:.2f}, "
        return (
            f"Decode batch{self.separator} #running-req: {window.running}, "
            f"#token: {window.tokens}, token usage: {window.token_usage:.2f}, {spec}"
            f"cuda graph: {window.cuda_graph}, "
            f"gen throughput (token/s): {window.gen_throughput:.2f}, "
            f"#queue-req: {window.queued}{self.trailing}"
        )

    def prefill_line(self, batch: PrefillBatch) -> str:
        head = (
            f"Prefill batch{self.separator} #new-seq: {batch.new_seq}, "
            f"#new-token: {batch.new_tokens}, #cached-token: {batch.cached_tokens}, "
            f"token usage: {batch.token_usage:.2f}, #running-req: {batch.running}, "
            f"#queue-req: {batch.queued}"
        )
        throughput = f"input throughput (token/s): {batch.input_throughput:.2f}"
        if self.prefill_tail == "throughput_then_graph":
            return f"{head}, {throughput}, cuda graph: False"
        if self.prefill_tail == "pending_graph_then_throughput":
            return f"{head}, #pending-token: 0, cuda graph: False, {throughput}"
        return f"{head}{self.trailing}"


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


_ERAS = (
    Era(
        "2025-10",
        "v0.5.3.post2 (Oct 2025): 'Decode batch.', trailing ', ', rate = len/(steps+1)",
        _utc("2025-10-20 14:00:00"),
        ".",
        ", ",
        "steps+1",
        "none",
    ),
    Era(
        "2025-12",
        "v0.5.5.post3 to v0.5.8 (Nov 2025 to Jan 2026): 'Decode batch,', trailing ', '",
        _utc("2025-12-15 09:00:00"),
        ",",
        ", ",
        "draft_tokens",
        "none",
    ),
    Era(
        "2026-02",
        "v0.5.8.post1 to v0.5.9 (Feb 2026): no trailing separator, prefill ends in cuda graph",
        _utc("2026-02-23 00:10:00"),
        ",",
        "",
        "draft_tokens",
        "throughput_then_graph",
    ),
    Era(
        "2026-04",
        "main in April 2026: prefill gains #pending-token and ends in input throughput",
        _utc("2026-04-20 11:00:00"),
        ",",
        "",
        "draft_tokens",
        "pending_graph_then_throughput",
    ),
    Era(
        "2026-05",
        "main since 28 Apr 2026: same text, accept rate counts drafts only",
        _utc("2026-05-20 09:00:00"),
        ",",
        "",
        "drafts_only",
        "pending_graph_then_throughput",
    ),
)

ERAS: Mapping[str, Era] = MappingProxyType({era.name: era for era in _ERAS})
DEFAULT_ERA = "2026-05"
