"""The daemon end to end: ``specwatch run`` scraping TensorRT-LLM and llama.cpp over loopback
while their counters keep counting, into the same series as SGLang's and vLLM's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import run_daemon
from tests.support.fake_sglang import fake_sglang
from tests.support.upstream_servers import (
    TRTLLM_PATH,
    TrtllmMetrics,
    live,
    steady_llamacpp,
    steady_trtllm,
)

pytestmark = pytest.mark.e2e


def test_the_daemon_reads_tensorrt_llm_and_llama_cpp_as_it_reads_vllm(
    tmp_path: Path, port: int
) -> None:
    # The gauge of each iteration says 2.0; requests finished in any window say 3.0.
    trtllm_body = steady_trtllm(TrtllmMetrics(), accepted_at=(36, 28, 16), iteration_accepted=8)
    llama_body = steady_llamacpp((0.8, 0.5, 0.2))

    with fake_sglang() as server:
        config = tmp_path / "specwatch.yaml"
        config.write_text(
            "targets:\n"
            f"  - {{name: trt-0, engine: trtllm, metrics_url: '{server.url}{TRTLLM_PATH}',"
            " scrape_interval: 1}\n"
            f"  - {{name: llama-0, metrics_url: '{server.url}/metrics', scrape_interval: 1}}\n"
        )
        with (
            live(server, TRTLLM_PATH, trtllm_body),
            live(server, "/metrics", llama_body),
            run_daemon(["--config", str(config)], port) as daemon,
        ):
            trt = {"target": "trt-0"}
            ratio = "specwatch_position_accept_ratio"
            s = daemon.wait_metric(ratio, lambda v: v is not None, **trt, position="2")
            assert s.value(ratio, **trt, position="2") == pytest.approx(0.4)
            assert s.value("specwatch_accept_length", **trt) == pytest.approx(3.0)
            assert s.value("specwatch_target_info", **trt, engine="trtllm") == 1
            assert s.value("specwatch_accept_length_floor", **trt) == pytest.approx(1.8)
            (info,) = [x for x in s.samples if x.name == "specwatch_speculative_info"
                       and x.labels["target"] == "trt-0"]  # fmt: skip
            assert (info.labels["algorithm"], info.labels["num_steps"]) == ("EAGLE3", "3")
            first = s.value("specwatch_position_accepted_tokens_total", **trt, position="0")
            assert first is not None and first > 0
            s = daemon.wait_metric(
                "specwatch_position_accepted_tokens_total",
                lambda v: v is not None and v > first,
                **trt,
                position="0",
            )
            assert (s.value("specwatch_gen_throughput_tokens_per_second", **trt) or 0) > 0

            llama = {"target": "llama-0"}
            s = daemon.wait_metric("specwatch_accept_length", lambda v: v is not None, **llama)
            assert s.value("specwatch_accept_length", **llama) == pytest.approx(2.5)
            assert s.value("specwatch_target_info", **llama, engine="vllm") == 1
            assert s.value("specwatch_running_requests", **llama) == 3
            assert s.value("specwatch_drafts_total", **llama) is not None
            assert s.value("specwatch_upstream_up", **llama, endpoint="metrics") == 1
