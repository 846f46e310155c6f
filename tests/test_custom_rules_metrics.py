"""Custom rules from the config file, fed by the daemon's log feed, rendered per target."""

from __future__ import annotations

import time

import pytest

from exporter.config import build_config
from exporter.settings import ConfigError
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.custom_rules import documented_rules
from tests.support.loglines import PROF_LINE
from tests.support.metrics import Clock, render


def test_profiler_line_in_a_cri_envelope_becomes_custom_series() -> None:
    config = build_config({"targets": [{"name": "sglang-0"}], "custom_rules": documented_rules()})
    target = Target.from_config(config.targets[0], config.custom_rules)
    feed = LogFeed(target.state, target.custom_rules)
    cri = f"2026-02-23T00:14:33.123456789Z stderr F {PROF_LINE}"
    feed.on_lines([cri.encode(), b"unrelated", cri.encode()])
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    labels = {"target": "sglang-0", "sync": "no sync"}
    assert scrape.value("specwatch_custom_eagle3_prof_accept_length", **labels) == 0.58
    assert scrape.value("specwatch_custom_eagle3_prof_cycles_total", **labels) == 12800
    assert scrape.value("specwatch_custom_eagle3_prof_reports_total", **labels) == 2


def test_series_overflow_is_counted_per_target_and_rule() -> None:
    rule = {
        "name": "modes",
        "contains": "MODE",
        "pattern": r"MODE (?P<mode>\w+) (?P<v>[\d.]+)",
        "labels": ["mode"],
        "max_series": 2,
        "metrics": [{"name": "mode_value", "value": "v"}],
    }
    config = build_config({"targets": [{"name": "a"}], "custom_rules": [rule]})
    target = Target.from_config(config.targets[0], config.custom_rules)
    LogFeed(target.state, target.custom_rules).on_lines(
        [f"MODE m{i} 1.5".encode() for i in range(5)]
    )
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    assert len(scrape.values("specwatch_custom_mode_value", target="a")) == 2
    dropped = scrape.value(
        "specwatch_custom_rule_dropped_lines_total", target="a", rule="modes", reason="series_limit"
    )
    assert dropped == 3


@pytest.mark.parametrize(
    ("rule", "key"),
    [
        ({"name": "x", "pattern": "(?P<v", "metrics": [{"name": "m", "value": "v"}]}, "pattern"),
        ({"name": "x", "pattern": "(?P<v>1)", "metrics": [{"name": "a b", "value": "v"}]}, "name"),
    ],
)
def test_bad_rule_in_config_names_the_key(rule: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^custom_rules\.0\.(metrics\.0\.)?{key}: "):
        build_config({"custom_rules": [rule]})
