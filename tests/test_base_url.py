"""One base URL is enough: each engine's endpoints are found from it, over real loopback HTTP.

SGLang serves /metrics (with --enable-metrics) and /server_info (/get_server_info before
0.5.6), vLLM /metrics alone, TensorRT-LLM its exposition at /prometheus/metrics. A URL given
in the wrong place is understood, a 404 says what was tried and what to give, and an endpoint
absent by design is no finding: a healthy server given a wrong URL is never told to restart
with --enable-metrics.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cli import build_parser, main
from exporter.commands.doctor import diagnose
from exporter.config import TargetConfig, load_config
from exporter.exposition.setup import setup_lines
from exporter.settings import validate
from exporter.target import Target
from tests.support.fake_sglang import FakeSGLang, Route, exposition, fake_sglang, server_info
from tests.support.loglines import decode
from tests.support.metrics import Clock, Scrape, render
from tests.support.tools import free_port
from tests.support.upstream_servers import TRTLLM_PATH, TrtllmMetrics, vllm_schema


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def sglang(server: FakeSGLang, **info: object) -> None:
    server.routes["/metrics"] = Route(body=exposition().encode())
    server.routes["/server_info"] = Route(body=server_info(**info), content_type="application/json")


def watched(**config: str) -> tuple[Target, Scrape]:
    """A target of ``config``, its server scraped once, and what specwatch's scrape shows."""
    target = Target.from_config(validate(TargetConfig, {"name": "t", **config}))
    assert target.upstream is not None
    target.upstream.scrape_once()
    clock = Clock()
    clock.now = time.time()
    return target, render([target], clock)


def findings(scrape: Scrape) -> set[str]:
    return {s.labels["code"] for s in scrape.samples if s.name == "specwatch_finding"}


def up(scrape: Scrape) -> dict[str, float]:
    return {
        s.labels["endpoint"]: s.value for s in scrape.samples if s.name == "specwatch_upstream_up"
    }


def test_sglangs_base_url_gives_its_metrics_and_server_info(server: FakeSGLang) -> None:
    """An EAGLE-3 draft served with --speculative-algorithm EAGLE is named from the base URL
    alone: /server_info is read without being asked for."""
    sglang(server)
    target, seen = watched(url=server.url)
    assert up(seen) == {"metrics": 1.0, "server_info": 1.0}
    assert "eagle3_draft_with_eagle_algorithm" in findings(seen)
    assert target.upstream is not None
    assert target.upstream.metrics_url == f"{server.url}/metrics"


def test_sglang_before_0_5_6_answers_at_get_server_info(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=exposition().encode())
    server.routes["/get_server_info"] = Route(body=server_info(), content_type="application/json")
    _, seen = watched(url=server.url)
    assert up(seen) == {"metrics": 1.0, "server_info": 1.0}
    assert "eagle3_draft_with_eagle_algorithm" in findings(seen)


def test_tensorrt_llms_exposition_is_found_beside_its_json_metrics(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=b'[{"iter": 1}]', content_type="application/json")
    metrics = TrtllmMetrics()
    metrics.iteration(requests=4, accepted=8)
    server.routes[TRTLLM_PATH] = Route(body=metrics.body())
    target, seen = watched(url=server.url)
    assert target.upstream is not None
    assert target.upstream.metrics_url == f"{server.url}{TRTLLM_PATH}"
    assert up(seen) == {"metrics": 1.0}  # it serves no server info: not asked, not down
    assert "/server_info" not in server.paths
    assert not findings(seen)


def test_tensorrt_llms_exposition_url_given_as_the_base_url_is_understood(
    server: FakeSGLang,
) -> None:
    """Its path is one endpoint: the base URL is the server's, not ``.../prometheus``."""
    metrics = TrtllmMetrics()
    metrics.iteration(requests=4, accepted=8)
    server.routes[TRTLLM_PATH] = Route(body=metrics.body())
    target, seen = watched(url=f"{server.url}{TRTLLM_PATH}")
    assert target.upstream is not None
    assert target.upstream.endpoints.base == server.url
    assert up(seen) == {"metrics": 1.0}
    assert server.paths == [TRTLLM_PATH]


def test_vllm_is_never_asked_for_server_info(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=vllm_schema("vllm:", 100, 150, (0.8, 0.5, 0.2)))
    _, seen = watched(url=server.url)
    assert up(seen) == {"metrics": 1.0}
    assert server.paths == ["/metrics"]


def test_a_base_url_given_as_the_metrics_url_is_understood(server: FakeSGLang) -> None:
    """Pasted into --metrics-url, the base URL used to fetch '/', answer 404 and tell a
    healthy server to restart with --enable-metrics."""
    sglang(server)
    target, seen = watched(metrics_url=server.url + "/")
    assert up(seen)["metrics"] == 1.0
    assert "metrics_endpoint_disabled" not in findings(seen)
    assert target.upstream is not None and target.upstream.server_info_url is not None


