"""SGLang 0.5.23's ``/metrics`` written by the same library and metric definitions its server uses.

SGLang defines its metrics with prometheus-client (``srt/observability/metrics_collector.py``):
each scheduler's gauges and CUDA-graph counter carry ``model_name``, ``engine_type``,
``tp_rank``, ``pp_rank``, ``moe_ep_rank``, ``dp_rank`` (and ``priority`` under priority
scheduling), the tokenizer's counters ``model_name``, ``engine_type`` and ``is_streaming``. Its
server serves them through the multiprocess collector, which writes counters without a
``_created`` series; the rendering here leaves those out too.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
_SCHEDULER = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
_GAUGES = {
    "num_running_reqs": "The number of running requests.",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "gen_throughput": "The generation throughput (token/s).",
    "token_usage": "The token usage.",
    "spec_accept_length": "Mean acceptance length of speculative decoding (accepted drafts + "
    "bonus token per forward).",
    "spec_num_steps": "Currently active speculative_num_steps.",
    "spec_num_draft_tokens": "Currently active speculative_num_draft_tokens (decouples from "
    "steps under topk>1).",
}


@dataclass(frozen=True)
class Rank:
    """What one scheduler's newest stats say (``SchedulerMetricsCollector.log_stats``)."""

    running: int = 30
    queued: int = 2
    throughput: float = 600.0
    usage: float = 0.2
    accept_length: float = 2.5
    steps: int = 3
    draft_tokens: int = 4
    by_priority: tuple[tuple[int, int, int], ...] = ()  # (priority, running, queued)


class SGLangMetrics:
    """One SGLang server's registry: ``dp`` DP ranks of ``tp_per_dp`` scheduler ranks each
    writing metrics (one unless ``--enable-metrics-for-all-schedulers``), in each of ``pp``
    pipeline stages (``--pp-size``): the TP0 scheduler of every stage writes its metrics."""

    def __init__(
        self, dp: int = 2, tp_per_dp: int = 1, priority: bool = False, pp: int = 1
    ) -> None:
        self.registry = CollectorRegistry()
        self.dp, self.tp_per_dp, self.priority, self.pp = dp, tp_per_dp, priority, pp
        labels = [*_SCHEDULER, *(["priority"] if priority else []), "dp_rank"]
        self.gauges = {
            name: Gauge(
                f"sglang:{name}",
                doc,
                labels,
                multiprocess_mode="mostrecent",
                registry=self.registry,
            )
            for name, doc in _GAUGES.items()
        }
        self.passes = Counter(
            "sglang:cuda_graph_passes_total",
            "Total number of forward passes categorized by CUDA graph.",
            [*labels, "mode"],
            registry=self.registry,
        )
        tokenizer = ["model_name", "engine_type", *(["priority"] if priority else [])]
        self.generated = Counter(
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            [*tokenizer, "is_streaming"],
            registry=self.registry,
        )
        self.verify_calls = Counter(
            "sglang:spec_verify_calls_total",
            "Number of speculative decoding verification calls.",
            tokenizer,
            registry=self.registry,
        )
        self.requests = Counter(
            "sglang:num_requests_total",
            "Number of requests processed.",
            [*tokenizer, "is_streaming"],
            registry=self.registry,
        )

    def _labels(self, dp_rank: int, tp: int, pp: int = 0) -> dict[str, str]:
        labels = {
            "model_name": MODEL,
            "engine_type": "unified",
            "tp_rank": str(dp_rank * self.tp_per_dp + tp),
            "pp_rank": str(pp),
            "moe_ep_rank": "0",
            "dp_rank": str(dp_rank),
        }
        return {**labels, "priority": ""} if self.priority else labels

    def stats(self, dp_rank: int, rank: Rank, pp: int | None = None) -> None:
        """Every scheduler of ``dp_rank`` logs the same batch; under priority scheduling each
        queue's total goes under ``priority=""`` and its breakdown under the priority. Every
        pipeline stage processes the same micro-batches, the last stage's accepted drafts
        relayed to the others (``scheduler_pp_mixin.py``), so each stage writes the same
        figures; ``pp`` writes one stage's alone (each reports at its own tick)."""
        values = {
            "num_running_reqs": rank.running,
            "num_queue_reqs": rank.queued,
            "gen_throughput": rank.throughput,
            "token_usage": rank.usage,
            "spec_accept_length": rank.accept_length,
            "spec_num_steps": rank.steps,
            "spec_num_draft_tokens": rank.draft_tokens,
        }
        stages = range(self.pp) if pp is None else (pp,)
        for stage, tp in product(stages, range(self.tp_per_dp)):
            labels = self._labels(dp_rank, tp, stage)
            for name, value in values.items():
                self.gauges[name].labels(**labels).set(value)
            for priority, running, queued in rank.by_priority:
                split = {**labels, "priority": str(priority)}
                self.gauges["num_running_reqs"].labels(**split).set(running)
                self.gauges["num_queue_reqs"].labels(**split).set(queued)

    def decode_passes(self, dp_rank: int, graph: int, eager: int, pp: int | None = None) -> None:
        """Decode forward passes of ``dp_rank``'s schedulers, with and without a CUDA graph;
        of one pipeline stage's (each runs its own layers' graphs), or of every stage's."""
        stages = range(self.pp) if pp is None else (pp,)
        for stage, tp in product(stages, range(self.tp_per_dp)):
            labels = self._labels(dp_rank, tp, stage)
            self.passes.labels(**labels, mode="decode_cuda_graph").inc(graph)
            self.passes.labels(**labels, mode="decode_none").inc(eager)
            self.passes.labels(**labels, mode="prefill_none").inc(5)

    def finished(self, generated: int, verify_calls: int, requests: int) -> None:
        """Finished requests' tokens, verify calls and count (the tokenizer's counters,
        ``observe_one_finished_request``): each request's first token is its prefill's."""
        labels = {"model_name": MODEL, "engine_type": "unified"}
        if self.priority:
            labels["priority"] = "0"
        self.generated.labels(**labels, is_streaming="true").inc(generated)
        self.verify_calls.labels(**labels).inc(verify_calls)
        self.requests.labels(**labels, is_streaming="true").inc(requests)

    def completions(self, count: int, tokens: int, drafts_accepted: int = 0) -> None:
        """``count`` requests of ``tokens`` tokens each, ``drafts_accepted`` of them drafts the
        target kept: the first token from prefill, every verify call one token of the target's
        own and the kept drafts."""
        rounds = tokens - 1 - drafts_accepted
        self.finished(count * tokens, count * rounds, count)

    def body(self) -> bytes:
        lines = generate_latest(self.registry).decode().splitlines(keepends=True)
        return "".join(line for line in lines if "_created" not in line).encode()
