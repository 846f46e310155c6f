"""Engine-neutral records as the parser makes them, for tests that start past the parser."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from exporter.engines.record import DraftCounts, StatsRecord


def decode(**fields: Any) -> StatsRecord:
    """A typical decode window, with ``fields`` (any of the record's, each of its type) set."""
    typical = StatsRecord(
        kind="decode",
        running_requests=48,
        queued_requests=32,
        token_usage=0.06,
        accept_length=1.0,
        accept_rate=0.25,
        cuda_graph=True,
        gen_throughput=600.0,
    )
    return typical._replace(**fields)


def draft_counts(
    rates: st.SearchStrategy[tuple[float, float] | None] | None = None,
) -> st.SearchStrategy[DraftCounts | None]:
    """A record's draft counts, or none; ``rates`` draws the acceptance rate by position
    (none by default)."""
    return st.one_of(
        st.none(),
        st.builds(
            DraftCounts,
            draft_tokens=st.integers(0, 40),
            accepted_tokens=st.integers(0, 40),
            drafts=st.one_of(st.none(), st.integers(0, 10)),
            accept_rate_by_position=st.none() if rates is None else rates,
        ),
    )
