"""SGLang's ``/metrics``: its gauges, and the CUDA-graph share from a counter's increase.

SGLang exports gauges for the newest window of each DP rank (accept length, running and queued
requests, throughput, token usage) and counters of verify calls, generated tokens and decode
passes by CUDA-graph mode. Names arrive normalised to ``sglang_`` (SGLang serves the
``sglang:`` spelling too).

A scheduler's series are the node's only once per DP rank: under priority scheduling each
queue's total is under ``priority=""`` with its split by priority beside it, and with
``--enable-metrics-for-all-schedulers`` every TP rank of a DP rank writes the batch they share
under its own ``tp_rank``. With pipeline parallelism (``--pp-size``) the first TP rank of
every stage writes its gauges under its own ``pp_rank``, and every stage runs the same
micro-batches (the last stage's accepted drafts are relayed to the others), so the gauges are
read from the first stage alone, whose log lines count too. Decode passes are each stage's
own (a stage replays graphs of its own layers), so they are summed over stages. The
tokenizer's counters are split by priority too, but into disjoint requests, so they are
summed whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from statistics import fmean

from exporter.engines.counters import model_name
from exporter.engines.engine import Samples
from exporter.engines.record import UpstreamValues
from exporter.engines.server_config import ServerConfig

PREFIX = "sglang_"
# How each sample read can be true (see ``Engine.bounds``).
BOUNDS = {
    "sglang_token_usage": "ratio",
    "sglang_spec_accept_rate": "ratio",
    "sglang_spec_accept_length": "accept_length",
    **dict.fromkeys(
        (
            "sglang_num_running_reqs",
            "sglang_num_queue_reqs",
            "sglang_gen_throughput",
            "sglang_cuda_graph_passes_total",
            "sglang_spec_verify_calls_total",
            "sglang_generation_tokens_total",
            "sglang_spec_num_steps",
            "sglang_spec_num_draft_tokens",
        ),
        "count",
    ),
}


# More draft steps than any drafter runs: a hostile or broken exposition.
MAX_STEPS = 64
# Labels that tell apart the schedulers of one DP rank that run the same forward passes; and
# those whose gauges describe the same batch (every pipeline stage's).
_SAME_PASSES = ("tp_rank", "moe_ep_rank")
_SAME_BATCH = (*_SAME_PASSES, "pp_rank")
Series = Sequence[tuple[dict[str, str], float]]


class SGLangUpstream:
    """One scraper's reader of SGLang's ``/metrics``; keeps the decode passes between scrapes."""

    def __init__(self) -> None:
        self._passes: dict[str, float] | None = None

    def claims(self, samples: Samples) -> bool:
        return any(name.startswith(PREFIX) for name in samples)

    def reset(self) -> None:
        self._passes = None

    def bounds(self, name: str) -> str | None:
        return BOUNDS.get(name)

    def read(self, samples: Samples, at: float) -> UpstreamValues:
        """Gauges across DP ranks (summed counts, averaged ratios) and the CUDA-graph share.

        The accept gauges of a rank with no running request are left out: SGLang refreshes the
        other gauges every 30 s while idle but not those, so they would show an old window as
        current (and, averaged with busy DP ranks, skew theirs).

        The share is the increase of ``cuda_graph_passes_total{mode="decode_cuda_graph"}``
        over all decode modes since the previous scrape; ``None`` on the first scrape, when
        idle, or after a counter reset.
        """
        passes: dict[str, float] = {}
        graph_passes = samples.get("sglang_cuda_graph_passes_total", [])
        for labels, value in _per_rank(graph_passes, _SAME_PASSES):
            mode = labels.get("mode", "")
            passes[mode] = passes.get(mode, 0.0) + value
        previous, self._passes = self._passes, passes
        running = _per_rank(samples.get("sglang_num_running_reqs", []))
        idle = {_rank(labels) for labels, value in running if value == 0}
        accept = [
            (labels, value)
            for labels, value in _per_rank(samples.get("sglang_spec_accept_length", []))
            if _rank(labels) not in idle
        ]
        verify_calls = _values(samples.get("sglang_spec_verify_calls_total", []), sum)
        generated = _values(samples.get("sglang_generation_tokens_total", []), sum)
        if verify_calls is None or generated is None:
            verify_calls = generated = None  # one without the other would skew a fleet's sums
        return UpstreamValues(
            accept_length=_spec_value(accept),
            running_requests=_values(running, sum),
            queued_requests=_values(_per_rank(samples.get("sglang_num_queue_reqs", [])), sum),
            gen_throughput=_values(_per_rank(samples.get("sglang_gen_throughput", [])), sum),
            token_usage=_values(samples.get("sglang_token_usage", []), max),
            cuda_graph_share=_graph_share(passes, previous),
            engine="sglang",
            served_model=model_name(samples, BOUNDS),
            config=_active_setup(samples),
            drafts_total=verify_calls,
            # Each verify call yields one token of the target's own; the rest were drafts.
            accepted_tokens_total=(
                None
                if verify_calls is None or generated is None
                else max(generated - verify_calls, 0)
            ),
        )


def _rank(
    labels: Mapping[str, str], same: tuple[str, ...] = _SAME_BATCH
) -> frozenset[tuple[str, str]]:
    """The batch a scheduler's series is of: its labels but those naming its copy."""
    return frozenset((name, value) for name, value in labels.items() if name not in same)


