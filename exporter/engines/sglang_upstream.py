"""SGLang's ``/metrics``: its gauges, and the CUDA-graph share from a counter's increase.

SGLang exports gauges for the newest window of each DP rank (accept length, running and queued
requests, throughput, token usage) and counters of verify calls, generated tokens, finished
requests and decode passes by CUDA-graph mode. Names arrive normalised to ``sglang_`` (SGLang
serves the ``sglang:`` spelling too).

Its gauges are written when a decode stats line is, and keep that value while the server is
idle (``num_running_reqs`` stays at the last batch's 1-6 on a real 0.5.15 server): a DP rank
that ran no decode pass between two scrapes is idle, whatever its gauges say.

The tokenizer counts a request's tokens, verify calls and the request itself when it finishes
(``observe_one_finished_request``). Each request's first token comes from prefill, each verify
call yields one token of the target's own, and the rest are accepted drafts: accepted =
generated - verify calls - requests (docs/metrics.md, "Counters").

A scrape window's accept length is SGLang's own measure, ``1 + accepted / verify calls`` (its
scheduler's: accepted drafts plus one token per request per forward, over those), from the
counters' increase since the previous scrape. The ``spec_accept_length`` gauge is the last
logged window's (40 decode batches by default), held while idle, and counts drafts accepted
past a request's last token, which are never generated: it stands in only where the counters
cannot say (a first scrape, no counters, or no request finished in a window the node decoded).

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
from dataclasses import dataclass
from itertools import repeat
from statistics import fmean

from exporter.engines.counters import accept_length, model_name
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
            "sglang_num_requests_total",
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


# The modes of ``cuda_graph_passes_total`` that count decode passes (prefill has its own).
_DECODE_MODES = ("decode_cuda_graph", "decode_none")
# The tokenizer's counters of finished requests: generated tokens, verify calls, requests.
_FINISHED = (
    "sglang_generation_tokens_total",
    "sglang_spec_verify_calls_total",
    "sglang_num_requests_total",
)


# The counters a window's accept length rests on, as a disagreement names them.
_ACCEPTED_NAME = "accepted drafts (generation_tokens - spec_verify_calls - num_requests)"
_VERIFY_NAME = "spec_verify_calls_total"


@dataclass(frozen=True, slots=True)
class _Counters:
    """One scrape's counters, for the next scrape to compare with."""

    passes: dict[str, float]  # decode passes by CUDA-graph mode, summed over DP ranks
    decode: dict[str, float]  # decode passes by DP rank (its ``dp_rank`` label)
    finished: tuple[float, float, float] | None  # generated tokens, verify calls, requests
    accepted: float | None  # the accepted drafts this reader gave


class SGLangUpstream:
    """One scraper's reader of SGLang's ``/metrics``; keeps its counters between scrapes."""

    def __init__(self) -> None:
        self._before: _Counters | None = None

    def claims(self, samples: Samples) -> bool:
        return any(name.startswith(PREFIX) for name in samples)

    def reset(self) -> None:
        self._before = None

    def reads(self, name: str) -> bool:
        return name.startswith((PREFIX, "sglang:"))

    def bounds(self, name: str) -> str | None:
        return BOUNDS.get(name)

    def read(self, samples: Samples, at: float) -> UpstreamValues:
        """Gauges across DP ranks (summed counts, averaged ratios), the CUDA-graph share and
        the speculation counters.

        A DP rank with no decode pass since the previous scrape (on the first scrape: with no
        running request) is idle: no running request, no throughput and no accept length,
        whatever its gauges kept from its last busy window (and, averaged with busy DP ranks,
        they would skew theirs).

        The share is the increase of ``cuda_graph_passes_total{mode="decode_cuda_graph"}``
        over all decode modes since the previous scrape; ``None`` on the first scrape, when
        idle, or after a counter reset.
        """
        before = self._before
        passes, decode = _decode_passes(samples)
        finished = _finished(samples)
        running = _per_rank(samples.get("sglang_num_running_reqs", []))
        idle = _idle_ranks(running, decode, finished, before)
        accept = [
            (labels, value)
            for labels, value in _per_rank(samples.get("sglang_spec_accept_length", []))
            if _dp(labels) not in idle
        ]
        throughput = _per_rank(samples.get("sglang_gen_throughput", []))
        accepted = _accepted(finished, before)
        self._before = _Counters(passes, decode, finished, accepted)
        counted, disagreement = _window_accept_length(finished, accepted, before)
        gauge = None if counted is not None or disagreement else _spec_value(accept)
        return UpstreamValues(
            accept_length=counted if counted is not None else gauge,
            accept_length_gauge=gauge is not None,
            disagreement=disagreement,
            accept_length_by_rank=tuple((_dp(labels), value) for labels, value in accept if value),
            running_requests=_values(_quiet(running, idle), sum),
            queued_requests=_values(_per_rank(samples.get("sglang_num_queue_reqs", [])), sum),
            gen_throughput=_values(_quiet(throughput, idle), sum),
            token_usage=_values(samples.get("sglang_token_usage", []), max),
            cuda_graph_share=_graph_share(passes, before.passes if before else None),
            engine="sglang",
            served_model=model_name(samples, BOUNDS),
            config=_active_setup(samples),
            # Without all three counters, neither: one without the other skews a fleet's sums.
            drafts_total=None if accepted is None or finished is None else finished[1],
            accepted_tokens_total=accepted,
        )


