"""TensorRT-LLM's /prometheus/metrics over real loopback HTTP, in the names its server writes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.config import TargetConfig
from exporter.target import Target
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang
from tests.support.upstream_servers import TRTLLM_PATH, TrtllmMetrics, scrape


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def watch(server: FakeSGLang) -> Target:
    config = TargetConfig(name="t", metrics_url=f"{server.url}{TRTLLM_PATH}")
    return Target.from_config(config)


def publish(server: FakeSGLang, metrics: TrtllmMetrics) -> None:
    server.routes[TRTLLM_PATH] = Route(body=metrics.body())


def started(
    server: FakeSGLang, requests: int, accepted: int, rounds: int, accepted_at: tuple[int, ...]
) -> tuple[TrtllmMetrics, Target]:
    """A server with an iteration and a finished request behind it, scraped once."""
    metrics = TrtllmMetrics()
    target = watch(server)
    metrics.iteration(requests=requests, accepted=accepted)
    metrics.finished(rounds=rounds, accepted_at=accepted_at, generated=4 * rounds)
    publish(server, metrics)
    scrape(target)
    return metrics, target


def test_accept_length_is_tensorrt_llms_own_over_the_window_not_the_lifetime(
    server: FakeSGLang,
) -> None:
    metrics = TrtllmMetrics()
    target = watch(server)
    # A good start: 100 requests finished, 400 rounds of 3 drafts, 800 accepted (3.0).
    metrics.iteration(requests=40, accepted=80)
    metrics.finished(rounds=400, accepted_at=(360, 260, 180), generated=1200)
    publish(server, metrics)
    first = scrape(target)
    assert first["up"] == 1 and first["engine"] == ["trtllm"]
    # One scrape is a lifetime: only the newest iteration's gauge, (80 + 40) / 40.
    assert first["accept_length"] == pytest.approx(3.0)
    # No window yet for the counters' rate: derived from the gauge and its 3 draft tokens.
    assert first["accept_rate"] == pytest.approx((3.0 - 1) / 3)
    assert (first["draft_tokens"], first["accepted"], first["drafts"]) == (120, 80, None)
    assert first["accepted_at"] == {"0": 360, "1": 260, "2": 180}
    assert (first["running"], first["queued"], first["usage"]) == (12, 1, 0.3)

    # Then the drafter breaks: 200 rounds, 20 drafts accepted, all at the first position.
    metrics.iteration(requests=40, accepted=4)
    metrics.finished(rounds=200, accepted_at=(20, 0, 0), generated=220)
    publish(server, metrics)
    second = scrape(target)
    assert second["accept_length"] == pytest.approx(1 + 20 / 200)
    assert second["accept_rate"] == pytest.approx(4 / 120)
    assert second["positions"] == pytest.approx({"0": 0.1, "1": 0.0, "2": 0.0})
    assert second["accepted_at"] == {"0": 380, "1": 260, "2": 180}
    assert second["throughput"] is not None and second["throughput"] > 0


def test_a_position_never_accepted_counts_as_zero_not_as_the_end(server: FakeSGLang) -> None:
    """TensorRT-LLM writes a position's accepted series at its first acceptance; drafts at a
    position never accepted are still drafts of the window."""
    metrics = TrtllmMetrics()
    target = watch(server)
    metrics.finished(rounds=100, accepted_at=(0, 0, 0), generated=100)
    publish(server, metrics)
    scrape(target)
    metrics.finished(rounds=100, accepted_at=(50, 0, 0), generated=150)
    publish(server, metrics)
    seen = scrape(target)
    assert seen["accept_length"] == pytest.approx(1.5)
    assert seen["positions"] == pytest.approx({"0": 0.5, "1": 0.0, "2": 0.0})
    assert seen["accepted_at"] == {"0": 50, "1": 0, "2": 0}


def test_without_finished_requests_the_newest_iteration_stands_in(server: FakeSGLang) -> None:
    metrics, target = started(server, requests=10, accepted=15, rounds=50, accepted_at=(40, 30, 20))
    metrics.iteration(requests=10, accepted=5)  # long requests: none finished since
    publish(server, metrics)
    assert scrape(target)["accept_length"] == pytest.approx(1.5)
    metrics.iteration(requests=0, accepted=0)  # the newest iteration drafted nothing: 0
    publish(server, metrics)
    assert scrape(target)["accept_length"] is None


def test_a_restart_gives_no_window_across_it(server: FakeSGLang) -> None:
    _, target = started(server, requests=10, accepted=20, rounds=500, accepted_at=(400, 300, 200))
    after = TrtllmMetrics()  # a new process: every counter from zero
    after.iteration(requests=0, accepted=0)
    after.finished(rounds=10, accepted_at=(8, 6, 4), generated=40)
    publish(server, after)
    seen = scrape(target)
    assert seen["accept_length"] is None and seen["accept_rate"] is None
    assert seen["accepted_at"] == {"0": 8, "1": 6, "2": 4}  # as counted: rate() sees the reset


def test_its_config_info_names_the_drafter_and_judges_it_by_its_standard(
    server: FakeSGLang,
) -> None:
    publish(server, TrtllmMetrics(method="MTP", draft_len=1))
    seen = scrape(watch(server))
    assert [
        (s["algorithm"], s["num_steps"], s["num_draft_tokens"]) for s in seen["speculative"]
    ] == [("MTP", "1", "2")]
    assert seen["floor"] == pytest.approx(1.4)  # MTP's, capped for one draft step at 1.5
    publish(server, TrtllmMetrics(method="DraftTarget", draft_len=4))
    seen = scrape(watch(server))
    assert seen["speculative"][0]["algorithm"] == "DRAFT_MODEL"


def test_an_impossible_value_is_dropped_and_counted(server: FakeSGLang) -> None:
    metrics = TrtllmMetrics()
    metrics.iteration(requests=10, accepted=20)
    metrics.accept_length.labels(model_name="llama-3.1-8b", engine_type="trtllm", pid="4242").set(
        0.4
    )
    publish(server, metrics)
    seen = scrape(watch(server))
    assert seen["accept_length"] is None
    assert seen["dropped"]["out_of_range"] == 1


def test_a_second_process_with_another_accept_length_is_no_value(server: FakeSGLang) -> None:
    """Multiprocess mode keeps one gauge per process: a stale one must not pass as now."""
    metrics = TrtllmMetrics()
    metrics.iteration(requests=10, accepted=20)
    metrics.accept_length.labels(model_name="llama-3.1-8b", engine_type="trtllm", pid="99").set(1.2)
    publish(server, metrics)
    assert scrape(watch(server))["accept_length"] is None


def test_engine_trtllm_takes_no_log_and_no_other_prefix() -> None:
    from exporter.config import build_config
    from exporter.settings import ConfigError

    with pytest.raises(ConfigError, match=r"log_files: specwatch reads no TensorRT-LLM log"):
        build_config({"targets": [{"engine": "trtllm", "log_files": ["/var/log/trt.log"]}]})
    with pytest.raises(ConfigError, match=r"metrics_prefix: trtllm writes no metrics under"):
        build_config({"targets": [{"engine": "trtllm", "metrics_prefix": "llamacpp:"}]})
    config = build_config({"targets": [{"engine": "trtllm", "metrics_url": "http://h/m"}]})
    assert config.targets[0].engine == "trtllm"


def test_a_hostile_position_label_makes_no_series(server: FakeSGLang) -> None:
    """Positions are specwatch's own label values: only 0 to 31 become series."""
    metrics = TrtllmMetrics()
    metrics.finished(rounds=10, accepted_at=(8, 6, 4), generated=40)
    for position in ("32", "999999", "-1", "1e3", "zero", "0 "):
        labels = {"model_name": "m", "engine_type": "trtllm", "token_position": position}
        metrics.accepted_at.labels(**labels).inc(5)
    publish(server, metrics)
    assert scrape(watch(server))["accepted_at"] == {"0": 8, "1": 6, "2": 4}


