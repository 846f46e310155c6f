"""SGLang log lines and whole server logs, in SGLang's Feb 2026 line formats (and vLLM 0.33's
start and interval lines, for a log that changes engine).

Each builder writes what a real server writes (scheduler stats, startup arguments, weight
loads, CUDA graph capture), so a test feeding them to the parser or the daemon exercises the
same text a production log holds.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def decode_line(
    accept_len: float = 1.0,
    *,
    rate: float | None = None,
    running: int = 48,
    queue: int = 32,
    tput: float = 600.0,
    graph: bool = True,
    time_text: str = "2026-02-23 00:14:33",
    ranks: str = " TP0",
    stamp: str | None = None,
) -> str:
    """A decode stats line; ``rate`` defaults to that of four draft tokens, ``stamp`` to
    ``[time_text ranks]``."""
    rate = accept_len / 4 if rate is None else rate
    stamp = f"[{time_text}{ranks}]" if stamp is None else stamp
    return (
        f"{stamp} Decode batch, #running-req: {running}, #token: 6460, "
        f"token usage: 0.06, accept len: {accept_len:.2f}, accept rate: {rate:.2f}, "
        f"cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {queue}"
    )


def cri(stream: str, tag: str, text: str) -> str:
    """A record of the CRI log format: ``tag`` P for a partial line, F for its last part."""
    return f"2026-02-23T00:14:33.123456789Z {stream} {tag} {text}"


def numbered(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix} {i}".encode() for i in range(count)]


def joined(lines: list[bytes]) -> bytes:
    """Lines as written to a log: each one newline-terminated."""
    return b"".join(line + b"\n" for line in lines)


# A line of a team's own draft profiler, printed between SGLang's lines.
PROF_LINE = (
    "EAGLE3_PROF (6400 cycles, 3688 tok, no sync) Draft steps: 0.64 ms/cyc ( 2.1%) "
    "Draft re-extend: 0.25 ms/cyc ( 0.9%) Accept len: 0.58"
)


T0 = datetime(2026, 2, 23, 0, 10, 2)


def stamp(seconds: float, ranks: str = "") -> str:
    when = (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{when}{' ' + ranks if ranks else ''}]"


def startup(
    algorithm: str = "EAGLE3",
    draft_class: str = "LlamaForCausalLMEagle3",
    draft_path: str = "/models/kimi-k25-eagle3",
    num_draft_tokens: int = 4,
    topk: int = 1,
    steps: int = 3,
    disable_cuda_graph: bool = False,
    log_level: str = "info",
    enable_metrics: bool = True,
    max_running: int = 48,
) -> list[str]:
    """The startup sequence of a TP2 server: args, both ranks' loads and captures, ready."""
    args = (
        "server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tokenizer_mode='auto', "
        "api_key='sk-live-0123456789', tp_size=2, dp_size=1, "
        f"log_level='{log_level}', decode_log_interval=40, max_running_requests=None, "
        f"enable_metrics={enable_metrics}, speculative_algorithm='{algorithm}', "
        f"speculative_draft_model_path='{draft_path}', speculative_draft_model_revision='main', "
        f"speculative_num_steps={steps}, speculative_eagle_topk={topk}, "
        f"speculative_num_draft_tokens={num_draft_tokens}, cuda_graph_max_bs=48, "
        f"cuda_graph_bs=None, disable_cuda_graph={disable_cuda_graph}, host='0.0.0.0')"
    )
    load = "Load weight end. elapsed={e} s, type={c}, dtype=torch.bfloat16, avail mem=1 GB, "
    lines = [
        f"{stamp(0)} {args}",
        "Max running requests is reset to 48 for speculative decoding. You can override this "
        "by explicitly setting --max-running-requests.",
        f"{stamp(1, 'TP0')} Init torch distributed begin.",
        f"{stamp(19, 'TP0')} " + load.format(e=9.41, c="DeepseekV3ForCausalLM") + "mem usage=7 GB.",
        f"{stamp(19, 'TP1')} " + load.format(e=9.52, c="DeepseekV3ForCausalLM") + "mem usage=7 GB.",
    ]
    if not disable_cuda_graph:
        lines += [
            f"{stamp(25, 'TP0')} Capture cuda graph begin. This can take up to several minutes.",
            "Capturing batches (bs=48 avail_mem=19.02 GB): 100%|##########| 12/12 [00:06<00:00]",
            f"{stamp(31, 'TP0')} Capture cuda graph end. Time elapsed: 6.48 s. mem usage=0.80 GB.",
        ]
    lines += [
        f"{stamp(32, 'TP1')} " + load.format(e=1.05, c=draft_class) + "mem usage=0.79 GB.",
        f"{stamp(32, 'TP0')} " + load.format(e=1.02, c=draft_class) + "mem usage=0.79 GB.",
        f"{stamp(42, 'TP0')} max_total_num_tokens=1183744, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests={max_running}, context_len=131072, "
        "available_gpu_mem=16.61 GB",
        f"{stamp(45)} INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f'{stamp(46)} INFO:     127.0.0.1:40312 - "GET /model_info HTTP/1.1" 200 OK',
        f"{stamp(47, 'TP0')} Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, "
        "cuda graph: False",
        f"{stamp(50)} The server is fired up and ready to roll!",
    ]
    return lines


