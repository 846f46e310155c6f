"""Upstream health and upstream-derived values as a scrape shows them, next to the log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config import TargetConfig, build_config
from exporter.exposition import collector as collector_module
from exporter.exposition.collector import SpecwatchCollector
from exporter.settings import validate
from exporter.sources.upstream import MAX_BODY_BYTES
from exporter.sources.upstream_snapshot import REASONS
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.custom_rules import documented_rules
from tests.support.fake_sglang import (
    FakeSGLang,
    Route,
    exposition,
    fake_sglang,
    idle_exposition,
    server_info,
)
from tests.support.loglines import PROF_LINE, decode
from tests.support.metrics import Clock, Scrape, render
from tests.support.tools import free_port

FINDING = "specwatch_finding"
WRONG_FLAG = "eagle3_draft_with_eagle_algorithm"


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        fake.routes["/metrics"] = Route(body=exposition().encode())
        fake.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
        yield fake


def target_for(url: str, **extra: object) -> Target:
    config = validate(
        TargetConfig,
        {
            "name": "sglang-0",
            "metrics_url": f"{url}/metrics",
            "server_info_url": f"{url}/server_info",
            **extra,
        },
    )
    return Target.from_config(config)


def live() -> Clock:
    clock = Clock()
    clock.now = time.time()
    return clock


def test_healthy_upstream_is_up_with_every_error_reason_at_zero(server: FakeSGLang) -> None:
    target = target_for(server.url)
    assert target.upstream is not None
    target.upstream.scrape_once()
    scrape = render([target], live())
    for endpoint in ("metrics", "server_info"):
        assert scrape.value("specwatch_upstream_up", target="sglang-0", endpoint=endpoint) == 1
        duration = scrape.value(
            "specwatch_upstream_scrape_duration_seconds", target="sglang-0", endpoint=endpoint
        )
        # An answered scrape took no longer than its deadline, however loaded the machine.
        assert duration is not None and 0 <= duration <= target.upstream.timeout
        errors = {
            reason: scrape.value(
                "specwatch_upstream_scrape_errors_total",
                target="sglang-0",
                endpoint=endpoint,
                reason=reason,
            )
            for reason in REASONS
        }
        assert errors == dict.fromkeys(REASONS, 0)


def test_without_log_upstream_values_are_exported(server: FakeSGLang) -> None:
    target = target_for(server.url)
    assert target.upstream is not None
    target.upstream.scrape_once()
    scrape = render([target], live())
    assert scrape.value("specwatch_accept_length", target="sglang-0") == pytest.approx(2.44)
    # derived from accept length and the 4 draft tokens of /server_info: (2.44 - 1) / 3
    assert scrape.value("specwatch_accept_ratio", target="sglang-0") == pytest.approx(0.48)
    assert scrape.value("specwatch_running_requests", target="sglang-0") == 61
    assert scrape.value("specwatch_queued_requests", target="sglang-0") == 4
    assert scrape.value("specwatch_max_running_requests", target="sglang-0") == 48


def test_fresh_log_wins_and_series_are_never_duplicated(server: FakeSGLang) -> None:
    target = target_for(server.url)
    assert target.upstream is not None
    target.upstream.scrape_once()
    LogFeed(target.state).on_lines([decode(300, 3.10, 0.7, running=8, queued=1).encode()])
    scrape = render([target], live())  # value() fails on more than one matching series
    assert scrape.value("specwatch_accept_length", target="sglang-0") == 3.10
    assert scrape.value("specwatch_running_requests", target="sglang-0") == 8
    assert scrape.value("specwatch_accept_ratio", target="sglang-0") == pytest.approx(2.1 / 3)


def test_stale_log_hands_over_to_upstream(server: FakeSGLang) -> None:
    target = target_for(server.url, scrape_interval=60)
    assert target.upstream is not None
    LogFeed(target.state).on_lines([decode(300, 3.10, 0.7, running=8).encode()])
    target.upstream.scrape_once()
    clock = live()
    clock.now += 90  # log window older than stale_after (60 s), scrape younger than 2 x 60 s
    scrape = render([target], clock, stale_after=60)
    assert scrape.value("specwatch_accept_length", target="sglang-0") == pytest.approx(2.44)
    clock.now += 60  # now the scrape is too old as well: nothing is shown as current
    assert render([target], clock, stale_after=60).value("specwatch_accept_length") is None


def test_each_new_upstream_failure_is_shown_at_the_next_scrape() -> None:
    """An endpoint's failure counts are rendered once and kept while they hold (most scrapes
    of a live server add none): a new failure is counted at the next scrape all the same."""
    target = target_for(f"http://127.0.0.1:{free_port()}")
    assert target.upstream is not None
    collector = SpecwatchCollector([target], 60, live())
    labels = {"target": "sglang-0", "endpoint": "metrics", "reason": "refused"}
    for failures in (1, 2, 3):
        target.upstream.scrape_once()
        scrape = Scrape(collector.exposition("text").decode())
        assert scrape.value("specwatch_upstream_scrape_errors_total", **labels) == failures


def test_a_kept_render_is_byte_for_byte_one_made_afresh() -> None:
    """What a render keeps from the last (a family's text, its lines' heads, the groups of
    samples kept while their values hold) shows the same bytes as a render made from
    nothing, after each change of the log, the upstream and the custom rules: the golden
    scrapes have no upstream and no custom rule to hold these to."""
    url = f"http://127.0.0.1:{free_port()}"
    settings = {"name": "sglang-0", "metrics_url": f"{url}/metrics"}
    config = build_config({"targets": [settings], "custom_rules": documented_rules()})
    target = Target.from_config(config.targets[0], config.custom_rules)
    assert target.upstream is not None
    feed, clock = LogFeed(target.state, target.custom_rules), live()
    collector = SpecwatchCollector([target], 60, clock)
    for step in range(6):
        target.upstream.scrape_once()
        lines = [decode(step, 2.0 + step / 10, 0.5), PROF_LINE] if step % 3 else [PROF_LINE]
        feed.on_lines([line.encode() for line in lines])
        if step % 2:
            target.state.add_skipped("too_long")
        clock.now += 5.0
        body = collector.exposition("text")
        assert b"specwatch_custom_eagle3_prof_reports_total" in body
        collector_module._GROUPS.clear()  # every kept group built again, too
        assert SpecwatchCollector([target], 60, clock).exposition("text") == body, step


def test_wrong_flag_finding_from_server_info_alone(server: FakeSGLang) -> None:
    target = target_for(server.url)
    assert target.upstream is not None
    target.upstream.scrape_once()
    scrape = render([target], live())
    assert (
        scrape.value(
            "specwatch_finding",
            target="sglang-0",
            code="eagle3_draft_with_eagle_algorithm",
            severity="critical",
        )
        == 1
    )


def test_down_upstream_reports_reason_and_exports_no_values() -> None:
    target = target_for(f"http://127.0.0.1:{free_port()}")
    assert target.upstream is not None
    target.upstream.scrape_once()
    target.upstream.scrape_once()
    scrape = render([target], live())
    labels = {"target": "sglang-0", "endpoint": "metrics"}
    assert scrape.value("specwatch_upstream_up", **labels) == 0
    assert scrape.value("specwatch_upstream_scrape_errors_total", **labels, reason="refused") == 2
    assert scrape.value("specwatch_upstream_scrape_errors_total", **labels, reason="http") == 0
    assert scrape.value("specwatch_accept_length", target="sglang-0") is None
    assert scrape.value("specwatch_running_requests", target="sglang-0") is None


def test_api_key_of_server_info_is_not_in_the_scrape(server: FakeSGLang) -> None:
    target = target_for(server.url)
    assert target.upstream is not None
    target.upstream.scrape_once()
    assert "sk-live" not in repr(render([target], live()).samples)


def test_speedup_from_upstream_gauges_when_there_is_no_log(server: FakeSGLang) -> None:
    # /metrics: 2 DP ranks, 31 + 30 running, 600.5 tok/s each. The curve at 61 running is
    # 1500 + (2370 - 1500) * (61 - 48) / (128 - 48) = 1641.375 tok/s.
    target = target_for(server.url, baseline={"curve": "1:82,48:1500,128:2370"})
    assert target.upstream is not None
    target.upstream.scrape_once()
    scrape = render([target], live())
    base = scrape.value("specwatch_baseline_gen_throughput_tokens_per_second", target="sglang-0")
    assert base == pytest.approx(1641.375)
    speedup = scrape.value("specwatch_speedup", target="sglang-0")
    assert speedup == pytest.approx(1201 / 1641.375)


def test_idle_upstream_places_the_baseline_but_has_no_speedup(server: FakeSGLang) -> None:
    # Nothing running generates 0 tok/s: that is idleness, not speculation being slow.
    server.routes["/metrics"] = Route(body=idle_exposition().encode())
    target = target_for(server.url, baseline={"curve": "1:82,48:1500,128:2370"})
    assert target.upstream is not None
    target.upstream.scrape_once()
    scrape = render([target], live())
    assert scrape.value("specwatch_gen_throughput_tokens_per_second", target="sglang-0") == 0
    base = scrape.value("specwatch_baseline_gen_throughput_tokens_per_second", target="sglang-0")
    assert base == 82
    assert scrape.value("specwatch_speedup", target="sglang-0") is None


def test_fresh_log_sets_the_speedup_not_the_upstream(server: FakeSGLang) -> None:
    target = target_for(server.url, baseline={"curve": "1:82,48:1500,128:2370"})
    assert target.upstream is not None
    target.upstream.scrape_once()
    LogFeed(target.state).on_lines([decode(300, 1.0, 0.25, running=48, tput=600).encode()])
    scrape = render([target], live())
    assert scrape.value("specwatch_speedup", target="sglang-0") == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        (Route(body=exposition().encode(), delay=2.5), "timeout"),
        (Route(status=500, body=b"Internal Server Error"), "http"),
        (Route(body=b"<html><body>Welcome to nginx!</body></html>\n"), "garbage"),
        (Route(stream_bytes=MAX_BODY_BYTES + 1024), "too_large"),
    ],
)
def test_each_broken_upstream_is_down_with_its_reason_counted(route: Route, reason: str) -> None:
    with fake_sglang() as fake:
        fake.routes["/metrics"] = route
        # The scrape timeout is min(10 s, scrape_interval): 1 s against the 2.5 s delay.
        interval = 1.0 if reason == "timeout" else 5.0
        config = TargetConfig(
            name="sglang-0", metrics_url=f"{fake.url}/metrics", scrape_interval=interval
        )
        target = Target.from_config(config)
        assert target.upstream is not None
        target.upstream.scrape_once()
    scrape = render([target], live())
    labels = {"target": "sglang-0", "endpoint": "metrics"}
    assert scrape.value("specwatch_upstream_up", **labels) == 0
    counted = {
        r: scrape.value("specwatch_upstream_scrape_errors_total", **labels, reason=r)
        for r in REASONS
    }
    assert counted == {r: 1 if r == reason else 0 for r in REASONS}
    assert scrape.value("specwatch_gen_throughput_tokens_per_second") is None


@pytest.mark.parametrize("as_folder", [True, False])
def test_draft_config_proves_an_eagle3_draft_the_path_does_not_name(
    server: FakeSGLang, tmp_path: Path, as_folder: bool
) -> None:
    info = server_info(speculative_draft_model_path="team/kimi-k25-drafter-v3")
    server.routes["/server_info"] = Route(body=info, content_type="application/json")
    target = target_for(server.url)
    assert target.upstream is not None
    target.upstream.scrape_once()
    assert render([target], live()).value(FINDING, code=WRONG_FLAG) is None
    folder = tmp_path / "drafter"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000})
    )
    target = target_for(server.url, draft_config=folder if as_folder else folder / "config.json")
    assert target.upstream is not None
    target.upstream.scrape_once()
    scrape = render([target], live())
    assert scrape.value(FINDING, code=WRONG_FLAG, severity="critical") == 1
    (info_sample,) = [s for s in scrape.samples if s.name == "specwatch_speculative_info"]
    assert info_sample.labels["draft_architecture"] == "LlamaForCausalLMEagle3"
    assert info_sample.labels["draft_model"] == "team/kimi-k25-drafter-v3"
