"""The ``/metrics`` of the servers specwatch scrapes besides SGLang, in their real names.

TensorRT-LLM registers its metrics with prometheus-client (``tensorrt_llm/metrics/
collector.py``): the same library writes them here, so names, types, ``_total`` and
``_created`` are as its server writes them, with the ``pid`` label its multiprocess mode puts on
gauges. llama.cpp's server writes its exposition by hand (``llamacpp:`` names, no labels), and
vLLM writes its counters per engine; both are written here as they do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from exporter.target import Target
from tests.support.fake_sglang import FakeSGLang, Route
from tests.support.metrics import Clock, render

TRTLLM_PATH = "/prometheus/metrics"
_TRTLLM_LABELS = {"model_name": "llama-3.1-8b", "engine_type": "trtllm"}


class TrtllmMetrics:
    """One TensorRT-LLM server's metrics, moved as its iterations and finished requests move
    them (``log_iteration_stats`` and ``log_request_metrics_dict``)."""

    def __init__(self, method: str = "Eagle3", draft_len: int = 3, pid: str = "4242") -> None:
        self.registry = CollectorRegistry()
        self.draft_len = draft_len
        self._pid = {"pid": pid}  # multiprocess mode's label on every gauge
        base = list(_TRTLLM_LABELS)
        at = [*base, "token_position"]
        self.draft_tokens = self._counter("spec_decode_num_draft_tokens_total", base)
        self.accepted = self._counter("spec_decode_num_accepted_tokens_total", base)
        self.drafted_at = self._counter("spec_decode_drafted_tokens_total", at)
        self.accepted_at = self._counter("spec_decode_accepted_tokens_total", at)
        self.generation = self._counter("generation_tokens_total", base)
        self.accept_length = self._gauge("spec_decode_acceptance_length")
        self.overhead = self._gauge("spec_decode_draft_overhead")
        self.running = self._gauge("num_requests_running")
        self.waiting = self._gauge("num_requests_waiting")
        self.usage = self._gauge("kv_cache_utilization")
        config = {
            "spec_enabled": "true",
            "spec_method": method,
            "spec_num_tokens": str(draft_len),
            "spec_draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        }
        info = Gauge(
            "trtllm_speculative_config_info",
            "Speculative decoding configuration info",
            [*base, *config, "pid"],
            registry=self.registry,
        )
        info.labels(**_TRTLLM_LABELS, **config, **self._pid).set(1)

    def _counter(self, name: str, labels: list[str]) -> Counter:
        return Counter(f"trtllm_{name}", f"TensorRT-LLM {name}.", labels, registry=self.registry)

    def _gauge(self, name: str) -> Gauge:
        labels = [*_TRTLLM_LABELS, "pid"]
        return Gauge(f"trtllm_{name}", f"TensorRT-LLM {name}.", labels, registry=self.registry)

    def iteration(self, requests: int, accepted: int, running: int = 12) -> None:
        """One iteration in which ``requests`` requests drafted ``draft_len`` tokens each."""
        drafted = requests * self.draft_len
        if drafted > 0:
            self.draft_tokens.labels(**_TRTLLM_LABELS).inc(drafted)
        if accepted > 0:
            self.accepted.labels(**_TRTLLM_LABELS).inc(accepted)
        length = (accepted + requests) / requests if requests else 0.0
        self.accept_length.labels(**_TRTLLM_LABELS, **self._pid).set(length)
        self.overhead.labels(**_TRTLLM_LABELS, **self._pid).set(0.12)
        self.running.labels(**_TRTLLM_LABELS, **self._pid).set(running)
        self.waiting.labels(**_TRTLLM_LABELS, **self._pid).set(1)
        self.usage.labels(**_TRTLLM_LABELS, **self._pid).set(0.3)

    def finished(self, rounds: int, accepted_at: tuple[int, ...], generated: int) -> None:
        """A finished request: ``rounds`` drafting rounds, each drafting every position, and
        the drafts accepted at each position (a position's series appears at its first)."""
        self.generation.labels(**_TRTLLM_LABELS).inc(generated)
        for position in range(self.draft_len):
            labels = {**_TRTLLM_LABELS, "token_position": str(position)}
            self.drafted_at.labels(**labels).inc(rounds)
            if accepted_at[position] > 0:
                self.accepted_at.labels(**labels).inc(accepted_at[position])

    def body(self) -> bytes:
        return generate_latest(self.registry)


def vllm_schema(
    prefix: str,
    drafts: float,
    accepted: float,
    per_position: tuple[float, ...],
    generation: float = 0.0,
    labels: tuple[str, ...] = ('engine="0",model_name="llama"', 'engine="1",model_name="llama"'),
) -> bytes:
    """vLLM's counters under ``prefix``, the totals split over ``labels`` (two DP engines)."""
    k = len(per_position)
    out = []

    def counter(name: str, total: float, extra: str = "") -> None:
        out.append(f"# HELP {prefix}{name} Counter of {name}.")
        out.append(f"# TYPE {prefix}{name} counter")
        for label in labels:
            out.append(f"{prefix}{name}_total{{{label}{extra}}} {total / len(labels)}")
            out.append(f"{prefix}{name}_created{{{label}{extra}}} 1.7e9")

    counter("spec_decode_num_drafts", drafts)
    counter("spec_decode_num_draft_tokens", drafts * k)
    counter("spec_decode_num_accepted_tokens", accepted)
    name = f"{prefix}spec_decode_num_accepted_tokens_per_pos"
    out.append(f"# HELP {name} Per position.")
    out.append(f"# TYPE {name} counter")
    for position, value in enumerate(per_position):
        for label in labels:
            out.append(f'{name}_total{{{label},position="{position}"}} {value / len(labels)}')
    counter("generation_tokens", generation)
    for gauge, value in (("num_requests_running", 12), ("num_requests_waiting", 1)):
        out.append(f"# HELP {prefix}{gauge} Gauge.")
        out.append(f"# TYPE {prefix}{gauge} gauge")
        out += [f"{prefix}{gauge}{{{label}}} {value}" for label in labels]
    out.append(f"# HELP {prefix}kv_cache_usage_perc KV usage.")
    out.append(f"# TYPE {prefix}kv_cache_usage_perc gauge")
    out += [
        f"{prefix}kv_cache_usage_perc{{{label}}} {0.25 + i * 0.15}"
        for i, label in enumerate(labels)
    ]
    return ("\n".join(out) + "\n").encode()


def llamacpp(
    drafts: float,
    accepted: float,
    per_position: tuple[float, ...],
    predicted: float,
    processing: int = 3,
) -> bytes:
    """llama.cpp's server ``/metrics``: its counters and gauges as its ``to_metrics`` writes
    them, one ``llamacpp:`` series each, then the per-position counter."""
    counters = (
        ("prompt_tokens_total", "Number of prompt tokens processed", 52000),
        ("tokens_predicted_total", "Number of generation tokens processed", predicted),
        ("n_decode_total", "Total number of llama_decode() calls", drafts),
        (
            "spec_decode_num_draft_tokens_total",
            "Speculative: Total draft tokens generated",
            drafts * len(per_position),
        ),
        (
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            accepted,
        ),
        (
            "spec_decode_num_drafts_total",
            "Speculative: Total speculative decoding verification steps",
            drafts,
        ),
    )
    gauges = (
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s", 41.5),
        ("requests_processing", "Number of requests processing", processing),
        ("requests_deferred", "Number of requests deferred", 1),
    )
    out = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, doc, value in items:
            out += [
                f"# HELP llamacpp:{name} {doc}",
                f"# TYPE llamacpp:{name} {kind}",
                f"llamacpp:{name} {value}",
            ]
    name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    out += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
    out += [f'{name}{{position="{i}"}} {value}' for i, value in enumerate(per_position)]
    return ("\n".join(out) + "\n").encode()


def steady_trtllm(
    metrics: TrtllmMetrics, accepted_at: tuple[int, ...], iteration_accepted: int
) -> Callable[[int], bytes]:
    """Each tick: an iteration of 8 drafting requests accepting ``iteration_accepted`` (its
    gauge), and finished requests of 40 rounds accepting ``accepted_at`` by position."""

    def body(tick: int) -> bytes:
        metrics.iteration(requests=8, accepted=iteration_accepted)
        metrics.finished(rounds=40, accepted_at=accepted_at, generated=160)
        return metrics.body()

    return body


def steady_llamacpp(per_position: tuple[float, ...]) -> Callable[[int], bytes]:
    """Each tick 100 more drafts, accepted at each position by the given share."""

    def body(tick: int) -> bytes:
        drafts = 100 * (tick + 1)
        positions = tuple(share * drafts for share in per_position)
        return llamacpp(drafts, sum(positions), positions, 4 * drafts)

    return body


@contextmanager
def live(
    server: FakeSGLang, path: str, body: Callable[[int], bytes], every: float = 0.2
) -> Iterator[None]:
    """``path`` answers ``body(tick)``, the tick growing every ``every`` seconds: a server
    under steady load whose counters keep counting, until the block ends."""
    stop = threading.Event()

    def serve() -> None:
        tick = 0
        while not stop.is_set():
            server.routes[path] = Route(body=body(tick))
            tick += 1
            stop.wait(every)

    thread = threading.Thread(target=serve, name="live-upstream", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


class Seen(TypedDict):
    """What specwatch's own scrape shows of one target's server, by what it means."""

    accept_length: float | None
    accept_rate: float | None
    running: float | None
    queued: float | None
    usage: float | None
    throughput: float | None
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    positions: dict[str, float]
    accepted_at: dict[str, float]
    engine: list[str]
    speculative: list[dict[str, str]]
    floor: float | None
    up: float | None
    dropped: dict[str, float]


def scrape(target: Target) -> Seen:
    """Scrape the target's server once, then what specwatch's own scrape shows of it."""
    assert target.upstream is not None
    target.upstream.scrape_once()
    clock = Clock()
    clock.now = time.time()
    s = render([target], clock)
    name = target.name

    def by_position(metric: str) -> dict[str, float]:
        return {x.labels["position"]: x.value for x in s.samples if x.name == metric}

    return {
        "accept_length": s.value("specwatch_accept_length", target=name),
        "accept_rate": s.value("specwatch_accept_ratio", target=name),
        "running": s.value("specwatch_running_requests", target=name),
        "queued": s.value("specwatch_queued_requests", target=name),
        "usage": s.value("specwatch_token_usage_ratio", target=name),
        "throughput": s.value("specwatch_gen_throughput_tokens_per_second", target=name),
        "drafts": s.value("specwatch_drafts_total", target=name),
        "draft_tokens": s.value("specwatch_draft_tokens_total", target=name),
        "accepted": s.value("specwatch_accepted_tokens_total", target=name),
        "positions": by_position("specwatch_position_accept_ratio"),
        "accepted_at": by_position("specwatch_position_accepted_tokens_total"),
        "engine": [x.labels["engine"] for x in s.samples if x.name == "specwatch_target_info"],
        "speculative": [x.labels for x in s.samples if x.name == "specwatch_speculative_info"],
        "floor": s.value("specwatch_accept_length_floor", target=name),
        "up": s.value("specwatch_upstream_up", target=name, endpoint="metrics"),
        "dropped": {
            x.labels["reason"]: x.value
            for x in s.samples
            if x.name == "specwatch_upstream_dropped_samples_total"
        },
    }
