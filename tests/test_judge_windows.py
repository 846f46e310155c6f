"""How many draft rounds a decode window weighs, in the judge: counted where the engine counts
them, else its log interval of batches, as configured or as its engine declares it."""

from __future__ import annotations

from exporter.analysis.judge import Stretches
from exporter.engines import registry
from exporter.engines.record import DraftCounts, StatsRecord


def _weighed(record: StatsRecord, interval: int | None) -> tuple[float, float]:
    """The draft rounds and accepted draft tokens one window adds to its stretch."""
    stretches = Stretches()
    stretches.add_records([record], [1000.0], interval)
    (stretch,) = stretches.items()
    return stretch.drafts, stretch.accepted


def test_a_window_without_counted_rounds_covers_its_engines_log_interval() -> None:
    """A log whose start was not seen: the engine's own interval of batches of 8 requests,
    unless the configuration said another."""
    line = StatsRecord("decode", engine="sglang", accept_length=2.5, running_requests=8)
    declared = registry.engine("sglang").decode_log_interval
    assert declared is not None and declared > 1
    assert _weighed(line, None) == (8 * declared, 8 * declared * 1.5)
    assert _weighed(line, 10) == (80.0, 120.0)


def test_an_engine_without_an_interval_weighs_an_uncounted_window_by_its_drafted_tokens() -> None:
    """vLLM counts its rounds; where a line cannot say how many (nothing accepted, and no
    speculative token count known) it had at most one per drafted token, not some other
    engine's interval of batches."""
    assert registry.engine("vllm").decode_log_interval is None
    counts = DraftCounts(draft_tokens=12, accepted_tokens=0)
    line = StatsRecord(
        "decode", engine="vllm", accept_length=1.0, running_requests=8, draft_counts=counts
    )
    assert _weighed(line, None) == (12.0, 0.0)
    counted = line._replace(draft_counts=DraftCounts(12, 0, drafts=4))
    assert _weighed(counted, None) == (4.0, 0.0)