def decode(
    seconds: float,
    accept: float,
    rate: float,
    graph: bool = True,
    running: int = 48,
    queued: int = 0,
    tput: float = 600.0,
) -> str:
    """A TP0 decode line ``seconds`` after the startup sequence began."""
    return decode_line(
        accept,
        rate=rate,
        graph=graph,
        running=running,
        queue=queued,
        tput=tput,
        stamp=stamp(seconds, "TP0"),
    )


def prefill(seconds: float, new_tokens: int = 2048, running: int = 1) -> str:
    return (
        f"{stamp(seconds, 'TP0')} Prefill batch, #new-seq: 1, #new-token: {new_tokens}, "
        f"#cached-token: 0, token usage: 0.01, #running-req: {running}, #queue-req: 0, "
        "input throughput (token/s): 8123.40, cuda graph: False"
    )


def collapsed_drafter() -> list[str]:
    """A collapsed drafter: accept len 1.00 (rate 0.25, 4 tokens), 48 running, 32 queued."""
    lines = startup()
    lines += [decode(260 + 4 * i, 1.00, 0.25, running=48, queued=32, tput=600) for i in range(8)]
    return lines


def wrong_algorithm_flag() -> list[str]:
    """An EAGLE-3 draft served with --speculative-algorithm EAGLE: only the startup lines, no
    request served yet."""
    return startup(algorithm="EAGLE")


def undertrained_drafter() -> list[str]:
    """Undertrained drafter after the fix: 16 draft tokens, len ~2.5, no CUDA graph."""
    lines = startup(num_draft_tokens=16, topk=4, steps=6, max_running=48)
    values = [(2.50, 0.16, 61.26), (2.38, 0.15, 59.69), (2.55, 0.16, 48.10), (2.41, 0.15, 57.0)]
    lines += [
        decode(300 + 5 * i, acc, rate, graph=False, running=1, tput=tput)
        for i, (acc, rate, tput) in enumerate(values)
    ]
    return lines


def mismatched_drafter() -> list[str]:
    """A drafter trained for another model version: correct flag, accept length near 1, custom
    profiler lines around."""
    lines = startup()
    for i in range(6):
        lines.append(decode(300 + 5 * i, 1.02, 0.26, running=1, tput=52.0))
        lines.append(PROF_LINE)
    return lines


def metrics_disabled() -> list[str]:
    """A server started without --enable-metrics: the log alone must carry the diagnosis."""
    lines = startup(enable_metrics=False)
    lines += [decode(300 + 4 * i, 3.1, 0.78, running=8, tput=900) for i in range(5)]
    return lines


# vLLM 0.33's lines as its loggers write them: the engine's start (``VllmConfig.__str__``), an
# interval's engine line and its SpecDecoding line, a drafter that accepts nothing.
VLLM_START = (
    "(EngineCore_DP0 pid=412) INFO 12-01 11:00:00 [core.py:140] Initializing a V1 LLM engine "
    "(v0.33.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config="
    "SpeculativeConfig(method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', "
    "num_spec_tokens=3), tokenizer='meta-llama/Llama-3.1-8B-Instruct', enforce_eager=False"
)


def vllm_interval(second: int) -> list[str]:
    """One 10-second interval of a vLLM engine whose EAGLE-3 drafter accepts nothing."""
    at = f"12-01 11:01:{second:02d}"
    return [
        f"(APIServer pid=401) INFO {at} [loggers.py:257] Engine 000: Avg prompt throughput: "
        "812.4 tokens/s, Avg generation throughput: 800.0 tokens/s, Running: 32 reqs, Waiting: "
        "0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
        f"(APIServer pid=401) INFO {at} [metrics.py:120] SpecDecoding metrics: Mean acceptance "
        "length: 1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 300.00 tokens/s, "
        "Accepted: 0 tokens, Drafted: 3000 tokens, Per-position acceptance rate: 0.000, 0.000, "
        "0.000, Avg Draft acceptance rate: 0.0%",
    ]


def crashed() -> list[str]:
    """A healthy SGLang node whose scheduler died of CUDA OOM; the parent's SIGQUIT after."""
    lines = startup() + [decode(260 + 4 * i, 2.6, 0.53, tput=2700) for i in range(8)]
    return [
        *lines,
        f"{stamp(300, 'TP0')} Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 6368, in '
        "run_scheduler_process",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.23 GiB is free.",
        "",
        f"{stamp(300)} SIGQUIT received. signum=3, frame=<frame at 0x7f3c2c0a1b40, file "
        "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child "
        "failed.",
    ]
