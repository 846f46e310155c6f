"""The landing page says the accept length now: from the log's fresh windows (the lowest DP
rank too), or from the server's /metrics when specwatch reads no log of it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from exporter.config import TargetConfig
from exporter.engines.record import StatsRecord
from exporter.exposition.landing import landing_page
from exporter.target import Target
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang
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
    assert "accept length 1.30 from the server's /metrics" in page


def test_log_windows_show_the_mean_and_the_lowest_dp_rank() -> None:
    target = Target.from_config(TargetConfig(name="n"))
    records = [
        StatsRecord("decode", "2026-12-01T10:00:00", dp_rank=rank, accept_length=length)
        for rank, length in enumerate((2.4, 2.4, 1.0, 2.4))
    ]
    target.state.add_records(records, time.time())
    page = landing_page([target], 60.0).decode()
    assert "accept length 2.05 (lowest DP rank 1.00)" in page
