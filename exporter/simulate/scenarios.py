"""Incident scenarios for the simulator, with the values each one intends.

Every scenario models the same node (an 8-GPU server with an EAGLE-3 drafter) so that one
baseline curve fits all of them; each engine's simulation writes it in its own lines. The
intended values live here, in data, because the tests and the demo must read the expectations
from the same place the generator does instead of re-deriving them from its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from exporter.engines.simulation import Behaviour, Deployment, Phase

# Non-speculative throughput of the node by running requests (2,370 tok/s at concurrency 128,
# 82 tok/s single-stream). Piecewise linear, clamped at both ends.
NODE_BASELINE: tuple[tuple[int, float], ...] = ((1, 82.0), (48, 1500.0), (128, 2370.0))
# The undertrained scenario's node measured its own single-stream baseline: 90 tok/s.
UNDERTRAINED_BASELINE: tuple[tuple[int, float], ...] = ((1, 90.0),)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    phases: tuple[Phase, ...]
    baseline: tuple[tuple[int, float], ...]
    findings: tuple[str, ...]  # finding codes (docs/metrics.md) active at the log's end
    # What the scenario's drafter should reach (the EAGLE-3 drafter's published 3.0); None
    # where the drafter's algorithm floor is the only standard (a lookup drafter).
    expected_accept_length: float | None = 3.0

    def baseline_flag(self) -> str:
        """The ``--baseline-curve`` value that describes this scenario's baseline."""
        return ",".join(f"{running}:{tok_s:g}" for running, tok_s in self.baseline)


def logging_requests(chosen: Scenario, form: str) -> Scenario:
    """``chosen`` with every server run logging its finished requests in ``form``."""
    phases = tuple(
        replace(phase, deployment=replace(phase.deployment, log_requests=form))
        for phase in chosen.phases
    )
    return replace(chosen, phases=phases)


_HEALTHY_DRAFT = "/models/drafts/kimi-k25-eagle3-synth100k"
_BROKEN_DRAFT = "/models/drafts/kimi-k25-eagle3-custom-v1"
_EAGLE3_ARCH = "LlamaForCausalLMEagle3"

_EAGLE3_4 = Deployment("EAGLE3", _HEALTHY_DRAFT, _EAGLE3_ARCH, 3, 1, 4)
_BROKEN_4 = Deployment("EAGLE3", _BROKEN_DRAFT, _EAGLE3_ARCH, 3, 1, 4)
_LOGGING_4 = Deployment("EAGLE3", _HEALTHY_DRAFT, _EAGLE3_ARCH, 3, 1, 4, log_requests="text")

_HEALTHY = Phase(_EAGLE3_4, Behaviour(3.2, 0.12, 48, 0, 2700.0))
# A collapsed drafter: every window `accept len: 1.00`, ~600 tok/s at 48 running, 32 waiting.
_COLLAPSED = Phase(_BROKEN_4, Behaviour(1.0, 0.0, 48, 32, 600.0))


_ADAPTIVE = Deployment(
    "EAGLE3",
    _HEALTHY_DRAFT,
    _EAGLE3_ARCH,
    3,
    1,
    4,
    cuda_graph_max_bs=128,
    adaptive=True,
    max_running_requests=128,
)
_ADAPTIVE_BROKEN = Deployment(
    "EAGLE3", _BROKEN_DRAFT, _EAGLE3_ARCH, 3, 1, 4, adaptive=True, max_running_requests=128
)
_NGRAM = Deployment("NGRAM", None, None, 7, 1, 8)
# The model's own multi-token-prediction layers, from the target's checkpoint: the engine
# loads them as a class of its own, so the scenario names none.
_MTP = Deployment("MTP", "moonshotai/Kimi-K2.5", None, 3, 1, 4)


