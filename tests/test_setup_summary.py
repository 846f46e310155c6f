"""What specwatch found of a server, said at start and on its landing page: engine, algorithm,
draft count in the engine's own terms, each endpoint found or refused, the baseline and its
source. A wrong URL or a missing baseline shows in the first minute, not at the first page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config import TargetConfig
from exporter.exposition.landing import landing_page
from exporter.exposition.setup import setup_lines
from exporter.settings import validate
from exporter.target import Target
from tests.support.daemon import run_daemon
from tests.support.fake_sglang import FakeSGLang, Route, exposition, fake_sglang, server_info
from tests.support.tools import free_port
from tests.support.upstream_servers import vllm_schema


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        fake.routes["/metrics"] = Route(body=exposition().encode())
        fake.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
        yield fake


def target(**config: object) -> Target:
    return Target.from_config(validate(TargetConfig, {"name": "t", **config}))


def found(t: Target) -> dict[str, str]:
    return dict(setup_lines(t))


def test_before_the_first_scrape_nothing_is_claimed(server: FakeSGLang) -> None:
    seen = found(target(url=server.url))
    assert seen["engine"].startswith("not known yet")
    assert seen["speculation"].startswith("not known yet")
    assert seen["metrics"] == f"not asked yet ({server.url}/metrics)"
    assert seen["baseline"].startswith("none configured: speed is judged once one is learned")


def test_sglang_from_its_base_url_in_its_own_terms(server: FakeSGLang) -> None:
    t = target(url=server.url, baseline={"curve": "1:82,48:1500"})
    assert t.upstream is not None
    t.upstream.scrape_once()
    assert found(t) == {
        "engine": "SGLang (detected)",
        "speculation": "EAGLE, speculative_num_steps=3, speculative_eagle_topk=1, "
        "speculative_num_draft_tokens=4",
        "draft": "AQ-MedAI/Kimi-K2-Instruct-eagle3: a hub id, no file here to read, so its "
        "kind is known only from the algorithm (EAGLE); set draft_config to its config.json "
        "(docs/deployment.md)",
        "metrics": f"found at {server.url}/metrics",
        "server_info": f"found at {server.url}/server_info",
        "baseline": "curve 1:82, 48:1,500 (curve), configured",
    }


def test_vllm_in_its_terms_and_its_absent_server_info(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=vllm_schema("vllm:", 100, 150, (0.8, 0.5, 0.2)))
    t = target(url=server.url, engine="vllm")
    assert t.upstream is not None
    t.upstream.scrape_once()
    seen = found(t)
    assert seen["engine"] == "vLLM (configured)"
    assert seen["server_info"] == "not asked: this engine serves none"


def test_a_refused_endpoint_is_on_the_landing_page_with_what_was_tried(
    server: FakeSGLang,
) -> None:
    t = target(url=f"{server.url}/v1")
    assert t.upstream is not None
    t.upstream.scrape_once()
    page = landing_page([t], 60.0).decode()
    assert f"metrics: REFUSED at {server.url}/v1/metrics: HTTP 404 at /v1/metrics" in page
    assert "server_info: none: HTTP 404 at /v1/server_info" in page
    assert "baseline: none configured" in page


@pytest.mark.e2e
def test_the_daemon_logs_what_it_found_once_the_server_answers(
    server: FakeSGLang, tmp_path: Path
) -> None:
    port = free_port()
    args = ["--url", server.url, "--baseline-tok-s", "1500"]
    expected = (
        "target default: engine: SGLang (detected); speculation: EAGLE, speculative_num_steps=3, "
        "speculative_eagle_topk=1, speculative_num_draft_tokens=4; draft: AQ-MedAI/"
        "Kimi-K2-Instruct-eagle3: a hub id, no file here to read, so its kind is known only "
        "from the algorithm (EAGLE); set draft_config to its config.json (docs/deployment.md); "
        "metrics: found at "
        f"{server.url}/metrics; server_info: found at {server.url}/server_info; "
        "baseline: 1,500 tok/s (single value), configured"
    )
    with run_daemon(args, port) as daemon:
        daemon.output.wait_line(expected, timeout=20)
    assert "target default: engine: not known yet" in daemon.logged


def test_a_huge_algorithm_from_the_server_is_said_bounded(server: FakeSGLang) -> None:
    """A 1 MB ``speculative_algorithm`` in /server_info made a 2 MB log line (and landing
    page), which filled the daemon's stderr pipe and held its stop past 10 s."""
    server.routes["/server_info"] = Route(
        body=server_info(speculative_algorithm="EAGLE3" + "X" * 1_000_000),
        content_type="application/json",
    )
    t = target(url=server.url)
    assert t.upstream is not None
    t.upstream.scrape_once()
    seen = found(t)
    assert seen["speculation"].startswith("EAGLE3XXX")
    assert all(len(words) < 1_000 for words in seen.values()), {k: len(v) for k, v in seen.items()}
