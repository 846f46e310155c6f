"""vLLM in every era gets an accept length, and ``doctor`` and ``report`` judge it.

The lines are written here from vLLM's own logging code of each release:

- V0 (0.6.3, ``vllm/engine/metrics.py``): ``Avg prompt throughput: %.1f tokens/s, Avg
  generation throughput: %.1f tokens/s, Running: %d reqs, Swapped: %d reqs, Pending: %d reqs,
  GPU KV cache usage: %.1f%%, CPU KV cache usage: %.1f%%.`` then ``Speculative metrics: Draft
  acceptance rate: %.3f, System efficiency: %.3f, Number of speculative tokens: k, Number of
  accepted tokens: N, Number of draft tokens: N, Number of emitted tokens: N.``, the totals
  since the engine started; its start line ``Initializing an LLM engine (v0.6.3) with config:
  model=..., speculative_config=SpeculativeConfig(draft_model='...', num_spec_tokens=k), ...``.
- 0.8.3 and 0.8.4 (``vllm/v1/spec_decode/metrics.py``): ``SpecDecoding metrics: Draft
  acceptance rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens``, no rounds, no mean.
- 0.8.5: ``Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, Accepted: ..., Drafted:
  ..., Per-position acceptance rate: ...``, where the mean is accepted / drafts, without the
  bonus token (0.9 added it).
- today (0.33): ``Mean acceptance length: %.2f`` is 1 + accepted / drafts, and a round near a
  request's end proposes fewer than k tokens.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.engines.record import StatsRecord
from exporter.engines.vllm import VllmParser
from tests.support.files import write_log

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
DRAFT = "yuhuili/EAGLE-LLaMA3-Instruct-8B"


def v0_log(accepted_per_interval: int, intervals: int = 8, k: int = 4) -> list[str]:
    """vLLM 0.6.3 serving with a draft model: its lifetime totals grow by 4 x 300 drafted
    tokens and ``accepted_per_interval`` accepted ones each 5-second interval."""
    lines = [
        "INFO 12-01 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with "
        "config: model='meta-llama/Meta-Llama-3-8B-Instruct', speculative_config="
        f"SpeculativeConfig(draft_model='{DRAFT}', num_spec_tokens={k}), "
        "tokenizer='meta-llama/Meta-Llama-3-8B-Instruct', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, enforce_eager=False, seed=0",
    ]
    drafted = accepted = 0
    for i in range(intervals):
        at = f"12-01 10:01:{5 * i:02d}"
        drafted += k * 300
        accepted += accepted_per_interval
        emitted = accepted + 300 * (i + 1)
        lines += [
            f"INFO {at} metrics.py:351] Avg prompt throughput: 512.3 tokens/s, Avg generation "
            "throughput: 640.0 tokens/s, Running: 16 reqs, Swapped: 0 reqs, Pending: 0 reqs, "
            "GPU KV cache usage: 22.4%, CPU KV cache usage: 0.0%.",
            f"INFO {at} metrics.py:367] Speculative metrics: Draft acceptance rate: "
            f"{accepted / drafted:.3f}, System efficiency: {emitted / (300 * (i + 1) * 5):.3f}, "
            f"Number of speculative tokens: {k}, Number of accepted tokens: {accepted}, "
            f"Number of draft tokens: {drafted}, Number of emitted tokens: {emitted}.",
        ]
    return lines


def v1_log(spec_body: str, version: str = "0.8.4", k: int = 3, intervals: int = 6) -> list[str]:
    """A V1 engine of ``version`` logging ``spec_body`` after every engine line."""
    lines = [
        f"INFO 12-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v{version}) with "
        "config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config="
        f"SpeculativeConfig(method='eagle', model='{DRAFT}', num_spec_tokens={k}), "
        "tokenizer='meta-llama/Llama-3.1-8B-Instruct', enforce_eager=False, seed=None",
    ]
    for i in range(intervals):
        at = f"12-01 10:01:{10 * i:02d}"
        lines += [
            f"INFO {at} [loggers.py:111] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
            "Avg generation throughput: 1210.0 tokens/s, Running: 32 reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
            f"INFO {at} [metrics.py:82] SpecDecoding metrics: {spec_body}",
        ]
    return lines


def judged(
    capsys: pytest.CaptureFixture[str], lines: list[str], tmp: Path
) -> tuple[int, dict[str, Any]]:
    log = write_log(tmp, lines)
    code = main(["doctor", "--log-file", log, "--json"])
    doctor = json.loads(capsys.readouterr().out)
    assert main(["report", log, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # doctor and report read the same run the same way
    assert [v["code"] for v in doctor["verdicts"]] == [v["code"] for v in report["verdicts"]]
    assert doctor["run"]["accept_length"] == report["runs"][-1]["accept_length"]
    return code, report


def verdicts(report: dict[str, Any]) -> list[str]:
    return [v["code"] for v in report["verdicts"]]


def test_v0_drafter_accepting_nothing_is_collapsed_from_its_lifetime_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = judged(capsys, v0_log(accepted_per_interval=0), tmp_path)
    assert code == 3
    assert verdicts(report) == ["accept_length_collapsed"]
    # The first line's totals reach back to an unknown start: its 7 successors are windows.
    assert report["runs"][-1]["accept_length"] == 1.0
    assert report["accept_length"]["windows"] == 7


def test_v0_healthy_drafter_differences_of_totals_give_each_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 480 accepted of 300 rounds each interval: 1 + 480 / 300 = 2.6
    code, report = judged(capsys, v0_log(accepted_per_interval=480), tmp_path)
    assert code == 0
    assert verdicts(report) == []
    assert report["accept_length"]["median"] == 2.6
    assert report["config"]["num_draft_tokens"] == 5  # 4 speculative tokens, 5 verified


def test_v0_engine_restart_resets_the_totals_without_a_negative_window() -> None:
    parser = VllmParser(now=NOW)
    first, second = v0_log(300, intervals=3), v0_log(300, intervals=2)
    records = [r for line in first + second for r in parser.feed(line)]
    lengths = [r.accept_length for r in records if isinstance(r, StatsRecord) and r.accept_length]
    assert lengths == [2.0, 2.0, 2.0]  # 2 from the first start, 1 after the restart


def test_0_8_4_line_without_a_mean_gets_one_from_its_counts_and_k(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 60 accepted of 600 drafted with k = 3: 200 rounds, 1 + 60 / 200 = 1.30, below EAGLE's 1.8
    body = "Draft acceptance rate: 10.0%, Accepted: 60 tokens, Drafted: 600 tokens"
    code, report = judged(capsys, v1_log(body), tmp_path)
    assert code == 1
    assert verdicts(report) == ["accept_length_low"]
    assert report["runs"][-1]["accept_length"] == pytest.approx(1.3)


def test_0_8_5_mean_without_the_bonus_token_is_read_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0.8.5 logs accepted / drafts = 1.20; the per-position rates sum to it; length is 2.20
    body = (
        "Draft acceptance rate: 40.0%, Mean acceptance length: 1.20, Accepted: 2400 tokens, "
        "Drafted: 6000 tokens, Per-position acceptance rate: 0.600, 0.400, 0.200"
    )
    code, report = judged(capsys, v1_log(body, version="0.8.5"), tmp_path)
    assert code == 0
    assert verdicts(report) == []
    assert report["runs"][-1]["accept_length"] == pytest.approx(2.2)


def test_rounds_proposing_fewer_than_k_are_counted_from_the_per_position_rates() -> None:
    """191 rounds, 516 tokens drafted (k = 3, some rounds short), 214 accepted: vLLM prints
    1 + 214 / 191 = 2.12; drafted / k would claim 172 rounds and 2.24."""
    rates = (0.660, 0.330, 0.130)  # per round: 126, 63 and 25 of 191 accepted at each position
    body = (
        "Mean acceptance length: 2.12, Accepted throughput: 21.40 tokens/s, Drafted throughput: "
        "51.60 tokens/s, Accepted: 214 tokens, Drafted: 516 tokens, Per-position acceptance "
        f"rate: {', '.join(f'{r:.3f}' for r in rates)}, Avg Draft acceptance rate: 41.5%"
    )
    parser = VllmParser(now=NOW)
    [record] = parser.feed(f"INFO 12-01 10:01:00 [metrics.py:120] SpecDecoding metrics: {body}")
    assert isinstance(record, StatsRecord) and record.draft_counts is not None
    assert record.draft_counts.drafts == 191
    assert record.accept_length == 2.12
    # Every round proposing k tokens: drafted / k, which the rates agree with.
    full = body.replace("Drafted: 516", "Drafted: 573")
    [record] = parser.feed(f"INFO 12-01 10:01:10 [metrics.py:120] SpecDecoding metrics: {full}")
    assert isinstance(record, StatsRecord) and record.draft_counts is not None
    assert record.draft_counts.drafts == 191


def test_kv_cache_usage_on_a_cpu_backend_is_read() -> None:
    line = (
        "INFO 12-01 10:01:00 [loggers.py:271] Engine 000: Avg prompt throughput: 12.0 tokens/s, "
        "Avg generation throughput: 30.5 tokens/s, Running: 2 reqs, Waiting: 0 reqs, "
        "CPU KV cache usage: 17.1%, Prefix cache hit rate: 0.0%"
    )
    parser = VllmParser(now=NOW)
    parser.feed(line)
    [record] = parser.flush()
    assert isinstance(record, StatsRecord)
    assert record.token_usage == pytest.approx(0.171)
    # V0's CPU figure is its swap space beside the GPU's cache: the GPU's is the usage.
    parser.feed(v0_log(0, intervals=1)[1])
    [record] = parser.flush()
    assert isinstance(record, StatsRecord) and record.token_usage == pytest.approx(0.224)


def test_windows_without_an_accept_length_are_not_judged_never_nothing_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 0.8.4 log whose engine configuration line rotated away: no k, no accept length."""
    body = "Draft acceptance rate: 10.0%, Accepted: 60 tokens, Drafted: 600 tokens"
    log = write_log(tmp_path, v1_log(body)[1:])
    assert main(["doctor", "--log-file", log, "--baseline-tok-s", "800"]) == 1
    out = capsys.readouterr().out
    assert "nothing wrong" not in out
    assert (
        "problem: log: speculation not judged: 6 decode windows in the newest server run "
        "and none with an accept length" in out
    )
    assert main(["report", log]) == 0
    assert capsys.readouterr().out.startswith("Not judged: 6 decode windows")


