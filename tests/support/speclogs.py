"""SGLang 0.5.23 log lines for the speculative setups beyond a fixed EAGLE tree: other
algorithms, adaptive draft steps (``--speculative-adaptive``), the newer decode fields.

Written from SGLang's own code: ``ServerArgs`` is logged as its resolved fields' dict
(``Engine._launch_subprocesses`` logs ``server_args.resolved_dict()``); the adaptive lines are
``AdaptiveSpeculativeParams.__init__``'s, ``AdaptiveStepSlot._apply_target_steps``' and
``EAGLEWorkerV2.apply_runtime_state``'s; the decode line is ``report_decode_stats``'.
"""

from __future__ import annotations

from tests.support.loglines import stamp


def server_args(
    algorithm: str | None,
    *,
    draft_path: str | None = None,
    steps: int = 3,
    topk: int = 1,
    draft_tokens: int = 4,
    adaptive: bool = False,
    at: float = 0,
    disaggregation: str = "null",
) -> str:
    fields = {
        "model_path": "deepseek-ai/DeepSeek-V3.2",
        "tokenizer_mode": "auto",
        "api_key": "sk-live-0123456789",
        "tp_size": 8,
        "dp_size": 1,
        "attn_dp_size": 1,
        "log_level": "info",
        "decode_log_interval": 40,
        "max_running_requests": 128,
        "enable_metrics": True,
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": draft_path,
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": draft_tokens,
        "speculative_adaptive": adaptive,
        "speculative_adaptive_config": None,
        "disaggregation_mode": disaggregation,
        "disable_cuda_graph": False,
        # CudaGraphConfig, expanded: 0.5.23 has no cuda_graph_max_bs field of its own.
        "cuda_graph_config": {
            "decode": {"backend": "full", "max_bs": 128, "bs": [1, 2, 4, 8, 16, 32, 64, 128]},
            "prefill": {"backend": "breakable", "max_bs": 2048, "bs": None},
        },
        "host": "0.0.0.0",
    }
    return f"{stamp(at)} server_args={fields}"


def adaptive_initialized(steps: int, candidates: list[int], at: float) -> str:
    return (
        f"{stamp(at, 'TP0')} AdaptiveSpeculativeParams initialized: steps={steps}, "
        f"candidate_steps={candidates}"
    )


def adaptive_updated(old: int, new: int, ema: float, at: float) -> str:
    return (
        f"{stamp(at, 'TP0')} Adaptive spec params updated: steps {old} -> {new} "
        f"(ema_accept_len={ema:.2f})"
    )


def runtime_switched(old: int, new: int, at: float) -> str:
    """The worker swapping its runtime state; adaptive states draft ``steps + 1`` tokens."""
    return (
        f"{stamp(at, 'TP0')} Switch adaptive runtime state: steps {old} -> {new}, "
        f"draft_tokens {old + 1} -> {new + 1}"
    )


def decode(
    at: float,
    accept: float,
    *,
    draft_tokens: int = 4,
    running: int = 48,
    queued: int = 0,
    tput: float = 2000.0,
    graph: str = "cuda graph",
    cap: float | None = None,
    block: float | None = None,
) -> str:
    """A TP0 decode line; its accept rate divides by the configured ``draft_tokens`` as
    SGLang does, whatever count is active."""
    rate = (accept - 1) / (draft_tokens - 1) if draft_tokens > 1 else 0.0
    extra = f"cap len: {cap:.2f}, " if cap else ""
    extra += f"block accept len: {block:.2f}, " if block else ""
    return (
        f"{stamp(at, 'TP0')} Decode batch, #running-req: {running}, #token: 81234, "
        f"token usage: 0.31, accept len: {accept:.2f}, accept rate: {rate:.2f}, {extra}"
        f"{graph}: True, gen throughput (token/s): {tput:.2f}, #queue-req: {queued}"
    )


def adaptive_start(at: float = 0) -> list[str]:
    """An EAGLE-3 server started with --speculative-adaptive and the default tiers."""
    return [
        server_args("EAGLE3", draft_path="/models/drafts/kimi-k25-eagle3", adaptive=True, at=at),
        adaptive_initialized(3, [1, 3, 5, 7], at + 40),
    ]


def healthy_adaptive(windows_off: int = 20, tput_off: float = 2040.0) -> list[str]:
    """Adaptive doing its job: 3 steps at 4 running (accept len 3.1, 320 tok/s), then the
    load rises to 96 running, the 64+ tier turns drafting off and each round yields one
    token (``accept len: 1.00``), by default at the baseline's 2,040 tok/s."""
    lines = adaptive_start()
    lines += [decode(100 + 5 * i, 3.1, running=4, tput=320.0) for i in range(6)]
    lines.append(runtime_switched(3, 0, 140))
    lines += [decode(150 + 5 * i, 1.0, running=96, tput=tput_off) for i in range(windows_off)]
    return lines


def given_up_adaptive(rounds: int = 8) -> list[str]:
    """A drafter that accepts nothing at 16 running: adaptive turns drafting off, probes one
    step now and then (accept len 1.02), and turns it off again."""
    lines = adaptive_start()
    at = 100.0
    for _ in range(rounds):
        lines += [adaptive_updated(1, 0, 0.02, at), runtime_switched(1, 0, at)]
        lines += [decode(at + 1 + 5 * i, 1.0, running=16, tput=545.0) for i in range(4)]
        at += 21
        lines += [adaptive_updated(0, 1, 0.02, at), runtime_switched(0, 1, at)]
        lines.append(decode(at + 1, 1.02, running=16, tput=520.0))
        at += 6
    return lines
