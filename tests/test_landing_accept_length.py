"""The landing page says the accept length now: from the log's fresh windows (the lowest DP
rank too), or from the server's /metrics when specwatch reads no log of it; and whether the
draft's kind was read from its files here or only its algorithm is known."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config import TargetConfig
from exporter.engines.record import StatsRecord
from exporter.exposition.landing import landing_page
from exporter.target import Target
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang, server_info
from tests.support.sglang_metrics import Rank, SGLangMetrics
from tests.support.upstream_servers import vllm_schema


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def test_a_metrics_only_vllm_target_shows_its_accept_length(server: FakeSGLang) -> None:
    target = Target.from_config(TargetConfig(name="v", metrics_url=f"{server.url}/metrics"))
    assert target.upstream is not None
    server.routes["/metrics"] = Route(
        body=vllm_schema("vllm:", drafts=1000, accepted=1500, per_position=(700, 500, 300))
    )
    target.upstream.scrape_once()
    # 400 drafts, 120 accepted since: 1 + 120 / 400 = 1.30
    server.routes["/metrics"] = Route(
        body=vllm_schema("vllm:", drafts=1400, accepted=1620, per_position=(780, 530, 310))
    )
    target.upstream.scrape_once()
    page = landing_page([target], 60.0).decode()
    assert "accept length 1.30 from the server's /metrics counters since the scrape before" in page


def test_a_metrics_only_sglang_target_says_gauge_or_counters(server: FakeSGLang) -> None:
    """SGLang's gauge is all a first scrape has; from the second, its counters' window."""
    target = Target.from_config(TargetConfig(name="s", metrics_url=f"{server.url}/metrics"))
    assert target.upstream is not None
    metrics = SGLangMetrics(dp=1)
    metrics.stats(0, Rank(running=6, accept_length=2.1))
    metrics.decode_passes(0, graph=100, eager=0)
    metrics.completions(10, tokens=20, drafts_accepted=10)
    server.routes["/metrics"] = Route(body=metrics.body())
    target.upstream.scrape_once()
    page = landing_page([target], 60.0).decode()
    assert "accept length 2.10 from the server's /metrics gauge of its newest window" in page
    metrics.decode_passes(0, graph=100, eager=0)
    metrics.completions(10, tokens=20, drafts_accepted=6)  # 13 rounds each
    server.routes["/metrics"] = Route(body=metrics.body())
    target.upstream.scrape_once()
    page = landing_page([target], 60.0).decode()
    assert "accept length 1.46 from the server's /metrics counters since the scrape before" in page


def test_log_windows_show_the_mean_and_the_lowest_dp_rank() -> None:
    target = Target.from_config(TargetConfig(name="n"))
    records = [
        StatsRecord("decode", "2026-12-01T10:00:00", dp_rank=rank, accept_length=length)
        for rank, length in enumerate((2.4, 2.4, 1.0, 2.4))
    ]
    target.state.add_records(records, time.time())
    page = landing_page([target], 60.0).decode()
    assert "accept length 2.05 (lowest DP rank 1.00)" in page


def draft_target(server: FakeSGLang, draft: str) -> Target:
    """A target whose /server_info names ``draft`` as the draft's path, scraped once."""
    server.routes["/server_info"] = Route(
        body=server_info(speculative_draft_model_path=draft), content_type="application/json"
    )
    target = Target.from_config(TargetConfig(name="s", server_info_url=f"{server.url}/server_info"))
    assert target.upstream is not None
    target.upstream.scrape_once()
    return target


def test_the_page_says_the_draft_s_kind_was_read_from_its_mounted_files(
    server: FakeSGLang, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    page = landing_page([draft_target(server, str(tmp_path))], 60.0).decode()
    assert f"draft: {tmp_path}: LlamaForCausalLMEagle3, read from its config.json here" in page


def test_the_page_says_only_the_algorithm_is_known_without_the_model_files(
    server: FakeSGLang, tmp_path: Path
) -> None:
    missing = tmp_path / "not-mounted"
    page = landing_page([draft_target(server, str(missing))], 60.0).decode()
    assert f"draft: {missing}: no config.json at that path here" in page
    assert "known only from the algorithm (EAGLE)" in page
    assert "mount the model files read-only at the same path" in page
