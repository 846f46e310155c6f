"""Draft steps that pay per concurrency band, in the engine's own terms."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from exporter.analysis.algorithms import standard_for
from exporter.analysis.schedule import BandDrafting, advise_bands, schedule_text
from tests.support.daemon import specwatch_cmd
from tests.support.speclogs import adaptive_start, decode

SINGLE = ("1", 1, 1)
BUSY = ("64+", 64, None)


def _bands(busy_speedup: float) -> list[BandDrafting]:
    """Three steps pay at one request (1.9x); at 96 running the same acceptance is slower
    than plain decoding."""
    return [
        BandDrafting(SINGLE, 10, 0, 3.0, 1.9, None),
        BandDrafting(BUSY, 10, 0, 2.2, busy_speedup, None),
    ]


def test_a_band_where_speculation_is_slower_gets_no_draft_steps() -> None:
    single, busy = advise_bands(_bands(0.6), configured_steps=3)
    assert single.suggested == 3 and busy.suggested == 0
    assert busy.ran == 3


def test_steps_just_slower_than_plain_decoding_do_not_pay() -> None:
    """A drafter adaptive has given up on probes one step at 16 running: accept length 1.02 at
    0.97x the baseline. Plain decoding gains less than the hysteresis against churn, but steps
    that run below the baseline are never said to pay."""
    bands = [BandDrafting(("8-31", 8, 31), 10, 40, 1.02, 0.97, 1)]
    advice = advise_bands(bands, configured_steps=3)
    assert [(a.ran, a.suggested) for a in advice] == [(1, 0)]
    text = schedule_text(advice, "sglang", standard_for("EAGLE3"), "EAGLE3", True)
    assert text is not None
    assert "8-31 running: 0, speculation does not pay (1 now)" in text
    assert "pay at every load" not in text


def test_vllm_schedule_is_its_per_batch_size_table() -> None:
    text = schedule_text(
        advise_bands(_bands(0.6), 3), "vllm", standard_for("eagle3"), "EAGLE3", False
    )
    assert text is not None
    table = json.loads(text.split('"num_speculative_tokens_per_batch_size": ')[1].split(" in ")[0])
    assert table == [[1, 1, 3], [64, 4096, 0]]


def test_sglang_schedule_is_adaptive_candidate_steps_per_tier() -> None:
    text = schedule_text(
        advise_bands(_bands(0.6), 3), "sglang", standard_for("EAGLE3"), "EAGLE3", False
    )
    assert text is not None
    config = json.loads(text.split("FILE holding ")[1].rstrip("."))
    assert config == {"1": {"candidate_steps": [3]}, "64": {"candidate_steps": [0]}}


def test_ngram_advice_speaks_of_its_lookup_not_of_adaptive_tiers() -> None:
    """SGLang's adaptive speculation serves only EAGLE and EAGLE3."""
    bands = [BandDrafting(("32-63", 32, 63), 10, 0, 1.6, 1.25, None)]
    text = schedule_text(advise_bands(bands, 7), "sglang", standard_for("NGRAM"), "NGRAM", False)
    assert text is not None
    assert "--speculative-ngram-max-trie-depth" in text
    assert "candidate_steps" not in text and "train" not in text


def test_a_schedule_that_already_pays_says_so() -> None:
    bands = [BandDrafting(SINGLE, 10, 0, 3.0, 1.9, None)]
    text = schedule_text(advise_bands(bands, 3), "sglang", standard_for("EAGLE3"), "EAGLE3", False)
    assert text is not None and text.endswith("The steps it runs pay at every load measured.")


def test_bands_with_drafting_off_are_not_measured_but_listed() -> None:
    advice = advise_bands([BandDrafting(BUSY, 0, 12, None, None, None)], 3)
    assert [(a.ran, a.suggested) for a in advice] == [(0, None)]
    assert schedule_text(advice, "sglang", standard_for("EAGLE3"), "EAGLE3", True) is None


@pytest.mark.e2e
def test_report_judges_adaptive_schedule_by_band(tmp_path: Path) -> None:
    """An adaptive server that keeps 3 steps at 40 running, where they cost more than they
    yield: the report names the band and the tier config that pays."""
    lines = adaptive_start()
    lines += [decode(100 + 5 * i, 3.1, running=1, tput=156.0) for i in range(6)]
    lines += [decode(140 + 5 * i, 1.9, running=40, tput=700.0) for i in range(6)]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        specwatch_cmd("report", "--json", "--baseline-curve", "1:82,48:1500,128:2370", str(log)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    schedule = json.loads(result.stdout)["schedule"]
    assert "The server's schedule runs other steps than pay at 32-63 running" in schedule
    config = json.loads(schedule.split("FILE holding ")[1].rstrip("."))
    assert config["32"] == {"candidate_steps": [0]}


@pytest.mark.parametrize(
    ("algorithm", "flag"),
    [
        # DFLASH's block is its verify window: the drafted tokens and the target's own one.
        ("DFLASH", "--speculative-dflash-block-size 4"),
        # DSPARK's block is gamma, the drafted tokens; the window is one more.
        ("DSPARK", "--speculative-dspark-block-size 3"),
    ],
)
def test_a_block_drafters_single_count_is_its_block_size_flag(algorithm: str, flag: str) -> None:
    """SGLang forces a block drafter's draft steps to 1: its count is the block size."""
    text = schedule_text(
        advise_bands(_bands(0.6), 3), "sglang", standard_for(algorithm), algorithm, False
    )
    assert text is not None
    assert f"schedules no steps by load here: {flag};" in text
    assert "--speculative-num-steps" not in text


def test_an_engine_without_a_schedule_is_told_one_count_in_its_own_setting() -> None:
    """TensorRT-LLM drafts max_draft_len at every load: the count is in its words, not in
    another engine's flags."""
    text = schedule_text(
        advise_bands(_bands(0.6), 3), "trtllm", standard_for("EAGLE3"), "EAGLE3", True
    )
    assert text is not None
    assert "TensorRT-LLM schedules no steps by load here: " in text
    assert "draft steps (max_draft_len in speculative_config)" in text
    assert "--speculative" not in text