def test_two_windows_an_hour_old_are_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = (
        "Mean acceptance length: 2.40, Accepted throughput: 98.00 tokens/s, Drafted throughput: "
        "210.00 tokens/s, Accepted: 980 tokens, Drafted: 2100 tokens, Per-position acceptance "
        "rate: 0.600, 0.500, 0.300, Avg Draft acceptance rate: 46.7%"
    )
    log = Path(write_log(tmp_path, v1_log(body, intervals=2)))
    hour_ago = time.time() - 3600
    os.utime(log, (hour_ago, hour_ago))
    assert main(["doctor", "--log-file", str(log), "--baseline-tok-s", "600"]) == 1
    out = capsys.readouterr().out
    assert "nothing wrong" not in out and "faster than the baseline" not in out
    assert "not judged: 2 decode windows, the newest 60 min ago; at least 3 are needed" in out
    # Nor is the draft-token count sized from them.
    assert "draft tokens:" not in out and "would help" not in out


def test_vllm_without_cuda_graphs_is_told_in_vllms_own_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = (
        "Mean acceptance length: 2.60, Accepted throughput: 96.00 tokens/s, Drafted throughput: "
        "180.00 tokens/s, Accepted: 960 tokens, Drafted: 1800 tokens, Per-position acceptance "
        "rate: 0.700, 0.550, 0.350, Avg Draft acceptance rate: 53.3%"
    )
    lines = v1_log(body, version="0.33.0")
    lines[0] = lines[0].replace("enforce_eager=False", "enforce_eager=True")
    code, report = doctor_json_of(capsys, write_log(tmp_path, lines))
    assert code == 1
    finding = next(f for f in report["findings"] if f["code"] == "cuda_graph_disabled")
    assert finding["seen"] == "enforce_eager=True in vLLM's engine configuration."
    assert finding["fix"] == "Restart vLLM without --enforce-eager."
    assert "--disable-cuda-graph" not in json.dumps(report)