def _per_rank(
    series: Series, same: tuple[str, ...] = _SAME_BATCH
) -> list[tuple[dict[str, str], float]]:
    """One series of a scheduler's metric per batch: the lowest-numbered copy's (the first
    pipeline stage's, its first TP rank's), and never a priority's share of a total."""
    kept: dict[frozenset[tuple[str, str]], tuple[dict[str, str], float]] = {}
    for labels, value in sorted(series, key=lambda sample: _copy_order(sample[0], same)):
        if not labels.get("priority"):
            kept.setdefault(_rank(labels, same), (labels, value))
    return list(kept.values())


def _copy_order(labels: Mapping[str, str], same: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """Rank numbers in numeric order without reading them as numbers (``"10"`` after ``"9"``):
    a label value is the server's text, whatever it holds."""
    return tuple((len(value), value) for value in map(labels.get, same, repeat("")))


def _active_setup(samples: Samples) -> ServerConfig | None:
    """The draft steps in force (``sglang:spec_num_steps``, 0.5.23): adaptive speculation's
    choice, 0 while it has drafting off. A server without speculation reads 0 draft tokens
    too; with a drafter, drafting off still verifies one position."""
    steps = {value for _, value in samples.get("sglang_spec_num_steps", [])}
    tokens = {value for _, value in samples.get("sglang_spec_num_draft_tokens", [])}
    if len(steps) != 1 or len(tokens) != 1 or tokens.pop() < 1:
        return None  # ranks disagree (between two switches), or nothing drafts
    active = steps.pop()
    return ServerConfig(active_steps=int(active)) if active <= MAX_STEPS else None


def _values(
    samples: Iterable[tuple[dict[str, str], float]], combine: Callable[[list[float]], float]
) -> float | None:
    values = [value for _, value in samples]
    return combine(values) if values else None


def _spec_value(samples: list[tuple[dict[str, str], float]]) -> float | None:
    """Spec gauges read 0 on servers without speculation: that is absence, not a value."""
    value = _values(samples, fmean)
    return value if value else None


def _graph_share(now: Mapping[str, float], before: Mapping[str, float] | None) -> float | None:
    if not before:
        return None
    graph = now.get("decode_cuda_graph", 0.0) - before.get("decode_cuda_graph", 0.0)
    eager = now.get("decode_none", 0.0) - before.get("decode_none", 0.0)
    if graph < 0 or eager < 0 or graph + eager <= 0:
        return None
    return graph / (graph + eager)