def _dp(labels: Mapping[str, str]) -> str:
    return labels.get("dp_rank", "")


def _decode_passes(samples: Samples) -> tuple[dict[str, float], dict[str, float]]:
    """Decode passes by CUDA-graph mode (over the node), and by DP rank (over modes)."""
    passes: dict[str, float] = {}
    decode: dict[str, float] = {}
    graph_passes = samples.get("sglang_cuda_graph_passes_total", [])
    for labels, value in _per_rank(graph_passes, _SAME_PASSES):
        mode = labels.get("mode", "")
        passes[mode] = passes.get(mode, 0.0) + value
        if mode in _DECODE_MODES:
            decode[_dp(labels)] = decode.get(_dp(labels), 0.0) + value
    return passes, decode


def _finished(samples: Samples) -> tuple[float, float, float] | None:
    generated, verify_calls, requests = (_values(samples.get(name, []), sum) for name in _FINISHED)
    if generated is None or verify_calls is None or requests is None:
        return None
    return generated, verify_calls, requests


def _idle_ranks(
    running: Series,
    decode: Mapping[str, float],
    finished: tuple[float, float, float] | None,
    before: _Counters | None,
) -> set[str]:
    """The DP ranks that decoded nothing since the previous scrape: by their decode passes
    where SGLang counts them, else (a version before the pass counter) by the node's finished
    requests; by the running-requests gauge alone on a first scrape or after a restart."""
    idle = {_dp(labels) for labels, value in running if value == 0}
    if before is None:
        return idle
    every = {_dp(labels) for labels, _ in running}
    if decode and before.decode:
        still = {rank for rank, passes in decode.items() if before.decode.get(rank) == passes}
        return idle | (every if "" in still else still)  # "": passes not split by DP rank
    if not decode and finished is not None and finished == before.finished:
        return idle | every
    return idle


def _quiet(series: Series, idle: set[str]) -> list[tuple[dict[str, str], float]]:
    """A gauge of running work, 0 on the idle DP ranks."""
    return [(labels, 0.0 if _dp(labels) in idle else value) for labels, value in series]


def _accepted(
    finished: tuple[float, float, float] | None, before: _Counters | None
) -> float | None:
    """Accepted drafts: each finished request's tokens less its verify calls (one token of
    the target's each) and its first token (from prefill).

    A request that finished with no token (aborted while queued) takes one from the sum; the
    counter holds its last value until the sum passes it again, so Prometheus never reads a
    dip as a restart. A restart (any of the three went down) starts it again.
    """
    if finished is None:
        return None
    generated, verify_calls, requests = finished
    accepted = max(generated - verify_calls - requests, 0.0)
    if before is None or before.accepted is None or before.finished is None:
        return accepted
    if any(now < then for now, then in zip(finished, before.finished, strict=True)):
        return accepted
    return max(accepted, before.accepted)


def _window_accept_length(
    finished: tuple[float, float, float] | None,
    accepted: float | None,
    before: _Counters | None,
) -> tuple[float | None, str | None]:
    """``1 + accepted / verify calls`` over the window since the previous scrape, or None
    where the counters say nothing of it: absent, a first scrape, a restart (a counter went
    down), or no verify call counted in it; with which counters disagreed, if they did."""
    if finished is None or accepted is None or before is None:
        return None, None
    if before.finished is None or before.accepted is None:
        return None, None
    if any(now < then for now, then in zip(finished, before.finished, strict=True)):
        return None, None
    verify_calls = finished[1] - before.finished[1]
    if verify_calls <= 0:
        return None, None
    return accept_length((_ACCEPTED_NAME, accepted - before.accepted), (_VERIFY_NAME, verify_calls))


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
