"""Logs of servers *without* speculative decoding, as SGLang 0.5.23 and vLLM 0.33 write them.

The lines follow the engines' own printing code: SGLang's scheduler metrics reporter builds a
decode line as ``Decode batch, #running-req: N, `` + the pool's usage parts + (only while
speculating) the accept fields + ``cuda graph: B, gen throughput (token/s): X.XX, #queue-req:
N``, and logs its arguments as ``server_args={...}`` (the resolved fields' dict); vLLM's
``LoggingStatLogger`` writes ``Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation
throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%,
Prefix cache hit rate: %.1f%%`` every 10 seconds, and its engine core logs the config it was
built with (``speculative_config=None`` without speculation).

Throughput follows a curve with a deterministic wobble of a few percent, so a learned curve can
be checked against the one that went in.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

T0 = datetime(2026, 3, 2, 9, 0, 0)
WOBBLE = 0.03  # the largest relative deviation of one window from the curve


def tok_s_at(curve: Sequence[tuple[int, float]], running: int) -> float:
    """The curve's throughput at ``running`` (piecewise linear, clamped), as the engine ran."""
    if running <= curve[0][0]:
        return curve[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if running <= x1:
            return y0 + (y1 - y0) * (running - x0) / (x1 - x0)
    return curve[-1][1]


def _wobble(index: int) -> float:
    """A deterministic factor in [1 - WOBBLE, 1 + WOBBLE] that averages out over windows."""
    return 1 + WOBBLE * math.sin(index * 1.7)


def sglang_plain(loads: Sequence[tuple[int, int]], curve: Sequence[tuple[int, float]]) -> str:
    """An SGLang 0.5.23 log of a TP1 server without speculation: ``(running, windows)`` loads in
    order, one decode line every 4 s."""
    args = {
        "model_path": "moonshotai/Kimi-K2.5",
        "tp_size": 1,
        "dp_size": 1,
        "decode_log_interval": 40,
        "enable_metrics": True,
        "speculative_algorithm": None,
        "speculative_draft_model_path": None,
        "disable_cuda_graph": False,
    }
    lines = [f"[{_sglang_time(0)}] server_args={args!r}"]
    index = 0
    for running, windows in loads:
        for _ in range(windows):
            index += 1
            tok_s = tok_s_at(curve, running) * _wobble(index)
            lines.append(
                f"[{_sglang_time(30 + 4 * index)}] Decode batch, #running-req: {running}, "
                f"#token: {running * 900}, token usage: {min(running / 600, 0.99):.2f}, "
                f"cuda graph: True, gen throughput (token/s): {tok_s:.2f}, #queue-req: 0"
            )
    return "\n".join(lines) + "\n"


def vllm_plain(loads: Sequence[tuple[int, int]], curve: Sequence[tuple[int, float]]) -> str:
    """A vLLM 0.33 log of a server without speculation: an interval line every 10 s."""
    lines = [
        "(EngineCore_DP0 pid=412) INFO 03-02 09:00:00 [core.py:140] Initializing a V1 LLM "
        "engine (v0.33.0) with config: model='moonshotai/Kimi-K2.5', speculative_config=None, "
        "tokenizer='moonshotai/Kimi-K2.5', enforce_eager=False"
    ]
    index = 0
    for running, windows in loads:
        for _ in range(windows):
            index += 1
            tok_s = tok_s_at(curve, running) * _wobble(index)
            at = (T0 + timedelta(seconds=30 + 10 * index)).strftime("%m-%d %H:%M:%S")
            lines.append(
                f"(APIServer pid=401) INFO {at} [loggers.py:257] Engine 000: Avg prompt "
                f"throughput: 812.4 tokens/s, Avg generation throughput: {tok_s:.1f} tokens/s, "
                f"Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%, "
                "Prefix cache hit rate: 12.0%"
            )
    return "\n".join(lines) + "\n"


def _sglang_time(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
