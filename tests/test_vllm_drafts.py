"""vLLM's draft rounds, read back exactly from lines its own logging code prints.

vLLM logs no round count; specwatch needs it to weigh each window by its drafts and to say how
many drafts a verdict rests on. Lookup drafters (n-gram, suffix) propose fewer tokens than
``num_speculative_tokens`` when their match is short, so drafted / k undercounts them.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.engines import vllm
from exporter.engines.record import StatsRecord
from exporter.engines.vllm import VllmParser
from tests.support.files import write_log
from tests.support.vllm_spec import Interval, lookup_interval

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def parsed_drafts(interval: Interval) -> int | None:
    parser = VllmParser(now=NOW)
    [record] = parser.feed(f"INFO 12-01 10:01:00 [metrics.py:120] {interval.body()}")
    assert isinstance(record, StatsRecord) and record.draft_counts is not None
    return record.draft_counts.drafts


def prints_alike(interval: Interval, rounds: int) -> bool:
    """Whether ``rounds`` rounds print the same line as vLLM's own count: the mean, and each
    per-position rate as some whole count over ``rounds``."""
    true = interval.drafts
    if f"{1 + interval.accepted / rounds:.2f}" != f"{1 + interval.accepted / true:.2f}":
        return False
    return all(some_count_prints(f"{count / true:.3f}", rounds) for count in interval.per_position)


def some_count_prints(rate: str, rounds: int) -> bool:
    """Whether a whole count over ``rounds`` prints as ``rate`` (three decimals). Only counts
    within a thousandth of it can, so only those are tried, not every count up to ``rounds``."""
    low = max(0, math.floor((float(rate) - 0.001) * rounds))
    high = min(rounds, math.ceil((float(rate) + 0.001) * rounds))
    return any(f"{c / rounds:.3f}" == rate for c in range(low, high + 1))


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_lookup_drafts_shorter_than_k_are_read_as_rounds_that_print_the_same_line(k: int) -> None:
    """One line cannot always tell the count (several print alike, at three decimals); the
    count read must be one of those, so every figure built on it is the one vLLM printed."""
    rng = random.Random(k)
    lines = 0
    for _ in range(250):
        hit = rng.choice((0.05, 0.2, 0.5, 0.8))
        interval = lookup_interval(rng, k, rng.randint(1, 3000), hit)
        if not interval.accepted:
            continue  # nothing accepted: no rate or mean tells the rounds (see below)
        lines += 1
        rounds = parsed_drafts(interval)
        assert rounds is not None
        assert prints_alike(interval, rounds), interval.body()
        exact = interval.accepted / interval.drafts
        # The accept length weighed by it is as close as vLLM's own mean prints (%.2f).
        assert abs(interval.accepted / rounds - exact) <= 0.005
    assert lines > 200


def nearest_printing_alike(interval: Interval, positions: tuple[float, ...]) -> int:
    """Every round count the line allows, tried one by one with every count at each position:
    the one nearest to accepted / the rates' sum that prints the line, the lower of two."""
    accepted, drafted = interval.accepted, interval.drafted
    mean = f"{1 + accepted / interval.drafts:.2f}"

    def prints(rounds: int) -> bool:
        if f"{1 + accepted / rounds:.2f}" != mean:
            return False
        least = most = 0
        ceiling = rounds
        for rate in positions:
            counts = [c for c in range(ceiling + 1) if f"{c / rounds:.3f}" == f"{rate:.3f}"]
            if not counts:
                return False
            least, most, ceiling = least + counts[0], most + counts[-1], counts[-1]
        return least <= accepted <= most

    guess = accepted / sum(positions)
    fits = [n for n in range(-(-drafted // len(positions)), drafted + 1) if prints(n)]
    return min(fits, key=lambda n: abs(n - guess))


@pytest.mark.parametrize("seed", range(6))
def test_the_rounds_read_are_the_nearest_that_print_the_line_tried_one_by_one(seed: int) -> None:
    """The count is found by trying few candidates; it is the one trying them all finds."""
    rng = random.Random(seed)
    for _ in range(40):
        interval = lookup_interval(rng, rng.randint(1, 5), rng.randint(1, 400), rng.random())
        if not interval.accepted:
            continue
        positions = tuple(float(f"{c / interval.drafts:.3f}") for c in interval.per_position)
        if not sum(positions):
            continue
        expected = nearest_printing_alike(interval, positions)
        assert parsed_drafts(interval) == expected, interval.body()


def test_a_line_no_count_prints_as_is_given_up_on_after_a_bounded_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hostile or drifted line costs a bounded number of tries, not one per drafted token:
    a real collapsed vLLM node's 10 s window of 20,000 drafted tokens once took a second of
    CPU, the daemon's whole tail thread with it."""
    tried: list[int] = []
    prints_as = vllm._prints_as

    def counting(rounds: int, *args: Any) -> bool:
        tried.append(rounds)
        return prints_as(rounds, *args)

    monkeypatch.setattr(vllm, "_prints_as", counting)
    body = (
        "SpecDecoding metrics: Mean acceptance length: 1.00, Accepted: 7 tokens, Drafted: "
        "900000 tokens, Per-position acceptance rate: 0.001, 0.000, 0.000, 0.000, Avg Draft "
        "acceptance rate: 0.0%"
    )
    [record] = VllmParser(now=NOW).feed(f"INFO 12-01 10:01:00 [metrics.py:120] {body}")
    assert isinstance(record, StatsRecord) and record.draft_counts is not None
    # No count prints it (7 accepted cannot be 0.001 of 225,000 rounds or more): the fewest
    # rounds the drafted tokens allow stand.
    assert record.draft_counts.drafts == 900_000 // 4
    assert 0 < len(tried) <= vllm._MAX_CANDIDATES


def test_nothing_accepted_counts_the_fewest_rounds_the_line_allows() -> None:
    interval = Interval(4)
    for length in (1, 2, 4, 4, 3):
        interval.observe_draft(length, 0)
    assert parsed_drafts(interval) == 4  # 14 drafted tokens, at most 4 a round


def test_the_real_servers_ngram_interval_of_few_drafts() -> None:
    """27 n-gram drafts of 1-4 tokens with 2 accepted: 1 + 2 / 27 = 1.07."""
    interval = Interval(4)
    for length, accepted in [(2, 1), (4, 1)] + [(1 + i % 4, 0) for i in range(25)]:
        interval.observe_draft(length, accepted)
    assert parsed_drafts(interval) == 27


def test_vllm_draft_counts_are_told_in_its_own_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``num_spec_tokens=4`` is 4 speculative tokens, never "5 draft tokens" (SGLang's count
    of verified positions), in the run's setup and in the draft-token advice."""
    rng = random.Random(11)
    lines = [
        "INFO 12-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.33.0) with config: "
        "model='/models/target', speculative_config=SpeculativeConfig(method='draft_model', "
        "model='/models/draft', num_spec_tokens=4), tokenizer='/models/target', "
        "enforce_eager=False, seed=None",
    ]
    for i in range(12):
        interval = lookup_interval(rng, 4, 600, 0.6)
        at = f"12-01 10:01:{5 * i:02d}"
        lines += [
            f"INFO {at} [loggers.py:111] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
            "generation throughput: 1210.0 tokens/s, Running: 32 reqs, Waiting: 0 reqs, GPU "
            "KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
            f"INFO {at} [metrics.py:82] {interval.body()}",
        ]
    log = write_log(tmp_path, lines)
    assert main(["report", log, "--baseline-tok-s", "1000"]) == 0
    out = capsys.readouterr().out
    assert "5 draft tokens" not in out
    assert "from 4 speculative tokens" in out