def _scenarios() -> dict[str, Scenario]:
    eagle_flag = Deployment("EAGLE", _HEALTHY_DRAFT, _EAGLE3_ARCH, 3, 1, 4)
    # Undertrained: 16 draft tokens, graphs disabled, one stream at a time, metrics not enabled.
    undertrained = Deployment(
        "EAGLE3",
        "/models/drafts/kimi-k25-eagle3-synth10k",
        _EAGLE3_ARCH,
        5,
        4,
        16,
        disable_cuda_graph=True,
        enable_metrics=False,
    )
    # Mismatched: a drafter trained for the previous model version.
    mismatched = Deployment("EAGLE3", "AQ-MedAI/Kimi-K2-Instruct-eagle3", _EAGLE3_ARCH, 3, 1, 4)
    listing = (
        Scenario(
            "healthy",
            "EAGLE-3 drafter doing its job: accept length ~3.2, ~1.8x the baseline",
            (_HEALTHY,),
            NODE_BASELINE,
            (),
        ),
        Scenario(
            "collapsed",
            "broken drafter: accept length 1.00, 600 tok/s at 48 running",
            (_COLLAPSED,),
            NODE_BASELINE,
            ("running_requests_capped",),
        ),
        Scenario(
            "eagle-flag",
            "EAGLE-3 draft started under algorithm EAGLE",
            (Phase(eagle_flag, _COLLAPSED.behaviour),),
            NODE_BASELINE,
            ("eagle3_draft_with_eagle_algorithm", "running_requests_capped"),
        ),
        Scenario(
            "undertrained",
            "accept length ~2.45 of 16 draft tokens, no CUDA graphs, 57 vs 90 tok/s",
            (Phase(undertrained, Behaviour(2.45, 0.1, 1, 0, 57.0)),),
            UNDERTRAINED_BASELINE,
            ("cuda_graph_disabled", "draft_tokens_excessive", "metrics_endpoint_disabled"),
        ),
        Scenario(
            "mismatched",
            "drafter for another model version: accept length ~1.1, 52 vs 82 tok/s",
            (Phase(mismatched, Behaviour(1.1, 0.04, 1, 0, 52.0)),),
            NODE_BASELINE,
            (),
        ),
        Scenario(
            "hidden-share",
            "windows average accept length 2.4 while 15% of requests (one class) accept nothing",
            (Phase(_LOGGING_4, Behaviour(2.4, 0.08, 48, 0, 2025.0, no_benefit_share=0.15)),),
            NODE_BASELINE,
            ("requests_without_benefit",),
        ),
        Scenario(
            "adaptive",
            "adaptive speculation at 96 running: drafting off by design, at the baseline",
            (Phase(_ADAPTIVE, Behaviour(1.0, 0.0, 96, 0, 2080.0)),),
            NODE_BASELINE,
            (),
        ),
        Scenario(
            "adaptive-given-up",
            "adaptive speculation keeps drafting off: the drafter accepts nothing when probed",
            (Phase(_ADAPTIVE_BROKEN, Behaviour(1.02, 0.0, 16, 0, 556.0, probe_every=4)),),
            NODE_BASELINE,
            ("adaptive_drafter_given_up",),
        ),
        Scenario(
            "ngram",
            "n-gram lookup on repetitive traffic: accept length ~1.6, 1.25x the baseline",
            (Phase(_NGRAM, Behaviour(1.6, 0.05, 48, 0, 1875.0)),),
            NODE_BASELINE,
            (),
            expected_accept_length=None,
        ),
        Scenario(
            "mtp",
            "the model's own MTP layers: accept length ~1.7, 1.13x the baseline",
            (Phase(_MTP, Behaviour(1.7, 0.05, 48, 0, 1700.0)),),
            NODE_BASELINE,
            (),
            expected_accept_length=None,
        ),
        Scenario(
            "recovery",
            "broken drafter for 60 s, then a restart with a working drafter",
            (
                Phase(_COLLAPSED.deployment, _COLLAPSED.behaviour, traffic_seconds=60.0),
                _HEALTHY,
            ),
            NODE_BASELINE,
            (),
        ),
    )
    return {scenario.name: scenario for scenario in listing}


SCENARIOS: Mapping[str, Scenario] = MappingProxyType(_scenarios())
