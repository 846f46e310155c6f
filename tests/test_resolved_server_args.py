"""SGLang 0.5.23's resolved server arguments, as its ``/server_info`` serves them and its
``server_args={...}`` line logs them (both ``ServerArgs.resolved_dict()``).

From 0.5.23 the attention-DP width is ``attn_dp_size`` (``--dp-size N --enable-dp-attention``
resolves to ``attn_dp_size=N, dp_size=1``), and CUDA graphs are set per phase in
``cuda_graph_config`` (``--cuda-graph-backend-decode``, ``--disable-decode-cuda-graph``,
``--cuda-graph-max-bs-decode``; the old ``--disable-cuda-graph`` folds into it).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.analysis.findings.configuration import graphs_off_by_configuration
from exporter.engines.record import LogLine
from exporter.engines.server_config import ServerConfig
from exporter.engines.sglang import classify
from exporter.engines.sglang_startup import parse_event
from exporter.sources.upstream import UpstreamScraper
from exporter.state.runs import ConfigTracker
from tests.support.daemon import doctor
from tests.support.fake_sglang import API_KEY, Route, exposition, fake_sglang
from tests.support.loglines import stamp


def cuda_graph_config(decode: str = "full", max_bs: int | None = 256) -> dict[str, Any]:
    """``CudaGraphConfig`` as ``resolved_dict`` expands it: a dict of each phase's fields."""

    def phase(backend: str, max_bs: int | None) -> dict[str, Any]:
        return {
            "backend": backend,
            "max_bs": max_bs,
            "bs": None if max_bs is None else [1, 2, 4, 8, 16, 32, 64, 128, max_bs],
            "tc_compiler": "eager",
            "max_context_size": None,
            "full_prefill_max_req": None,
            "full_prefill_prefix_chunk_tokens": None,
            "max_seq_len": None,
        }

    return {"decode": phase(decode, max_bs), "prefill": phase("breakable", 2048)}


def resolved(**overrides: object) -> dict[str, Any]:
    """The 0.5.23 fields of a node of four attention-DP groups over TP 8."""
    return {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "lmsys/SGLang-EAGLE3-Llama-3.1-8B-Instruct",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "tp_size": 8,
        "dp_size": 1,
        "attn_dp_size": 4,
        "enable_dp_attention": True,
        "max_running_requests": 256,
        "disable_cuda_graph": False,
        "disable_decode_cuda_graph": False,
        "cuda_graph_backend_decode": None,
        "cuda_graph_max_bs_decode": None,
        "cuda_graph_config": cuda_graph_config(),
        "launch_command": f"python -m sglang.launch_server --api-key {API_KEY} --attn-dp-size 4",
        **overrides,
    }


def info(fields: dict[str, Any]) -> bytes:
    """``/server_info``: the resolved fields, the scheduler's state per DP group, the version."""
    states = [{"effective_max_running_requests_per_dp": 64}] * 4
    return json.dumps({**fields, "internal_states": states, "version": "0.5.23"}).encode()


def scraped_config(fields: dict[str, Any]) -> ServerConfig:
    with fake_sglang() as server:
        server.routes["/server_info"] = Route(body=info(fields))
        config = UpstreamScraper(server_info_url=f"{server.url}/server_info").scrape_once().config
    assert config is not None
    return config


def logged_config(fields: dict[str, Any]) -> ServerConfig:
    tracker = ConfigTracker()
    line = f"{stamp(0)} server_args={ {'model_path': 'meta-llama/Llama-3.1-8B', **fields}!r}"
    logged = classify(line)
    assert isinstance(logged, LogLine)
    event = parse_event(logged.message)
    assert event is not None
    tracker.observe(event)
    return tracker.config


@pytest.mark.parametrize("read", [scraped_config, logged_config], ids=["server_info", "log"])
def test_each_attention_dp_group_takes_its_share_of_the_running_cap(read: Any) -> None:
    assert read(resolved()).max_running_requests == 64
    assert read(resolved(attn_dp_size=1, enable_dp_attention=False)).max_running_requests == 256


@pytest.mark.parametrize("read", [scraped_config, logged_config], ids=["server_info", "log"])
@pytest.mark.parametrize(
    ("flags", "off"),
    [
        ({}, False),
        # --cuda-graph-backend-decode=disabled, or --disable-decode-cuda-graph, or an attention
        # backend without graphs: the resolved decode backend says it whatever the flag was.
        ({"cuda_graph_config": cuda_graph_config("disabled", None)}, True),
        ({"cuda_graph_config": cuda_graph_config("breakable")}, False),
    ],
)
def test_decode_graphs_are_off_when_the_resolved_decode_backend_is_disabled(
    read: Any, flags: dict[str, Any], off: bool
) -> None:
    assert read(resolved(**flags)).disable_cuda_graph is off


@pytest.mark.parametrize("read", [scraped_config, logged_config], ids=["server_info", "log"])
def test_graphs_off_by_the_decode_backend_are_said_so_not_as_disable_cuda_graph(read: Any) -> None:
    """The server's disable_cuda_graph reads False there: quoting it as True misleads."""
    fields = resolved(cuda_graph_config=cuda_graph_config("disabled", None))
    seen, fix = graphs_off_by_configuration(read(fields))
    assert "'disabled'" in seen and "disable_cuda_graph" not in seen
    assert "--cuda-graph-backend-decode" in fix


@pytest.mark.parametrize("read", [scraped_config, logged_config], ids=["server_info", "log"])
def test_the_decode_graphs_largest_batch_is_the_resolved_one(read: Any) -> None:
    assert read(resolved()).cuda_graph_max_bs == 256
    unresolved = resolved(cuda_graph_config=cuda_graph_config(max_bs=None))
    assert read(unresolved).cuda_graph_max_bs is None


@pytest.mark.e2e
def test_doctor_url_names_decode_graphs_turned_off_by_the_decode_backend() -> None:
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        fields = resolved(cuda_graph_config=cuda_graph_config("disabled", None))
        server.routes["/server_info"] = Route(body=info(fields))
        result = doctor("--url", server.url, "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1, result.stdout
    assert [f["code"] for f in report["findings"]] == ["cuda_graph_disabled"]
    assert "--cuda-graph-backend-decode" in report["findings"][0]["fix"]
    assert API_KEY not in result.stdout + result.stderr
