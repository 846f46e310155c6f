"""The startup sequence of an SGLang server with speculative decoding (Feb 2026 strings).

specwatch reads the algorithm, the draft architecture and the CUDA-graph settings from these
lines before the first request is served (the eagle-flag scenario), so they must carry the
scenario's flags exactly where SGLang puts them: ``server_args=ServerArgs(...)`` from the main
process, then each scheduler's target and draft ``Load weight end.`` lines.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from exporter.engines.sglang import DECODE_LOG_INTERVAL
from exporter.engines.sglang_sim.eras import Era, PrefillBatch
from exporter.engines.sglang_sim.lines import READY, LogEvent, access
from exporter.engines.simulation import Deployment

MODEL_PATH = "moonshotai/Kimi-K2.5"
TARGET_ARCHITECTURE = "KimiK25ForConditionalGeneration"
TP_SIZE = 8
PORT = 30000
MAX_RUNNING_REQUESTS = 48  # SGLang's reset for speculative decoding when the flag is unset
MAX_TOTAL_NUM_TOKENS = 114688
CONTEXT_LEN = 262144
CHUNKED_PREFILL_SIZE = 8192
# The candidate steps of SGLang's default adaptive tier for batch size 1, which its
# initialization line lists.
ADAPTIVE_FIRST_TIER = (1, 3, 5, 7)
# NEXTN, the model's own MTP layers: SGLang rewrites it to EAGLE before its arguments are
# logged, and loads the layers from the target's checkpoint as the model's NextN class.
MTP_ALGORITHM = "EAGLE"
MTP_DRAFT_ARCHITECTURE = "DeepseekV3ForCausalLMNextN"


def _algorithm(deployment: Deployment) -> str:
    """The scenario's algorithm as SGLang's arguments show it."""
    return MTP_ALGORITHM if deployment.algorithm == "MTP" else deployment.algorithm


def _draft_class(deployment: Deployment) -> str | None:
    """The class its draft loads as: the checkpoint's, or SGLang's own for MTP layers."""
    if deployment.algorithm == "MTP":
        return MTP_DRAFT_ARCHITECTURE
    return deployment.draft_architecture


def _set_cap(deployment: Deployment) -> int | None:
    """``--max-running-requests`` as the operator gave it: unset for SGLang's own cap."""
    cap = deployment.max_running_requests
    return None if cap == MAX_RUNNING_REQUESTS else cap


def server_args(deployment: Deployment) -> str:
    """``ServerArgs.__repr__`` after post-init, in dataclass field order (abridged)."""
    fields: list[tuple[str, object]] = [
        ("model_path", MODEL_PATH),
        ("tokenizer_path", MODEL_PATH),
        ("tokenizer_mode", "auto"),
        ("load_format", "auto"),
        ("trust_remote_code", True),
        ("context_length", None),
        ("dtype", "auto"),
        ("quantization", None),
        ("served_model_name", MODEL_PATH),
        ("host", "0.0.0.0"),
        ("port", PORT),
        ("mem_fraction_static", 0.85),
        # None when unset: SGLang's scheduler lowers it to 48 for speculative decoding later.
        ("max_running_requests", _set_cap(deployment)),
        ("chunked_prefill_size", CHUNKED_PREFILL_SIZE),
        ("max_prefill_tokens", 16384),
        ("schedule_policy", "fcfs"),
        ("tp_size", TP_SIZE),
        ("pp_size", 1),
        ("dp_size", 1),
        ("ep_size", 1),
        ("random_seed", 42),
        ("log_level", "info"),
        ("log_requests", deployment.log_requests is not None),
        ("log_requests_level", 1),
        ("log_requests_format", deployment.log_requests or "text"),
        ("decode_log_interval", DECODE_LOG_INTERVAL),
        ("enable_metrics", deployment.enable_metrics),
        ("enable_metrics_for_all_schedulers", False),
        ("api_key", None),
        ("enable_dp_attention", False),
        ("speculative_algorithm", _algorithm(deployment)),
        ("speculative_draft_model_path", deployment.draft_model_path),
        ("speculative_draft_model_revision", "main"),
        ("speculative_draft_load_format", None),
        ("speculative_num_steps", deployment.num_steps),
        ("speculative_eagle_topk", deployment.eagle_topk),
        ("speculative_num_draft_tokens", deployment.num_draft_tokens),
        ("speculative_accept_threshold_single", 1.0),
        ("speculative_accept_threshold_acc", 1.0),
        ("speculative_token_map", None),
        ("speculative_attention_mode", "prefill"),
        ("speculative_adaptive", deployment.adaptive),
        ("speculative_adaptive_config", None),
        ("attention_backend", "triton"),
        ("disable_cuda_graph", deployment.disable_cuda_graph),
        ("cuda_graph_max_bs", deployment.cuda_graph_max_bs),
        ("cuda_graph_bs", None),
        ("disable_overlap_schedule", True),
        ("enable_torch_compile", False),
        ("watchdog_timeout", 300),
    ]
    body = ", ".join(f"{name}={value!r}" for name, value in fields)
    return f"server_args=ServerArgs({body})"


@dataclass(slots=True)
class _Clock:
    """Advances the startup timeline by realistic, slightly random steps."""

    rng: random.Random
    now: float

    def after(self, seconds: float) -> float:
        self.now += seconds * self.rng.uniform(0.9, 1.1)
        return self.now


