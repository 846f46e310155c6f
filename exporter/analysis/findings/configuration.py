"""Findings about how the server was started: an EAGLE-3 draft under the EAGLE algorithm,
decode without CUDA graphs, running requests pinned at their cap."""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.analysis.algorithms import engine_fix, own_fix
from exporter.analysis.findings.shapes import (
    DecodeSample,
    Finding,
    Observations,
    mean_accept_length,
    speedup_note,
)
from exporter.analysis.thresholds import MIN_WINDOWS
from exporter.engines.server_config import ServerConfig

NO_GRAPH_SHARE = 0.5  # more than half the decode windows without CUDA graph
CAPPED_SHARE = 0.5  # at least half the windows at the cap with a queue


_EAGLE3_NAME = re.compile(r"eagle[-_.]?3", re.IGNORECASE)


def eagle3_draft_evidence(config: ServerConfig) -> str | None:
    """Why the draft is believed to be an EAGLE-3 model, or ``None`` if nothing says so.

    The class the draft loaded as (the engine's start-up lines) or the draft's ``config.json``
    are proof.
    ``/server_info`` carries neither, only the draft path; a path naming EAGLE-3 is used as
    evidence then, and said so, because it is all a scrape-only deployment has.
    """
    if (config.draft_architecture or "").endswith("Eagle3"):
        return f"the draft loaded as {config.draft_architecture}"
    if config.draft_has_eagle_config:
        return "the draft's config.json has an eagle_config (EAGLE-3 layer fusion)"
    if config.draft_architecture is None and _EAGLE3_NAME.search(config.draft_model_path or ""):
        return f"the draft path '{config.draft_model_path}' names an EAGLE-3 model"
    return None


def eagle3_draft_with_eagle_algorithm(obs: Observations) -> Finding | None:
    config = obs.config
    evidence = eagle3_draft_evidence(config)
    if config.algorithm != "EAGLE" or evidence is None:
        return None
    mean = mean_accept_length(obs.windows)
    measured = f"; accept length so far {mean:.2f}" if mean is not None else ""
    return Finding(
        code="eagle3_draft_with_eagle_algorithm",
        summary="EAGLE-3 draft served with the EAGLE algorithm",
        seen=f"The server's configuration names the EAGLE algorithm while {evidence}{measured}.",
        why=(
            "Only the algorithm string EAGLE3 makes the target capture the three hidden layers "
            "an EAGLE-3 draft fuses; under EAGLE that fusion is skipped silently, drafts are "
            "garbage and accept length sits at 1.00, so every round costs a draft pass for nothing."
        ),
        fix=(
            "Restart the server with the EAGLE-3 algorithm, same draft and flags otherwise: "
            f"{engine_fix('eagle3_algorithm', obs.config.engine)}."
        ),
    )


def cuda_graph_disabled(obs: Observations) -> Finding | None:
    config = obs.config
    if config.disable_cuda_graph:
        seen, fix = graphs_off_by_configuration(config)
    else:
        share = _no_graph_share(obs)
        if share is None or share <= NO_GRAPH_SHARE:
            return None
        seen = f"{share:.0%} of recent decode windows ran without CUDA graph{_batch_note(obs)}."
        fix = (
            f"Raise {own_fix(config, 'graph_batch_cap')} to at least the usual number of "
            "running requests (larger batches run eagerly), and check the capture lines at "
            "startup succeeded."
        )
    return Finding(
        code="cuda_graph_disabled",
        summary="Decode runs without CUDA graphs",
        seen=seen,
        why=(
            "Speculative decoding launches many small kernels per round (draft steps plus "
            "verify); without CUDA graphs the launch overhead can eat the whole speed-up."
        ),
        fix=fix,
    )


def graphs_off_by_configuration(config: ServerConfig) -> tuple[str, str]:
    """What the configuration says and the restart that turns graphs on, in the flags of the
    engine that logged it (``cuda_graphs_off`` and ``cuda_graphs_on`` among its fixes)."""
    said = (
        "cuda_graphs_off_backend"
        if config.decode_graph_backend == "disabled"
        else "cuda_graphs_off"
    )
    return f"{own_fix(config, said)}.", f"Restart {own_fix(config, 'cuda_graphs_on')}."


def _no_graph_share(obs: Observations) -> float | None:
    """Share of decode windows without CUDA graph: from log windows, else from /metrics."""
    flags = [w.cuda_graph for w in obs.windows if w.cuda_graph is not None]
    if len(flags) >= MIN_WINDOWS:
        return flags.count(False) / len(flags)
    if obs.cuda_graph_share is not None:
        return 1.0 - obs.cuda_graph_share
    return None


def _batch_note(obs: Observations) -> str:
    cap = obs.config.cuda_graph_max_bs
    running = [w.running for w in obs.windows if w.running is not None]
    if cap is not None and running and max(running) > cap:
        return f" (up to {max(running)} running requests, graphs captured up to batch size {cap})"
    return ""


def running_requests_capped(obs: Observations) -> Finding | None:
    """Running requests pinned at the cap with a queue: a warning when the engine chose the
    cap (its ``running_cap_default``), information when the operator set it (the node is saturated
    at the load it was sized for, and the flag they already set is no fix)."""
    cap = obs.config.max_running_requests
    # (running, queued) of the windows that logged a running count; queued absent counts as 0.
    windows = [w for w in obs.windows if w.running is not None]
    if cap is None or len(windows) < MIN_WINDOWS:
        return None
    pinned = [w for w in windows if (w.running or 0) >= cap and (w.queued or 0) > 0]
    if len(pinned) / len(windows) < CAPPED_SHARE:
        return None
    seen = (
        f"{len(pinned)} of {len(windows)} recent decode windows at {cap} running requests "
        f"with up to {max(w.queued or 0 for w in pinned)} queued"
    )
    if obs.config.max_running_requests_set:
        return Finding(
            code="running_requests_saturated",
            summary=f"Saturated at the max_running_requests={cap} it was started with",
            seen=f"{seen}{_throughput_note(pinned)}{speedup_note(obs.speedup)}.",
            why=(
                "The node serves as many requests as it was configured for and queues the "
                "rest: a capacity question, not a fault of speculation."
            ),
            fix=(
                "Nothing to fix in speculation; add capacity, or raise "
                f"{own_fix(obs.config, 'running_cap')} (and "
                f"{own_fix(obs.config, 'graph_batch_cap')}) if memory allows."
            ),
        )
    return Finding(
        code="running_requests_capped",
        summary=f"Running requests pinned at max_running_requests={cap}",
        seen=f"{seen}{speedup_note(obs.speedup)}.",
        why=(
            f"Requests wait in the queue while the GPU could batch more; {_chosen(obs.config)}, "
            "which can cost more throughput than speculation gains."
        ),
        fix=(
            f"Set {own_fix(obs.config, 'running_cap')} explicitly (and "
            f"{own_fix(obs.config, 'graph_batch_cap')} to match) if memory allows, or compare "
            "against a non-speculative server at the same concurrency."
        ),
    )


def _chosen(config: ServerConfig) -> str:
    """How the engine picks its cap when none is given, in its words (its
    ``running_cap_default``; every engine's that says, while the engine is not known)."""
    return engine_fix("running_cap_default", config.engine) or "the engine chose this cap"


def _throughput_note(pinned: Sequence[DecodeSample]) -> str:
    """The mean throughput the saturated windows reached: what the configured cap delivers."""
    reached = [w.throughput for w in pinned if w.throughput is not None]
    return f", at {sum(reached) / len(reached):.0f} tok/s" if reached else ""
