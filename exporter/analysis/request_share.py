"""Whether a finished request got anything from the drafter: the rules the state counts by
and the findings judge by (docs/metrics.md, "Per-request acceptance")."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.analysis.thresholds import DEFAULT
from exporter.engines.record import RequestRecord

# At or below this accept length a request got nothing from the drafter (the collapsed
# threshold of the alerts: one accepted draft in twenty rounds is noise).
NO_BENEFIT_ACCEPT_LENGTH = DEFAULT.collapsed_accept_length
# A request counts as "no draft accepted" only after this many verify rounds: a three-token
# answer that accepted nothing is no evidence about the drafter.
MIN_VERIFY_ROUNDS = 8


def no_draft_accepted(record: RequestRecord) -> bool:
    """Not one draft token accepted over at least ``MIN_VERIFY_ROUNDS`` rounds.

    The rate counts accepted drafts exactly (``correct / proposed``); without it, every round
    yielding one token means ``completion_tokens <= rounds + 1`` (the prefill's token aside).
    """
    rounds = record.verify_rounds
    if rounds is None or rounds < MIN_VERIFY_ROUNDS or record.accept_length is None:
        return False
    if record.accept_rate is not None:
        return record.accept_rate <= 0.0
    return record.accept_length <= 1.0 + 1.0 / rounds


@dataclass(frozen=True, slots=True)
class RecentShare:
    """Speculative requests seen recently, those of them with no benefit, and the logged times
    of the first and last of them (ISO, as logged). With traffic classes configured, the class
    with the largest share without benefit since the start (its name and that share)."""

    requests: int
    no_benefit: int
    first: str | None
    last: str | None
    worst_class: str | None = None
    worst_class_share: float = 0.0

    @property
    def share(self) -> float:
        return self.no_benefit / self.requests if self.requests else 0.0


def logged_time(time: str) -> str:
    """A logged time as people read it: ``2026-02-23 00:14:33``."""
    return time.replace("T", " ")
