"""SGLang 0.5.23 log lines for the speculative setups beyond a fixed EAGLE tree: other
algorithms, adaptive draft steps (``--speculative-adaptive``), the newer decode fields.

Written from SGLang's own code: ``ServerArgs`` is logged as its repr; the adaptive lines are
``AdaptiveSpeculativeParams.__init__``'s, ``AdaptiveStepSlot._apply_target_steps``' and
``EAGLEWorkerV2.apply_runtime_state``'s; the decode line is ``report_decode_stats``'.
"""

from __future__ import annotations

from tests.support.loglines import stamp


def server_args(
    algorithm: str,
    *,
    draft_path: str | None = None,
    steps: int = 3,
    topk: int = 1,
    draft_tokens: int = 4,
    adaptive: bool = False,
    at: float = 0,
) -> str:
    draft = "None" if draft_path is None else f"'{draft_path}'"
    return (
        f"{stamp(at)} server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3.2', "
        "tokenizer_mode='auto', api_key='sk-live-0123456789', tp_size=8, dp_size=1, "
        "log_level='info', decode_log_interval=40, max_running_requests=128, "
        f"enable_metrics=True, speculative_algorithm='{algorithm}', "
        f"speculative_draft_model_path={draft}, speculative_num_steps={steps}, "
        f"speculative_eagle_topk={topk}, speculative_num_draft_tokens={draft_tokens}, "
        f"speculative_adaptive={adaptive}, speculative_adaptive_config=None, "
        "cuda_graph_max_bs=128, disable_cuda_graph=False, host='0.0.0.0')"
    )


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