def startup(
    deployment: Deployment, era: Era, rng: random.Random, offset: float, *, warm: bool
) -> list[LogEvent]:
    """Every line from launch to SGLang's ready line (``READY``), in order.

    ``warm`` is a restart with weights in the page cache: the same lines, shorter times.
    """
    clock = _Clock(rng, offset)
    scale = 0.15 if warm else 1.0
    events = []
    if deployment.max_running_requests == MAX_RUNNING_REQUESTS:
        events.append(
            LogEvent(
                clock.now,
                "Max running requests is reset to 48 for speculative decoding. You can "
                "override this by explicitly setting --max-running-requests.",
                bare=True,
            )
        )
    events.append(LogEvent(clock.after(0.4), server_args(deployment)))
    events += _schedulers(deployment, clock, scale)
    events += _http_ready(clock, rng, era)
    return events


def _per_rank(at: float, message: str) -> Iterator[LogEvent]:
    """Every TP scheduler logs its own copy; rank order within a second is not guaranteed."""
    for rank in range(TP_SIZE):
        yield LogEvent(at + rank * 0.003, message, rank=f"TP{rank}")


def _schedulers(deployment: Deployment, clock: _Clock, scale: float) -> list[LogEvent]:
    events: list[LogEvent] = []
    avail = 94.6
    events += _per_rank(clock.after(3.0 * scale), "Init torch distributed begin.")
    events += _per_rank(
        clock.after(2.4 * scale),
        f"Init torch distributed ends. elapsed={2.4 * scale:.2f} s, mem usage=0.52 GB",
    )
    events += _load_weights(clock, TARGET_ARCHITECTURE, avail, 71.20, 40.0 * scale)
    avail -= 71.20
    events += _per_rank(
        clock.after(1.1),
        f"KV Cache is allocated. #tokens: {MAX_TOTAL_NUM_TOKENS}, K size: 3.86 GB, V size: 3.86 GB",
    )
    avail -= 7.72
    events += _per_rank(clock.after(0.2), f"Memory pool end. avail mem={avail:.2f} GB")
    if not deployment.disable_cuda_graph:
        events += _capture(clock, "cuda graph", avail, 0.80, scale)
        avail -= 0.80
    draft_class = _draft_class(deployment)
    if draft_class is not None:
        events += _load_weights(clock, draft_class, avail, 0.79, 1.0 * scale)
        avail -= 0.79
    if deployment.adaptive:
        events.append(
            LogEvent(
                clock.after(0.1),
                f"AdaptiveSpeculativeParams initialized: steps={deployment.num_steps}, "
                f"candidate_steps={list(ADAPTIVE_FIRST_TIER)}",
                rank="TP0",
            )
        )
    if not deployment.disable_cuda_graph and draft_class is not None:
        events += _capture(clock, "draft cuda graph", avail, 0.41, scale)
        avail -= 0.41
        events += _capture(clock, "draft extend cuda graph", avail, 0.22, scale)
        avail -= 0.22
    events.append(
        LogEvent(
            clock.after(0.3),
            f"max_total_num_tokens={MAX_TOTAL_NUM_TOKENS}, chunked_prefill_size="
            f"{CHUNKED_PREFILL_SIZE}, max_prefill_tokens=16384, max_running_requests="
            f"{deployment.max_running_requests}, context_len={CONTEXT_LEN}, "
            f"available_gpu_mem={avail:.2f} GB",
            rank="TP0",
        )
    )
    return events


def _load_weights(
    clock: _Clock, architecture: str, avail: float, usage: float, seconds: float
) -> list[LogEvent]:
    begin = list(_per_rank(clock.after(0.3), f"Load weight begin. avail mem={avail:.2f} GB"))
    elapsed = clock.after(seconds) - begin[0].offset
    end = _per_rank(
        clock.now,
        f"Load weight end. elapsed={elapsed:.2f} s, type={architecture}, dtype=torch.bfloat16, "
        f"avail mem={avail - usage:.2f} GB, mem usage={usage:.2f} GB.",
    )
    return begin + list(end)


def _capture(clock: _Clock, what: str, avail: float, usage: float, scale: float) -> list[LogEvent]:
    begin = list(
        _per_rank(
            clock.after(0.2),
            f"Capture {what} begin. This can take up to several minutes. avail mem={avail:.2f} GB",
        )
    )
    elapsed = clock.after(6.0 * scale) - begin[0].offset
    end = _per_rank(
        clock.now,
        f"Capture {what} end. Time elapsed: {elapsed:.2f} s. mem usage={usage:.2f} GB. "
        f"avail mem={avail - usage:.2f} GB.",
    )
    return begin + list(end)


def _http_ready(clock: _Clock, rng: random.Random, era: Era) -> list[LogEvent]:
    """uvicorn start-up, the warm-up request (a 7-token prefill), then SGLang's ready line."""
    pid = rng.randint(1000, 60000)
    local = f"127.0.0.1:{rng.randint(32768, 60999)}"
    warmup = PrefillBatch(1, 7, 0, 0.0, 0, 0, 6.12)
    return [
        LogEvent(clock.after(0.5), f"INFO:     Started server process [{pid}]"),
        LogEvent(clock.after(0.01), "INFO:     Waiting for application startup."),
        LogEvent(clock.after(0.01), "INFO:     Application startup complete."),
        LogEvent(
            clock.after(0.01),
            f"INFO:     Uvicorn running on http://0.0.0.0:{PORT} (Press CTRL+C to quit)",
        ),
        access(clock.after(1.0), local, "GET /model_info", "200 OK"),
        LogEvent(clock.after(1.0), era.prefill_line(warmup), rank="TP0"),
        access(clock.after(0.2), local, "POST /generate", "200 OK"),
        LogEvent(clock.after(0.05), READY),
    ]
