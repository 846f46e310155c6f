"""Acceptance by draft position: where it stops paying, named as a speculative-token count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.analysis.breakeven import assess_positions
from tests.support.daemon import doctor
from tests.support.files import write_log

TAG = "\x1b[0;36m(APIServer pid=1)\x1b[0;0m "


def vllm_log(per_position: tuple[float, ...], windows: int = 6, tput: float = 1500.0) -> list[str]:
    """A vLLM log whose windows all show ``per_position`` (k = its length)."""
    k = len(per_position)
    drafts = 5000
    accepted = round(drafts * sum(per_position))
    rates = ", ".join(f"{rate:.3f}" for rate in per_position)
    lines = []
    for i in range(windows):
        stamp = f"05-06 06:{i // 6:02d}:{i % 6 * 10:02d}"
        lines.append(
            f"{TAG}INFO {stamp} [loggers.py:271] Engine 000: Avg prompt throughput: 900.0 "
            f"tokens/s, Avg generation throughput: {tput:.1f} tokens/s, Running: 16 reqs, "
            "Waiting: 0 reqs, GPU KV cache usage: 20.0%, Prefix cache hit rate: 40.0%"
        )
        lines.append(
            f"{TAG}INFO {stamp} [metrics.py:101] SpecDecoding metrics: Mean acceptance length: "
            f"{1 + accepted / drafts:.2f}, Accepted throughput: {accepted / 10:.2f} tokens/s, "
            f"Drafted throughput: {drafts * k / 10:.2f} tokens/s, Accepted: {accepted} tokens, "
            f"Drafted: {drafts * k} tokens, Per-position acceptance rate: {rates}, "
            f"Avg Draft acceptance rate: {100 * accepted / (drafts * k):.1f}%"
        )
    return lines


@pytest.mark.e2e
def test_acceptance_falling_off_after_position_two_advises_two_tokens(tmp_path: Path) -> None:
    log = write_log(tmp_path, vllm_log((0.80, 0.60, 0.04, 0.02, 0.01)))
    result = doctor("--log-file", log, "--json")
    report = json.loads(result.stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "draft_positions_unprofitable"]
    assert finding["severity"] == "info"
    assert "0.80, 0.60, 0.04, 0.02, 0.01" in finding["seen"]
    assert "Set the number of speculative tokens to 2 " in finding["fix"]
    # The draft length vLLM never logs as such is read off the per-position list.
    assert report["config"]["num_steps"] == 5


@pytest.mark.e2e
def test_acceptance_that_holds_up_to_the_last_position_gets_no_advice(tmp_path: Path) -> None:
    log = write_log(tmp_path, vllm_log((0.78, 0.56, 0.37)))
    report = json.loads(doctor("--log-file", log, "--json").stdout)
    assert report["findings"] == []


def test_the_cut_is_where_the_next_position_earns_less_than_it_costs_every_round() -> None:
    # Cost 0.05 per drafted token: the third position earns 0.04 tokens per round but adds
    # 0.05 steps to every round, so two drafted tokens are fastest.
    advice = assess_positions((0.80, 0.60, 0.04, 0.02, 0.01))
    assert advice.suggested == 2
    assert advice.expected_speedup == pytest.approx(2.4 / 1.1)
    assert advice.current_speedup == pytest.approx(2.47 / 1.25)


def test_a_measured_speedup_sets_the_cost_of_a_drafted_token() -> None:
    # AL 2.5 at 1.25x the baseline: a round costs 2 steps, 1/3 step per drafted token; the
    # second position (0.5) still pays at that price, the third (0.1) does not.
    advice = assess_positions((0.9, 0.5, 0.1), speedup=1.25)
    assert advice.cost_measured
    assert advice.cost_per_draft_token == pytest.approx(1 / 3)
    assert advice.suggested == 2


def test_a_broken_drafter_is_told_no_count_pays() -> None:
    advice = assess_positions((0.01, 0.0, 0.0), speedup=0.5)
    assert advice.suggested == 0


ENGINE_START = (
    f"{TAG}INFO 05-06 05:59:00 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=SpeculativeConfig("
    "method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', num_spec_tokens=5), "
    "tokenizer='meta-llama/Llama-3.1-8B-Instruct', enforce_eager=False"
)


@pytest.mark.e2e
def test_the_draft_token_note_reads_the_measured_acceptance_as_the_finding_does(
    tmp_path: Path,
) -> None:
    """vLLM logged position 5 at 1%: the note must not say a fitted curve's 9%, nor estimate
    another speed-up than the finding for the same advice."""
    log = write_log(tmp_path, [ENGINE_START, *vllm_log((0.80, 0.60, 0.04, 0.02, 0.01))])
    report = json.loads(doctor("--log-file", log, "--baseline-tok-s", "1100", "--json").stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "draft_positions_unprofitable"]
    assert "to 2 " in finding["fix"] and "estimated 1.81x" in finding["fix"]
    [note] = [n for n in report["notes"] if n.startswith("draft tokens: ")]
    assert "measured acceptance by position: 0.80, 0.60, 0.04, 0.02, 0.01" in note
    # In vLLM's own terms, as the finding's fix: 2 speculative tokens (3 verified positions).
    assert "Fewer draft tokens would help: about 2 speculative tokens (estimated 1.81x)" in note
    assert "about 9%" not in note
    [schedule] = [n for n in report["notes"] if n.startswith("Draft steps by load")]
    assert "8-31 running: 2 (5 now, est. 1.81x)" in schedule