def test_counters_that_disagree_derive_nothing_and_are_counted(
    server: FakeSGLang, caplog: pytest.LogCaptureFixture
) -> None:
    """Each counter in range, but 1,000 tokens accepted in one round of 3 drafts: exported as
    an accept length of 1,001 and an accept ratio of 333, with nothing dropped."""
    metrics, target = started(server, requests=10, accepted=20, rounds=40, accepted_at=(30, 20, 10))
    metrics.iteration(requests=1, accepted=1000)
    metrics.finished(rounds=1, accepted_at=(1000, 0, 0), generated=4)
    publish(server, metrics)
    seen = scrape(target)
    assert seen["accept_length"] is None and seen["accept_rate"] is None
    assert seen["dropped"]["inconsistent"] == 1
    (warning,) = [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]
    assert "trtllm_spec_decode_accepted_tokens_total rose by 1000 in 1" in warning
    assert 'trtllm_spec_decode_drafted_tokens_total{token_position="0"}' in warning
    assert "more than trtllm_spec_decode_num_draft_tokens_total's 3" in warning
    # The next window that can be true is exported again.
    metrics.iteration(requests=10, accepted=10)
    metrics.finished(rounds=10, accepted_at=(8, 6, 2), generated=40)
    publish(server, metrics)
    seen = scrape(target)
    assert seen["accept_length"] == pytest.approx(1 + 16 / 10)
    assert seen["accept_rate"] == pytest.approx(10 / 30)
