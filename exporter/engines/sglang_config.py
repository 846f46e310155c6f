"""SGLang's arguments as specwatch's ``ServerConfig``: its ``server_args`` start-up line and
its ``/server_info`` JSON, which carry the same fields in SGLang's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from exporter.engines.server_config import ServerConfig, coerce
from exporter.engines.sglang import NAME
from exporter.redact import drop_secrets

# ServerArgs / /server_info field -> ServerConfig field, with the type to coerce to.
_ARG_FIELDS: dict[str, tuple[str, type]] = {
    "speculative_algorithm": ("algorithm", str),
    "speculative_draft_model_path": ("draft_model_path", str),
    "speculative_num_steps": ("num_steps", int),
    "speculative_eagle_topk": ("eagle_topk", int),
    "speculative_num_draft_tokens": ("num_draft_tokens", int),
    "disable_cuda_graph": ("disable_cuda_graph", bool),
    "cuda_graph_max_bs": ("cuda_graph_max_bs", int),
    "log_level": ("log_level", str),
    "decode_log_interval": ("decode_log_interval", int),
    "max_running_requests": ("max_running_requests", int),
    "enable_metrics": ("enable_metrics", bool),
    "speculative_adaptive": ("adaptive", bool),
    "served_model_name": ("served_model", str),
    "disaggregation_mode": ("disaggregation_mode", str),
    "pp_size": ("pipeline_stages", int),
}


def from_server_args(args: Mapping[str, Any]) -> ServerConfig:
    """A config from ServerArgs fields (the startup line or the flat ``/server_info`` JSON)."""
    values = {
        target: coerce(args.get(source), kind) for source, (target, kind) in _ARG_FIELDS.items()
    }
    if isinstance(values["algorithm"], str):
        values["algorithm"] = values["algorithm"].upper()
    if values["served_model"] is None:  # SGLang's default served name is its model path
        values["served_model"] = coerce(args.get("model_path"), str)
    values["max_running_requests"] = _per_scheduler(values["max_running_requests"], args)
    return _decode_graphs(ServerConfig(**values), args.get("cuda_graph_config"))


def start_config(args: Mapping[str, Any]) -> ServerConfig:
    """The configuration a ``server_args`` line states. Its ``max_running_requests`` says
    whether the operator set the cap (a number) or left it to SGLang (None), which lowers it
    to 48 for EAGLE: only a chosen cap is worth questioning."""
    config = replace(from_server_args(args), engine=NAME)
    if "max_running_requests" in args:
        config = replace(config, max_running_requests_set=args["max_running_requests"] is not None)
    return config


def _per_scheduler(cap: int | None, args: Mapping[str, Any]) -> int | None:
    """``--max-running-requests`` as each scheduler applies it. With DP attention the flag is
    the node's, and each DP rank's scheduler takes ``cap // width``: the share its startup
    line and ``effective_max_running_requests_per_dp`` report, and the running requests its
    decode lines count against. The width is ``attn_dp_size`` from SGLang 0.5.23 (which
    resolves ``--dp-size N --enable-dp-attention`` to it and ``dp_size=1``), ``dp_size`` with
    ``enable_dp_attention`` before."""
    width: int | None = coerce(args.get("attn_dp_size"), int)
    if width is None and args.get("enable_dp_attention") is True:
        width = coerce(args.get("dp_size"), int)
    if cap is None or not width or width < 2:
        return cap
    return max(cap // width, 1)


def _decode_graphs(config: ServerConfig, graphs: object) -> ServerConfig:
    """The decode phase of SGLang 0.5.23's resolved ``cuda_graph_config``: its backend is
    ``disabled`` however graphs were turned off (``--cuda-graph-backend-decode=disabled``,
    ``--disable-decode-cuda-graph``, the folded ``--disable-cuda-graph``, an attention backend
    without graphs), and its ``max_bs`` is the largest batch captured."""
    decode = graphs.get("decode") if isinstance(graphs, Mapping) else None
    if not isinstance(decode, Mapping):
        return config
    backend = coerce(decode.get("backend"), str)
    if backend is not None and not config.disable_cuda_graph:
        config = replace(
            config, disable_cuda_graph=backend == "disabled", decode_graph_backend=backend
        )
    max_bs: int | None = coerce(decode.get("max_bs"), int)
    if config.cuda_graph_max_bs is None and max_bs is not None:
        config = replace(config, cuda_graph_max_bs=max_bs)
    return config


def from_server_info(info: Mapping[str, Any]) -> ServerConfig:
    """A config from ``/server_info``: server args plus the effective per-DP running cap.

    ``max_running_requests`` is ``None`` in the args when SGLang chose it itself (48 for EAGLE);
    the scheduler's ``effective_max_running_requests_per_dp`` tells the value in force.
    """
    config = replace(from_server_args(drop_secrets(info)), engine=NAME)
    states = info.get("internal_states")
    if config.max_running_requests is None and isinstance(states, list) and states:
        first = states[0] if isinstance(states[0], Mapping) else {}
        cap = coerce(first.get("effective_max_running_requests_per_dp"), int)
        config = replace(config, max_running_requests=cap)
    return config
