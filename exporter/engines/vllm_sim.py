"""vLLM's server for a scenario: start-up, stats and access lines (the engine's ``simulation``).

vLLM logs a pair of lines per stats interval (the engine line, then ``SpecDecoding metrics:``)
from its API-server process, whose tag it colours even in files. The values agree the way
vLLM computes them: a draft round yields the accept length in tokens, ``k`` tokens are drafted
per round, and the per-position rates are the shares of rounds whose first ``i+1`` drafts were
accepted, so their sum is the accept length minus one.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType

from exporter.engines.chain import per_position_acceptance
from exporter.engines.simulation import Phase

TAG = "\x1b[0;36m(APIServer pid=1)\x1b[0;0m "  # its process tag, in ANSI cyan even in files
# VLLM_LOG_STATS_INTERVAL as a node watched closely sets it (vLLM's default is 10 s).
STATS_INTERVAL = 5.0
READY = "INFO:     Application startup complete."
RESTART_SECONDS = 4.0
MODEL = "moonshotai/Kimi-K2.5"
BASE_TIME = datetime(2026, 5, 6, 6, 0, tzinfo=timezone.utc)

# --format-version for vLLM: how each range of releases wrote its SpecDecoding line.
FORMATS: Mapping[str, str] = MappingProxyType(
    {
        "vllm-0.11": "since 0.11: mean acceptance length first, per-position, avg rate last",
        "vllm-0.10.2": "Sept 2025: draft acceptance rate first, with throughputs",
        "vllm-0.9": "0.8.5 to 0.10: rate, mean acceptance length, counts, per-position",
        "vllm-0.8.3": "0.8.3 and 0.8.4: rate and counts only",
    }
)
DEFAULT_FORMAT = "vllm-0.11"


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A vLLM line before it has a time: ``(APIServer pid=1) INFO 05-06 06:11:23
    [metrics.py:101] message`` from its logger (``file``), or a bare line (uvicorn's)."""

    offset: float  # seconds since the first line of the log
    message: str
    file: str | None = None  # the ``file:line`` its formatter names; None: printed bare
    stream: str = "stderr"

    @property
    def ready(self) -> bool:
        return self.message == TAG + READY

    def render(self, moment: datetime) -> str:
        if self.file is None:
            return self.message
        return f"{TAG}INFO {moment.strftime('%m-%d %H:%M:%S')} [{self.file}] {self.message}"


class VllmSimulation:
    formats: Mapping[str, str] = FORMATS
    default_format = DEFAULT_FORMAT

    def base_time(self, fmt: str) -> datetime:
        return BASE_TIME

    def cannot(self, phase: Phase) -> str | None:
        """The scenarios whose incident is the drafter's happen on vLLM alike; those of a
        flag it lacks, or lines it never writes, do not."""
        deployment = phase.deployment
        if deployment.log_requests is not None:
            return "vLLM logs no finished requests"
        if deployment.adaptive:
            return "vLLM has no adaptive speculation"
        if deployment.algorithm != "EAGLE3":
            return "the simulated vLLM server drafts with EAGLE-3 alone"
        if deployment.disable_cuda_graph or not deployment.enable_metrics:
            return "the simulated vLLM server runs CUDA graphs and serves /metrics"
        return None

    def lines(self, phases: Sequence[Phase], *, seed: int, fmt: str) -> Iterator[LogEvent]:
        rng = random.Random(seed)
        offset = 0.0
        for phase in phases:
            now = offset
            for event in _startup(phase, offset):
                now = event.offset
                yield event
            until = None if phase.traffic_seconds is None else now + phase.traffic_seconds
            while until is None or now < until:
                now += STATS_INTERVAL * rng.gauss(1.0, 0.01)
                yield from _interval(phase, rng, now, fmt)
            offset = now + RESTART_SECONDS

    def window_seconds(self, phase: Phase) -> float:
        """A pair of stats lines every stats interval, whatever the load."""
        return STATS_INTERVAL


