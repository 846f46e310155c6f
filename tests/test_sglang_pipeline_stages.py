"""SGLang with pipeline parallelism (``--pp-size``), from its log.

Every stage's first TP rank prints the stats lines (``is_stats_logging_rank`` in SGLang's
``metrics_collector.py``: ``attn_tp_rank == 0``, whatever the stage) under a prefix naming its
stage (``configure_scheduler_process``: `` DP{d} PP{p} ... TP{t}``). Every stage processes the
same micro-batches, the last stage's accepted drafts relayed to the others, so their lines
repeat one batch's figures: the first stage's count, once. Weights are loaded per stage (the
draft only on the last one), so a stage's loads are its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.analysis.node import NodeMoments
from exporter.engines.record import LogLine, StatsRecord
from exporter.engines.sglang import classify
from exporter.state.runs import RunTracker
from tests.support.daemon import doctor
from tests.support.loglines import decode_line, stamp, startup

CURVE = "1:82,48:1500,128:2370"
SERVER_ARGS = (
    "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=2, "
    "pp_size=2, speculative_algorithm='EAGLE', "
    "speculative_draft_model_path='lmsys/sglang-EAGLE-LLaMA3-Instruct-8B', "
    "speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)"
)


def weights(seconds: float, ranks: str, model_class: str) -> str:
    """``model_runner.py``'s line at the end of a weight load, as each TP rank prints it."""
    return (
        f"{stamp(seconds, ranks)} Load weight end. elapsed=12.41 s, type={model_class}, "
        "avail mem=61.20 GB, mem usage=8.03 GB."
    )


def read(line: str) -> StatsRecord | LogLine:
    read = classify(line)
    assert isinstance(read, StatsRecord | LogLine), read
    return read


def test_the_stage_is_read_from_the_prefix() -> None:
    record = read(decode_line(3.0, stamp=stamp(60, "DP1 PP1 TP0")))
    assert (record.dp_rank, record.pp_rank, record.tp_rank) == (1, 1, 0)
    logged = read(weights(5, "PP1", "LlamaForCausalLM"))  # tp_size 1: no TP part
    assert (logged.dp_rank, logged.pp_rank, logged.tp_rank) == (None, 1, None)
    alone = read(decode_line(3.0, stamp=stamp(60, "TP3")))
    assert alone.pp_rank is None


def test_each_moment_of_a_pipelined_node_is_counted_once() -> None:
    """Both stages print every interval's line with the same figures: one moment each."""
    lines = [
        read(decode_line(3.0, running=24, tput=300.0, stamp=stamp(second, f"PP{p} TP0")))
        for second in (60, 62, 64)
        for p in (0, 1)
    ]
    records = [line for line in lines if isinstance(line, StatsRecord)]
    moments = NodeMoments().add(records, [60.0, 60.0, 62.0, 62.0, 64.0, 64.0])
    assert [(m.running, m.throughput) for m in moments] == [(24, 300.0)] * 3


def test_dp_ranks_of_a_pipelined_node_are_summed_once_a_moment() -> None:
    lines = [
        read(decode_line(3.0, running=20 + d, tput=300.0, stamp=stamp(s, f"DP{d} PP{p} TP0")))
        for s in (60, 62, 64)
        for d in (0, 1)
        for p in (0, 1)
    ]
    records = [line for line in lines if isinstance(line, StatsRecord)]
    node = NodeMoments()
    moments = node.add(records, [60.0] * 4 + [62.0] * 4 + [64.0] * 4)
    closing = node.flush()
    assert closing is not None
    assert [(m.running, m.throughput) for m in [*moments, closing]] == [(41, 600.0)] * 3


def test_the_last_stage_loading_its_draft_is_not_confused_with_the_first_stage() -> None:
    """Stages load at their own pace: the first stage's target may finish after the last
    stage's target and draft, and is no second load of the same scheduler."""
    tracker = RunTracker()
    lines = [
        f"{stamp(0)} {SERVER_ARGS}",
        weights(10, "PP1 TP0", "LlamaForCausalLM"),
        weights(10, "PP1 TP1", "LlamaForCausalLM"),
        weights(14, "PP1 TP0", "LlamaForCausalLMEagle"),
        weights(14, "PP1 TP1", "LlamaForCausalLMEagle"),
        weights(15, "PP0 TP0", "LlamaForCausalLM"),
        weights(15, "PP0 TP1", "LlamaForCausalLM"),
    ]
    for line in lines:
        logged = read(line)
        assert isinstance(logged, LogLine)
        tracker.observe(logged)
    assert tracker.config.target_architecture == "LlamaForCausalLM"
    assert tracker.config.draft_architecture == "LlamaForCausalLMEagle"


def pipelined_log(tmp_path: Path, accept_len: float) -> Path:
    """A --pp-size 2 node at 48 running requests, 24 in each micro-batch, decoding 900 tok/s:
    slower than the 1,500 tok/s of the baseline at 48, faster than its 776 at 24."""
    lines = [line.replace("ServerArgs(", "ServerArgs(pp_size=2, ") for line in startup()]
    for second in range(60, 200, 4):
        lines += [
            decode_line(accept_len, running=24, tput=900.0, stamp=stamp(second, f"PP{p} TP0"))
            for p in (0, 1)
        ]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    return log


@pytest.mark.e2e
def test_doctor_holds_no_pipelined_node_to_the_baseline_at_a_micro_batch_load(
    tmp_path: Path,
) -> None:
    run = doctor("--log-file", str(pipelined_log(tmp_path, 3.1)), "--baseline-curve", CURVE)
    assert "speed is not compared with a baseline" in run.stdout
    assert "faster than the baseline" not in run.stdout
    assert run.returncode == 0


@pytest.mark.e2e
def test_a_pipelined_node_whose_drafter_collapsed_is_still_critical(tmp_path: Path) -> None:
    run = doctor("--log-file", str(pipelined_log(tmp_path, 1.0)), "--baseline-curve", CURVE)
    assert "collapsed" in run.stdout
    assert run.returncode == 3
