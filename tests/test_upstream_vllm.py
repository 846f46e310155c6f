"""vLLM's /metrics over real loopback HTTP: counters that grow, idle, and reset on a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from exporter.config import TargetConfig
from exporter.target import Target
from tests.support.fake_sglang import FakeSGLang, Route, exposition, fake_sglang
from tests.support.metrics import Clock, render
from tests.support.upstream_servers import scrape, vllm_schema


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def serve(
    server: FakeSGLang, drafts: float, accepted: float, per_position: tuple[float, ...]
) -> None:
    server.routes["/metrics"] = Route(body=vllm_schema("vllm:", drafts, accepted, per_position))


def vllm_target(server: FakeSGLang) -> Target:
    return Target.from_config(TargetConfig(name="v", metrics_url=f"{server.url}/metrics"))


def test_accept_length_comes_from_the_window_between_two_scrapes_never_one(
    server: FakeSGLang,
) -> None:
    target = vllm_target(server)
    serve(server, drafts=1000, accepted=1500, per_position=(700, 500, 300))
    first = scrape(target)
    assert first["up"] == 1 and first["engine"] == ["vllm"]
    assert first["accept_length"] is None  # one sample is a lifetime average, not now
    assert first["positions"] == {}
    assert (first["running"], first["queued"], first["usage"]) == (24, 2, 0.4)
    assert (first["drafts"], first["draft_tokens"], first["accepted"]) == (1000, 3000, 1500)

    # This window: 400 drafts, 120 accepted (the drafter broke): 1.30, not the lifetime 1.5.
    serve(server, drafts=1400, accepted=1620, per_position=(780, 530, 310))
    second = scrape(target)
    assert second["accept_length"] == pytest.approx(1.30)
    assert second["accept_rate"] == pytest.approx(120 / 1200)
    assert second["positions"] == pytest.approx({"0": 0.2, "1": 0.075, "2": 0.025})
    assert second["drafts"] == 1400


def test_an_idle_window_gives_no_value_rather_than_the_last_one(server: FakeSGLang) -> None:
    target = vllm_target(server)
    serve(server, drafts=1000, accepted=1500, per_position=(700, 500, 300))
    scrape(target)
    serve(server, drafts=1100, accepted=1700, per_position=(780, 560, 360))
    assert scrape(target)["accept_length"] == pytest.approx(3.0)
    idle = scrape(target)  # the same counters: nothing was drafted since
    assert idle["accept_length"] is None
    assert idle["positions"] == {}
    assert idle["drafts"] == 1100  # the counters themselves are still exported


def test_counters_that_disagree_derive_nothing_and_are_counted(
    server: FakeSGLang, caplog: pytest.LogCaptureFixture
) -> None:
    """Each counter in range, but 1,000 tokens accepted in one draft of 3 tokens: exported as
    an accept length of 1,001 and an accept ratio of 333 (1e15 with larger steps), with
    nothing counted as dropped and nothing said."""
    target = vllm_target(server)
    serve(server, drafts=1000, accepted=1500, per_position=(700, 500, 300))
    scrape(target)
    serve(server, drafts=1001, accepted=2500, per_position=(701, 501, 301))
    seen = scrape(target)
    assert seen["accept_length"] is None and seen["accept_rate"] is None
    assert seen["dropped"]["inconsistent"] == 1
    (warning,) = [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]
    assert "vllm:spec_decode_num_accepted_tokens_total rose by 1000 in 1" in warning
    assert "vllm:spec_decode_num_drafts_total" in warning
    assert "more than vllm:spec_decode_num_draft_tokens_total's 3" in warning
    serve(server, drafts=1101, accepted=2700, per_position=(781, 561, 361))
    assert scrape(target)["accept_length"] == pytest.approx(3.0)


def test_a_restart_resets_the_counters_and_starts_a_new_window(server: FakeSGLang) -> None:
    target = vllm_target(server)
    serve(server, drafts=5000, accepted=9000, per_position=(4000, 3000, 2000))
    scrape(target)
    serve(server, drafts=100, accepted=200, per_position=(80, 70, 50))  # restarted
    after_restart = scrape(target)
    assert after_restart["accept_length"] is None  # no negative or mixed-run rate
    assert after_restart["drafts"] == 100  # exported as vLLM has it: rate() sees the reset
    serve(server, drafts=300, accepted=500, per_position=(200, 170, 130))
    assert scrape(target)["accept_length"] == pytest.approx(2.5)


def test_a_down_upstream_exports_no_counters(server: FakeSGLang) -> None:
    target = vllm_target(server)
    serve(server, drafts=1000, accepted=1500, per_position=(700, 500, 300))
    scrape(target)
    server.routes["/metrics"] = Route(status=500, body=b"oops")
    down = scrape(target)
    assert down["up"] == 0
    assert (down["drafts"], down["accepted"], down["accept_length"]) == (None, None, None)


def test_sglang_verify_calls_and_generated_tokens_become_the_same_counters(
    server: FakeSGLang,
) -> None:
    body = exposition() + "\n".join(
        [
            "# HELP sglang:spec_verify_calls_total Number of speculative decoding verify calls.",
            "# TYPE sglang:spec_verify_calls_total counter",
            'sglang:spec_verify_calls_total{model_name="kimi"} 4000',
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
            "# TYPE sglang:generation_tokens_total counter",
            'sglang:generation_tokens_total{model_name="kimi"} 13000',
            "# HELP sglang:num_requests_total Number of requests processed.",
            "# TYPE sglang:num_requests_total counter",
            'sglang:num_requests_total{model_name="kimi"} 100',
            "",
        ]
    )
    server.routes["/metrics"] = Route(body=body.encode())
    target = Target.from_config(TargetConfig(name="v", metrics_url=f"{server.url}/metrics"))
    seen = scrape(target)
    assert seen["engine"] == ["sglang"]
    # Each request's first token is its prefill's: 13000 - 4000 verify calls - 100 requests.
    assert (seen["drafts"], seen["accepted"], seen["draft_tokens"]) == (4000, 8900, None)


def test_sglang_without_the_verify_counter_exports_none_of_them(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=exposition().encode())
    seen = scrape(Target.from_config(TargetConfig(name="v", metrics_url=f"{server.url}/metrics")))
    assert (seen["drafts"], seen["accepted"]) == (None, None)


def test_the_model_name_label_names_the_served_model(server: FakeSGLang) -> None:
    target = vllm_target(server)
    serve(server, drafts=1000, accepted=1500, per_position=(700, 500, 300))
    assert target.upstream is not None
    target.upstream.scrape_once()
    clock = Clock()
    clock.now = time.time()
    (info,) = [s for s in render([target], clock).samples if s.name == "specwatch_target_info"]
    assert info.labels["served_model"] == "llama"