def _startup(phase: Phase, at: float) -> list[LogEvent]:
    deployment = phase.deployment
    spec = (
        f"SpeculativeConfig(method='{deployment.algorithm.lower()}', "
        f"model='{deployment.draft_model_path}', num_spec_tokens={deployment.num_steps})"
    )
    return [
        LogEvent(at, "vLLM API server version 0.11.0", file="api_server.py:1839"),
        LogEvent(
            at + 2.0,
            f"Initializing a V1 LLM engine (v0.11.0) with config: model='{MODEL}', "
            f"speculative_config={spec}, tensor_parallel_size=8, enforce_eager=False, "
            f"seed=0, served_model_name={MODEL}, enable_prefix_caching=True",
            file="core.py:77",
        ),
        LogEvent(
            at + 12.0,
            "Starting vLLM API server 0 on http://0.0.0.0:8000",
            file="api_server.py:1912",
        ),
        LogEvent(at + 12.5, TAG + READY, stream="stdout"),
    ]


def _interval(phase: Phase, rng: random.Random, now: float, fmt: str) -> list[LogEvent]:
    """One stats interval: its finished requests, then the engine line and the spec line."""
    behaviour = phase.behaviour
    k = phase.deployment.num_steps
    length = min(max(rng.gauss(behaviour.accept_length, behaviour.accept_jitter), 1.0), k + 1.0)
    throughput = behaviour.gen_throughput * length / behaviour.accept_length
    throughput *= rng.gauss(1.0, 0.02)
    drafts = max(1, round(throughput * STATS_INTERVAL / length))
    accepted = round(drafts * (length - 1.0))
    alpha = per_position_acceptance(1.0 + accepted / drafts, k + 1)
    positions = [alpha ** (i + 1) for i in range(k)]
    finished = rng.randint(1, max(1, behaviour.running // 4))
    lines = [
        LogEvent(
            now - rng.uniform(0.0, STATS_INTERVAL),
            f"{TAG}INFO:     10.0.3.{rng.randint(2, 40)}:{rng.randint(32768, 60999)} - "
            '"POST /v1/chat/completions HTTP/1.1" 200 OK',
            stream="stdout",
        )
        for _ in range(finished)
    ]
    lines.sort(key=lambda event: event.offset)
    engine = (
        f"Engine 000: Avg prompt throughput: {rng.uniform(600, 1200):.1f} tokens/s, "
        f"Avg generation throughput: {throughput:.1f} tokens/s, "
        f"Running: {behaviour.running} reqs, Waiting: {behaviour.queued} reqs, "
        f"GPU KV cache usage: {rng.uniform(20, 40):.1f}%, "
        f"Prefix cache hit rate: {rng.uniform(30, 50):.1f}%"
    )
    lines.append(LogEvent(now, engine, file="loggers.py:271"))
    body = spec_body(fmt, drafts, drafts * k, accepted, positions)
    lines.append(LogEvent(now, f"SpecDecoding metrics: {body}", file="metrics.py:101"))
    return lines


def spec_body(fmt: str, drafts: int, drafted: int, accepted: int, positions: list[float]) -> str:
    """The SpecDecoding line's body as the release range ``fmt`` wrote it."""
    length = f"Mean acceptance length: {1 + accepted / drafts:.2f}"
    rate = f"{100 * accepted / drafted:.1f}%"
    throughput = (
        f"Accepted throughput: {accepted / STATS_INTERVAL:.2f} tokens/s, "
        f"Drafted throughput: {drafted / STATS_INTERVAL:.2f} tokens/s"
    )
    counts = f"Accepted: {accepted} tokens, Drafted: {drafted} tokens"
    per_position = "Per-position acceptance rate: " + ", ".join(f"{p:.3f}" for p in positions)
    if fmt == "vllm-0.11":
        return (
            f"{length}, {throughput}, {counts}, {per_position}, Avg Draft acceptance rate: {rate}"
        )
    if fmt == "vllm-0.10.2":
        return f"Draft acceptance rate: {rate}, {length}, {throughput}, {counts}, {per_position}"
    if fmt == "vllm-0.9":
        return f"Draft acceptance rate: {rate}, {length}, {counts}, {per_position}"
    if fmt == "vllm-0.8.3":
        return f"Draft acceptance rate: {rate}, {counts}"
    raise KeyError(f"unknown vLLM format {fmt!r}; known: {', '.join(FORMATS)}")


SIMULATION = VllmSimulation()