def test_a_metrics_url_given_as_the_base_url_is_understood(server: FakeSGLang) -> None:
    sglang(server)
    _, seen = watched(url=f"{server.url}/metrics")
    assert up(seen) == {"metrics": 1.0, "server_info": 1.0}


def test_a_wrong_url_says_what_was_tried_and_what_to_give(server: FakeSGLang) -> None:
    sglang(server)
    target, seen = watched(url=f"{server.url}/sglang")
    assert up(seen) == {"metrics": 0.0}  # the server info it may not have is not "down"
    assert "metrics_endpoint_disabled" not in findings(seen)
    assert target.upstream is not None
    error = target.upstream.snapshot().endpoints["metrics"].error or ""
    assert error.startswith(
        "HTTP 404 at /sglang/metrics, HTTP 404 at /sglang/prometheus/metrics: no metrics there; "
        "give the server's base URL (url:, --url)"
    )


def test_a_wrong_metrics_path_on_a_healthy_sglang_is_no_finding(server: FakeSGLang) -> None:
    """The server says its metrics are on: the 404 is the URL's fault."""
    sglang(server)
    _, seen = watched(
        metrics_url=f"{server.url}/v1/metrics", server_info_url=f"{server.url}/server_info"
    )
    assert up(seen) == {"metrics": 0.0, "server_info": 1.0}
    assert "metrics_endpoint_disabled" not in findings(seen)


def test_sglang_without_enable_metrics_is_still_told_how_to_turn_them_on(
    server: FakeSGLang,
) -> None:
    server.routes["/server_info"] = Route(
        body=server_info(enable_metrics=False), content_type="application/json"
    )
    _, seen = watched(url=server.url)
    assert "metrics_endpoint_disabled" in findings(seen)


def test_run_takes_the_base_url_from_a_flag_and_from_the_config() -> None:
    flags = {"url": "http://127.0.0.1:30000"}
    assert load_config(None, flags, environ={}).targets[0].url == "http://127.0.0.1:30000"
    env = {"SPECWATCH_URL": "http://127.0.0.1:30000"}
    assert load_config(None, None, environ=env).targets[0].url == "http://127.0.0.1:30000"


def doctor_args(url: str) -> argparse.Namespace:
    return build_parser(["doctor"]).parse_args(["doctor", "--url", url, "--json"])


def test_doctor_reads_an_endpoint_url_as_the_base_url(server: FakeSGLang) -> None:
    sglang(server)
    found = diagnose(doctor_args(f"{server.url}/metrics"))
    assert found.sources == {"metrics": "ok (SGLang at /metrics)", "server_info": "ok"}
    assert [f.code for f in found.findings] == ["eagle3_draft_with_eagle_algorithm"]


def test_doctor_on_a_wrong_url_says_so_instead_of_a_finding(server: FakeSGLang) -> None:
    sglang(server)
    found = diagnose(doctor_args(f"{server.url}/v2"))
    assert found.findings == []
    (problem, *_) = found.problems
    assert "HTTP 404 at /v2/metrics, HTTP 404 at /v2/prometheus/metrics" in problem
    assert "--enable-metrics" in problem  # as the one cause a server could have
    assert found.sources["server_info"].startswith("none (HTTP 404 at /v2/server_info")
    assert json.dumps(found.to_json_dict())


def test_report_reads_the_servers_setup_from_its_base_url(
    server: FakeSGLang, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log that began after the server started says nothing of its setup; the server does."""
    sglang(server)
    log = tmp_path / "server.log"
    log.write_text("\n".join(decode(60 + 10 * i, 2.9, 0.63) for i in range(10)) + "\n")
    assert main(["report", str(log)]) == 0
    assert "EAGLE" not in capsys.readouterr().out
    assert main(["report", str(log), "--url", server.url]) == 0
    (setup,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("Speculation:")]
    assert setup.startswith("Speculation: EAGLE, 4 draft tokens, draft AQ-MedAI/Kimi-K2-Instruct")


def test_a_server_that_does_not_answer_is_one_problem_not_two() -> None:
    """Nothing listens: its server info is not asked of it as well, to be refused again."""
    url = f"http://127.0.0.1:{free_port()}"
    found = diagnose(doctor_args(url))
    assert found.sources == {"metrics": "down (connection refused at /metrics)"}
    assert [p for p in found.problems if "connection refused" in p] == [
        f"{url} metrics: connection refused at /metrics"
    ]
    target = Target.from_config(TargetConfig(name="t", url=url))
    assert target.upstream is not None
    target.upstream.scrape_once()
    assert dict(setup_lines(target))["server_info"] == "not asked while the server does not answer"