def doctor_json_of(capsys: pytest.CaptureFixture[str], log: str) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--log-file", log, "--json"])
    return code, json.loads(capsys.readouterr().out)


OLD_BODY = "Draft acceptance rate: 20.0%, Accepted: 180 tokens, Drafted: 900 tokens"
# 0.8.5's mean is accepted / drafts, 180 / 300 (the bonus token left out).
BODY_0_8_5 = (
    "Draft acceptance rate: 20.0%, Mean acceptance length: 0.60, Accepted: 180 tokens, "
    "Drafted: 900 tokens, Per-position acceptance rate: 0.400, 0.133, 0.067"
)
NEW_BODY = (
    "Mean acceptance length: 1.60, Accepted throughput: 18.00 tokens/s, Drafted throughput: "
    "90.00 tokens/s, Accepted: 180 tokens, Drafted: 900 tokens, Per-position acceptance rate: "
    "0.400, 0.133, 0.067, Avg Draft acceptance rate: 20.0%"
)


@pytest.mark.parametrize(
    ("lines", "baseline", "per_batch_size"),
    [
        (v0_log(accepted_per_interval=180, k=3), "688", False),
        (v1_log(OLD_BODY, version="0.8.4"), "1300", False),
        (v1_log(BODY_0_8_5, version="0.8.5"), "1300", False),
        (v1_log(NEW_BODY, version="0.11.0"), "1300", True),
    ],
    ids=["v0", "0.8.4", "0.8.5", "0.11"],
)
def test_draft_step_advice_offers_a_per_batch_size_schedule_only_to_a_vllm_that_has_one(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lines: list[str],
    baseline: str,
    per_batch_size: bool,
) -> None:
    """At 1.6 tokens a round of 3 drafted, 0.93x the baseline: one draft token pays best."""
    log = write_log(tmp_path, lines)
    assert main(["report", log, "--json", "--baseline-tok-s", baseline]) == 0
    schedule = json.loads(capsys.readouterr().out)["schedule"]
    assert ("num_speculative_tokens_per_batch_size" in schedule) is per_batch_size
    if not per_batch_size:
        assert "a per-batch-size schedule needs a newer vLLM" in schedule
        assert "every load: 1 (num_speculative_tokens in --speculative-config)" in schedule
