"""vLLM's dynamic speculative decoding (``num_speculative_tokens_per_batch_size``): each window
is judged by the speculative tokens its batch size drafts, 0 being drafting off.

Lines are written from vLLM 0.33's formats: the API server's ``non-default args`` line
(``entrypoints/common/startup.py``), the engine's configuration line, the stats logger's
engine line and ``SpecDecoding metrics`` line (``v1/spec_decode/metrics.py``); with k = 0 no
draft is made, so the scheduler makes no speculation stats and no spec line follows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config import TargetConfig
from exporter.engines.record import scheduled_steps
from exporter.engines.vllm import speculation_schedule
from exporter.exposition.landing import landing_page
from exporter.state.feed import LogFeed
from exporter.state.target_state import TargetState
from exporter.target import Target
from tests.support.files import write_log
from tests.support.metrics import Clock, render

SCHEDULE = [[1, 8, 3], [9, 63, 1], [64, 1024, 0]]
ARGS = (
    "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: {'model': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'speculative_config': {'method': 'eagle3', 'model': "
    "'yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', 'num_speculative_tokens': 3, "
    f"'num_speculative_tokens_per_batch_size': {SCHEDULE}}}, 'api_key': '***'}}"
)
START = (
    "(EngineCore_DP0 pid=88) INFO 12-01 10:00:05 [core.py:77] Initializing a V1 LLM engine "
    "(v0.33.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config="
    "SpeculativeConfig(method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', "
    "num_spec_tokens=3), tensor_parallel_size=1, enforce_eager=False, seed=0"
)


def engine(second: int, running: int, tput: float) -> str:
    return (
        f"(APIServer pid=1) INFO 12-01 10:{second // 60:02d}:{second % 60:02d} [loggers.py:271] "
        f"Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: "
        f"{tput:.1f} tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: "
        "41.3%, Prefix cache hit rate: 12.0%"
    )


def spec(second: int) -> str:
    """Three speculative tokens, 2.71 accepted a round on average."""
    return (
        f"(APIServer pid=1) INFO 12-01 10:{second // 60:02d}:{second % 60:02d} [metrics.py:101] "
        "SpecDecoding metrics: Mean acceptance length: 2.71, Accepted throughput: 1026.00 "
        "tokens/s, Drafted throughput: 1800.00 tokens/s, Accepted: 10260 tokens, Drafted: "
        "18000 tokens, Per-position acceptance rate: 0.780, 0.560, 0.370, Avg Draft "
        "acceptance rate: 57.0%"
    )


def test_the_schedule_is_read_from_the_non_default_args_line() -> None:
    message = ARGS.split("] ", 1)[1]
    assert speculation_schedule(message) == ((1, 8, 3), (9, 63, 1), (64, 1024, 0))
    assert speculation_schedule(message.replace("[[1, 8, 3]", "[[1, 8, 'x']")) is None


@pytest.mark.parametrize(("batch", "steps"), [(1, 3), (8, 3), (9, 1), (63, 1), (64, 0), (5000, 0)])
def test_the_steps_of_a_batch_size_follow_vllms_lookup(batch: int, steps: int) -> None:
    assert scheduled_steps(((1, 8, 3), (9, 63, 1), (64, 1024, 0)), batch, 3) == steps


def test_gaps_carry_the_previous_count_and_the_configured_count_caps() -> None:
    schedule = ((1, 16, 5), (32, 128, 2))
    assert scheduled_steps(schedule, 20, 4) == 4  # 5, capped by num_speculative_tokens 4
    assert scheduled_steps(((4, 8, 2),), 2, 3) == 0  # before the first range: none


def test_busy_windows_of_a_dynamic_schedule_are_drafting_off() -> None:
    """At 96 running the schedule drafts nothing: engine lines alone, counted as off."""
    target = Target(TargetConfig(name="node", engine="vllm"), TargetState("node"), None)
    feed = LogFeed(target.state, engine="vllm")
    lines = [ARGS, START]
    lines += [line for i in range(4) for line in (engine(10 + 10 * i, 4, 310.0), spec(11 + 10 * i))]
    lines += [engine(60 + 10 * i, 96, 2100.0) for i in range(6)]
    feed.on_lines([line.encode() for line in lines])  # the last engine line is still held
    config = target.state.tracker.config
    assert config.schedule == ((1, 8, 3), (9, 63, 1), (64, 1024, 0))
    assert config.adaptive
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    assert scrape.value("specwatch_drafting_off_windows_total", target="node") == 5
    assert scrape.value("specwatch_finding", target="node") is None


def test_positions_past_what_the_schedule_drafts_are_not_judged() -> None:
    """At 20 running the schedule drafts one token: vLLM still lists three positions (the
    later ones 0.000, never drafted), which must not read as positions that do not pay."""
    one_token = (
        "SpecDecoding metrics: Mean acceptance length: 1.78, Accepted throughput: 600.00 "
        "tokens/s, Drafted throughput: 770.00 tokens/s, Accepted: 6006 tokens, Drafted: 7700 "
        "tokens, Per-position acceptance rate: 0.780, 0.000, 0.000, Avg Draft acceptance rate: "
        "78.0%"
    )
    target = Target(TargetConfig(name="node", engine="vllm"), TargetState("node"), None)
    feed = LogFeed(target.state, engine="vllm")
    lines = [ARGS, START]
    for i in range(6):
        lines.append(engine(10 + 10 * i, 20, 900.0))
        lines.append(
            f"(APIServer pid=1) INFO 12-01 10:00:{11 + 10 * i:02d} [metrics.py:101] {one_token}"
        )
    lines.append(engine(90, 20, 900.0))
    feed.on_lines([line.encode() for line in lines])
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    assert scrape.value("specwatch_drafting_off_windows_total", target="node") == 0
    assert scrape.values("specwatch_finding", target="node") == []


def collapsed_spec(second: int) -> str:
    """Three speculative tokens a round, none accepted."""
    return (
        f"(APIServer pid=1) INFO 12-01 10:{second // 60:02d}:{second % 60:02d} [metrics.py:101] "
        "SpecDecoding metrics: Mean acceptance length: 1.00, Accepted throughput: 0.00 "
        "tokens/s, Drafted throughput: 1800.00 tokens/s, Accepted: 0 tokens, Drafted: 18000 "
        "tokens, Per-position acceptance rate: 0.000, 0.000, 0.000, Avg Draft acceptance rate: "
        "0.0%"
    )


def mostly_busy(spec_line: Callable[[int], str]) -> list[str]:
    """Two quiet windows that draft, then six busy ones the schedule turns drafting off in."""
    lines = [ARGS, START]
    second = 60
    for _ in range(5):
        for _ in range(2):
            lines += [engine(second, 4, 160.0), spec_line(second)]
            second += 10
        for _ in range(6):
            lines.append(engine(second, 96, 2950.0))
            second += 10
    return lines


def test_a_drafter_that_accepts_nothing_where_the_schedule_drafts_is_collapsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's schedule turns drafting off by batch size, not by acceptance: its quiet windows
    are not probes of a drafter given up on, but every round at that load, slowed for nothing."""
    log = write_log(tmp_path, mostly_busy(collapsed_spec))
    assert main(["doctor", "--log-file", log, "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert [v["code"] for v in report["verdicts"]] == ["accept_length_collapsed"]
    assert "adaptive_drafter_given_up" not in {f["code"] for f in report["findings"]}
    healthy = write_log(tmp_path, mostly_busy(spec))
    assert main(["doctor", "--log-file", healthy, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdicts"] == []


def test_the_daemon_exports_the_floor_where_the_schedule_drafts() -> None:
    """So the collapse and low rules judge those windows; adaptive's probes alone hide it."""
    target = Target(TargetConfig(name="node"), TargetState("node"), None)
    LogFeed(target.state, engine="vllm").on_lines(
        [line.encode() for line in mostly_busy(collapsed_spec)]
    )
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    assert scrape.value("specwatch_accept_length_floor", target="node") == 1.8
    assert {s for s in scrape.names() if "finding" in s} <= {"specwatch_finding"}
    assert scrape.value("specwatch_finding", code="adaptive_drafter_given_up") is None


def test_drafting_off_is_named_by_vllms_schedule_not_adaptive_speculation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """'Adaptive' is SGLang's word for turning drafting off by acceptance; a vLLM node turns it
    off by its num_speculative_tokens_per_batch_size table."""
    log = write_log(tmp_path, mostly_busy(spec))
    assert main(["report", log]) == 0
    out = capsys.readouterr().out
    assert "speculation off (per-batch-size schedule) in 30 of 40 decode windows" in out
    assert "adaptive" not in out.split("\n\n")[0]


def test_the_landing_page_names_vllms_schedule_for_drafting_off() -> None:
    target = Target(TargetConfig(name="node"), TargetState("node"), None)
    LogFeed(target.state, engine="vllm").on_lines([line.encode() for line in mostly_busy(spec)])
    page = landing_page([target], stale_after=3600).decode()
    assert "speculation off (per-batch-size schedule): plain decoding at this load" in page


def test_far_below_the_baseline_with_k_0_names_vllms_cuda_graph_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's dynamic speculation serves PIECEWISE CUDA graphs at every batch size, k = 0 too:
    a busy node far below the baseline is told vLLM's remedy, not SGLang's; a little below,
    nothing."""
    log = write_log(tmp_path, mostly_busy(spec))
    assert main(["doctor", "--log-file", log, "--json", "--baseline-curve", "1:82,96:4900"]) == 1
    [verdict] = json.loads(capsys.readouterr().out)["verdicts"]
    assert verdict["code"] == "drafting_off_below_baseline"
    # Judged on its newest 5 minutes of windows: 26 of their 34 had drafting off.
    assert "(0.60x), with drafting off (per-batch-size schedule) in 26 of 34" in verdict["seen"]
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in verdict["fix"]
    assert "num_speculative_tokens_per_batch_size" in verdict["fix"]
    assert "SGLANG" not in verdict["fix"]
    assert main(["doctor", "--log-file", log, "--json", "--baseline-curve", "1:82,96:3100"]) == 0
    assert json.loads(capsys.readouterr().out)["verdicts"] == []
