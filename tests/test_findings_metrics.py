"""Findings, configuration and the derived accept rate as a scrape shows them.

Real SGLang lines go through the daemon's own feed (envelope, parser, events) into the target
state, and the collector renders them; nothing is set on the state by hand.
"""

from __future__ import annotations

import time

from exporter.config import TargetConfig
from exporter.state.feed import LogFeed
from exporter.state.target_state import TargetState
from exporter.target import Target
from tests.support.loglines import (
    collapsed_drafter,
    decode,
    startup,
    undertrained_drafter,
    wrong_algorithm_flag,
)
from tests.support.metrics import Clock, Scrape, render

FINDING = "specwatch_finding"


def feed(target: Target, lines: list[str]) -> None:
    LogFeed(target.state).on_lines([line.encode() for line in lines])


def watched(name: str = "sglang-0") -> Target:
    config = TargetConfig(name=name, log_files=["/var/log/sglang/server.log"])
    return Target(config, TargetState(name))


def live_clock() -> Clock:
    """The feed stamps windows with the wall clock; scrape right after, as the daemon would."""
    clock = Clock()
    clock.now = time.time()
    return clock


def findings(scrape: Scrape, target: str = "sglang-0") -> dict[str, str]:
    return {
        s.labels["code"]: s.labels["severity"]
        for s in scrape.samples
        if s.name == FINDING and s.labels["target"] == target and s.value == 1
    }


def test_wrong_flag_is_a_critical_finding_from_startup_lines() -> None:
    target = watched()
    feed(target, wrong_algorithm_flag())
    scrape = render([target], live_clock())
    assert findings(scrape) == {"eagle3_draft_with_eagle_algorithm": "critical"}
    info = [s for s in scrape.samples if s.name == "specwatch_speculative_info"]
    assert len(info) == 1 and info[0].value == 1
    assert info[0].labels == {
        "target": "sglang-0",
        "algorithm": "EAGLE",
        "draft_model": "models/kimi-k25-eagle3",
        "draft_architecture": "LlamaForCausalLMEagle3",
        "num_steps": "3",
        "eagle_topk": "1",
        "num_draft_tokens": "4",
    }
    assert scrape.value("specwatch_max_running_requests", target="sglang-0") == 48


def test_accept_rate_is_derived_drafts_only_not_sglang_rate() -> None:
    target, clock = watched(), live_clock()
    feed(target, collapsed_drafter())  # windows log "accept len: 1.00, accept rate: 0.25"
    scrape = render([target], clock)
    assert scrape.value("specwatch_accept_length", target="sglang-0") == 1.0
    assert scrape.value("specwatch_accept_ratio", target="sglang-0") == 0.0
    assert findings(scrape) == {"running_requests_capped": "warning"}


def test_undertrained_incident_warnings_and_derived_rate() -> None:
    target = watched()
    feed(target, undertrained_drafter())
    scrape = render([target], live_clock())
    assert findings(scrape) == {
        "cuda_graph_disabled": "warning",
        "draft_tokens_excessive": "warning",
    }
    # newest window: accept len 2.41 with 16 draft tokens -> (2.41 - 1) / 15
    assert scrape.value("specwatch_accept_ratio", target="sglang-0") == (2.41 - 1) / 15


def test_no_accept_rate_without_known_draft_tokens() -> None:
    target = watched()
    feed(target, [decode(300, 2.5, 0.6)])
    scrape = render([target], live_clock())
    assert scrape.value("specwatch_accept_length", target="sglang-0") == 2.5
    assert scrape.value("specwatch_accept_ratio", target="sglang-0") is None


def test_finding_disappears_after_restart_with_the_right_flag() -> None:
    target = watched()
    feed(target, wrong_algorithm_flag())
    assert findings(render([target], live_clock()))
    feed(target, startup(algorithm="EAGLE3"))
    assert findings(render([target], live_clock())) == {}


def test_findings_are_per_target() -> None:
    wrong, right = watched("wrong"), watched("right")
    feed(wrong, wrong_algorithm_flag())
    feed(right, startup())
    scrape = render([wrong, right], live_clock())
    assert findings(scrape, "wrong") == {"eagle3_draft_with_eagle_algorithm": "critical"}
    assert findings(scrape, "right") == {}


def test_api_key_from_the_log_never_reaches_a_scrape() -> None:
    target = watched()
    feed(target, wrong_algorithm_flag())
    registry_text = repr(render([target], live_clock()).samples)
    assert "sk-live" not in registry_text


def test_series_per_target_stay_within_budget() -> None:
    target, clock = watched(), live_clock()
    feed(target, undertrained_drafter() + collapsed_drafter())
    scrape = render([target], clock)
    series = [s for s in scrape.samples if s.labels.get("target") == "sglang-0"]
    assert len(series) <= 80
