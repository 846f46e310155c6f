"""vLLM's counter schema under other prefixes: llama.cpp's server, Ray Serve, escaped names.

Each is served over real loopback HTTP as that server writes it, found without configuration
or named by ``metrics_prefix``, and read into the same specwatch metrics as vLLM's own.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from exporter.config import TargetConfig, build_config
from exporter.settings import ConfigError
from exporter.target import Target
from tests.support.daemon import specwatch_cmd
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang
from tests.support.upstream_servers import llamacpp, scrape, vllm_schema

# Ray Serve adds its own tags to every series of vLLM's.
RAY_LABELS = (
    'ReplicaId="abc",WorkerId="w1",engine="0",model_name="llama"',
    'ReplicaId="def",WorkerId="w2",engine="0",model_name="llama"',
)


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def watch(server: FakeSGLang, prefix: str | None = None) -> Target:
    config = TargetConfig(name="s", metrics_url=f"{server.url}/metrics", metrics_prefix=prefix)
    return Target.from_config(config)


def serve(server: FakeSGLang, body: bytes) -> None:
    server.routes["/metrics"] = Route(body=body)


@pytest.mark.parametrize(
    ("prefix", "labels"),
    [
        ("ray_vllm_", RAY_LABELS),  # Ray Serve: vLLM's colon escaped
        ("ray_vllm:", RAY_LABELS),  # Ray Serve before names were escaped
        ("vllm_", ('engine="0",model_name="llama"',)),  # through an OpenTelemetry bridge
    ],
)
@pytest.mark.parametrize("configured", [False, True], ids=["found", "configured"])
def test_the_schema_under_another_prefix_reads_as_vllm(
    server: FakeSGLang, prefix: str, labels: tuple[str, ...], configured: bool
) -> None:
    target = watch(server, prefix if configured else None)
    serve(server, vllm_schema(prefix, 1000, 1500, (700, 500, 300), 9000, labels=labels))
    first = scrape(target)
    assert first["up"] == 1 and first["engine"] == ["vllm"]
    assert (first["drafts"], first["draft_tokens"], first["accepted"]) == (1000, 3000, 1500)
    assert first["accept_length"] is None
    assert first["running"] == 12 * len(labels)
    serve(server, vllm_schema(prefix, 1400, 1620, (780, 530, 310), 9600, labels=labels))
    second = scrape(target)
    assert second["accept_length"] == pytest.approx(1.30)
    assert second["positions"] == pytest.approx({"0": 0.2, "1": 0.075, "2": 0.025})
    assert second["accepted_at"] == {"0": 780, "1": 530, "2": 310}
    assert second["throughput"] is not None and second["throughput"] > 0


@pytest.mark.parametrize("prefix", [None, "llamacpp:"], ids=["found", "configured"])
def test_llama_cpp_server_counters_and_its_own_gauge_names(
    server: FakeSGLang, prefix: str | None
) -> None:
    target = watch(server, prefix)
    serve(server, llamacpp(drafts=400, accepted=600, per_position=(300, 200, 100), predicted=5000))
    first = scrape(target)
    assert first["engine"] == ["vllm"]
    assert (first["running"], first["queued"]) == (3, 1)  # requests_processing, _deferred
    assert first["accepted_at"] == {"0": 300, "1": 200, "2": 100}
    serve(server, llamacpp(drafts=500, accepted=610, per_position=(310, 200, 100), predicted=5300))
    second = scrape(target)
    assert second["accept_length"] == pytest.approx(1.10)  # 10 accepted in 100 rounds
    assert second["accept_rate"] == pytest.approx(10 / 300)
    assert second["positions"] == pytest.approx({"0": 0.1, "1": 0.0, "2": 0.0})
    assert second["throughput"] is not None and second["throughput"] > 0  # tokens_predicted


def test_a_configured_prefix_reads_no_other_names(server: FakeSGLang) -> None:
    """A prefix names the one schema to read: vLLM's own names beside it are not mixed in."""
    serve(server, vllm_schema("vllm:", 1000, 1500, (700, 500, 300)))
    seen = scrape(watch(server, "ray_vllm_"))
    assert seen["up"] == 1
    assert (seen["drafts"], seen["engine"]) == (None, ["unknown"])


def test_an_impossible_value_under_a_prefix_is_dropped_and_counted(server: FakeSGLang) -> None:
    body = llamacpp(drafts=400, accepted=600, per_position=(300, 200, 100), predicted=5000)
    serve(
        server, body.replace(b"llamacpp:requests_processing 3", b"llamacpp:requests_processing -3")
    )
    seen = scrape(watch(server))
    assert seen["running"] is None
    assert seen["dropped"]["negative"] == 1


@pytest.mark.parametrize("bad", ["llamacpp", "has space:", "9vllm:", "x" * 70 + "_", ""])
def test_a_bad_prefix_is_refused_naming_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"targets\.0\.metrics_prefix: must start a metric name"):
        build_config({"targets": [{"metrics_url": "http://h/metrics", "metrics_prefix": bad}]})


@pytest.mark.e2e
def test_run_refuses_a_bad_prefix_flag_with_status_2() -> None:
    cmd = specwatch_cmd(
        "run", "--listen", "127.0.0.1:0", "--metrics-url", "http://127.0.0.1:9/metrics",
        "--metrics-prefix", "llamacpp",
    )  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "targets.0.metrics_prefix: must start a metric name" in result.stderr
    assert "--metrics-prefix" in result.stderr


def test_llama_cpp_drafter_is_judged_on_speed_only_not_by_the_eagle_floor(
    server: FakeSGLang,
) -> None:
    """llama.cpp's server tells no speculative algorithm (a draft model or n-gram lookup of
    its own): an accept length of 1.5 is no EAGLE drafter's shortfall, so no floor is exported
    and no accept-length alert can fire."""
    target = watch(server)
    serve(server, llamacpp(drafts=400, accepted=200, per_position=(120, 60, 20), predicted=1600))
    scrape(target)
    serve(server, llamacpp(drafts=500, accepted=250, per_position=(150, 75, 25), predicted=2000))
    seen = scrape(target)
    assert seen["accept_length"] == pytest.approx(1.5)
    assert seen["floor"] is None
    assert [info["algorithm"] for info in seen["speculative"]] == ["llama.cpp"]
