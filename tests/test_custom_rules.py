"""User extraction rules: the documented EAGLE3_PROF example works, bad rules are named."""

from __future__ import annotations

import gc
import time

import pytest
import yaml

from exporter.config import build_config
from exporter.exposition.families import FAMILIES
from exporter.parse.custom_rules import OWN_METRICS, RETIRE_SECONDS, CustomRuleSet
from exporter.settings import ConfigError
from tests.support.custom_rules import documented_rules, rule_set
from tests.support.docs import doc
from tests.support.docs import section as section_of
from tests.support.loglines import PROF_LINE, decode_line


def series(rules: CustomRuleSet) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, s.labels): s.value for s in rules.samples()}


def test_documented_example_extracts_the_profiler_line() -> None:
    rules = rule_set(documented_rules())
    second = PROF_LINE.replace("0.64 ms", "0.69 ms")
    rules.feed_raw([b"unrelated line", PROF_LINE.encode(), second.encode() + b"\r"])
    labels = (("sync", "no sync"),)
    assert series(rules) == {
        ("specwatch_custom_eagle3_prof_draft_step_ms", labels): 0.69,
        ("specwatch_custom_eagle3_prof_accept_length", labels): 0.58,
        ("specwatch_custom_eagle3_prof_cycles", labels): 12800.0,
        ("specwatch_custom_eagle3_prof_reports", labels): 2.0,
    }
    types = {s.name: s.type for s in rules.samples()}
    assert types["specwatch_custom_eagle3_prof_cycles"] == "counter"
    assert types["specwatch_custom_eagle3_prof_accept_length"] == "gauge"


def test_prefilter_skips_lines_without_the_literal() -> None:
    rule = {
        "name": "r",
        "contains": "MYPROF",
        "pattern": r"len: (?P<v>[\d.]+)",
        "metrics": [{"name": "len", "value": "v"}],
    }
    rules = rule_set([rule])
    rules.feed_raw([b"[2026-02-23 00:14:33 TP0] Decode batch, accept len: 1.00"])
    assert rules.samples() == []
    rules.feed_raw([b"MYPROF len: 2.5"])
    assert series(rules) == {("specwatch_custom_len", ()): 2.5}


def _rule(**changes: object) -> dict[str, object]:
    base = {
        "name": "prof",
        "pattern": r"Accept len: (?P<len>[\d.]+) (?P<mode>\w+)",
        "labels": ["mode"],
        "metrics": [{"name": "prof_len", "type": "gauge", "value": "len"}],
    }
    return {**base, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pattern": r"Accept len: (?P<len>[\d.]+"}, "invalid regular expression"),
        ({"labels": ["missing"]}, "no named group"),
        ({"labels": ["target"], "pattern": r"(?P<len>\d) (?P<target>\w+)"}, "reserved"),
        ({"labels": ["__name__"], "pattern": r"(?P<len>\d) (?P<__name__>\w+)"}, "reserved"),
        ({"labels": ["__x"], "pattern": r"(?P<len>\d) (?P<__x>\w+)"}, "reserved"),
        ({"labels": ["mode", "mode"]}, "given twice"),
        ({"pattern": r"(?P<len>\d)(?P<mode>\w)\2"}, "RE2 syntax): invalid escape sequence"),
        ({"pattern": r"(?P<len>\d)(?=(?P<mode>\w))"}, "RE2 syntax"),
        ({"metrics": [{"name": "bad-name", "value": "len"}]}, "must match"),
        ({"metrics": [{"name": "x_total", "type": "counter"}]}, "not end in _total"),
        # Its second HELP block made Prometheus refuse the whole scrape.
        ({"metrics": [{"name": "rule_dropped_lines", "type": "counter"}]}, "specwatch's own"),
        ({"metrics": [{"name": "g", "type": "gauge"}]}, "needs a value group"),
        ({"metrics": []}, "at least 1"),
        ({"colour": "red"}, "colour: unknown key"),
    ],
)
def test_bad_rules_are_config_errors_naming_the_rule_entry(
    changes: dict[str, object], message: str
) -> None:
    rules = [_rule(name="other", metrics=[{"name": "o", "value": "len"}]), _rule(**changes)]
    with pytest.raises(ConfigError, match=r"^custom_rules\.1\b") as info:
        rule_set(rules)
    assert message in str(info.value)


def test_every_family_of_specwatch_under_the_custom_prefix_is_refused_as_a_rule_metric() -> None:
    own = {name.removeprefix("custom_") for name in FAMILIES if name.startswith("custom_")}
    assert own
    assert own <= OWN_METRICS


def test_the_same_metric_name_in_two_rules_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^custom_rules: metric name used twice"):
        rule_set([_rule(), _rule(name="again")])


def test_rules_keeping_more_series_together_than_the_budget_are_refused() -> None:
    """Each rule was capped alone: 300 rules of 1,000 series, 40 KB of config, fed 1,000 lines,
    made a 16 MB scrape taking 5 s and 464 MB of memory."""
    many = [
        _rule(name=f"r{i}", max_series=1000, metrics=[{"name": f"m{i}", "value": "len"}])
        for i in range(3)
    ]
    with pytest.raises(ConfigError, match=r"^custom_rules: .*3000 series.*at most 2000"):
        rule_set(many)
    two_metrics = [{"name": "a", "value": "len"}, {"name": "b", "value": "len"}]
    rule_set([_rule(max_series=1000, metrics=two_metrics)])  # 2,000: inside the budget


def test_series_per_rule_are_capped_and_overflow_counted() -> None:
    rules = rule_set([_rule(max_series=3)])
    for i in range(10):
        rules.feed_raw([f"Accept len: 1.5 mode{i}".encode()])
    assert len(rules.samples()) == 3
    assert rules.dropped_counts() == {("prof", "series_limit"): 7}
    rules.feed_raw([b"Accept len: 2.5 mode0"])  # a known series still updates
    assert series(rules)[("specwatch_custom_prof_len", (("mode", "mode0"),))] == 2.5


def test_unnumeric_value_is_counted_not_exported() -> None:
    rules = rule_set([_rule(pattern=r"Accept len: (?P<len>\S+) (?P<mode>\w+)")])
    rules.feed_raw([b"Accept len: n/a fast"])
    assert rules.samples() == []
    assert rules.dropped_counts() == {("prof", "bad_value"): 1}


def test_a_counter_that_would_sum_to_infinity_keeps_its_value_and_counts_the_line() -> None:
    """Each increment of 7.7e307 is finite; their sum was +Inf, exported for good."""
    counter = [{"name": "c", "type": "counter", "value": "len"}]
    rules = rule_set([_rule(pattern=r"Accept len: (?P<len>\d+) (?P<mode>\w+)", metrics=counter)])
    big = "7" * 308
    rules.feed_raw([f"Accept len: {big} fast".encode()] * 3)
    assert series(rules) == {("specwatch_custom_c", (("mode", "fast"),)): float(big) * 2}
    assert rules.dropped_counts() == {("prof", "bad_value"): 1}


def test_stale_gauges_are_left_out_counters_stay() -> None:
    rule = _rule(metrics=[{"name": "g", "value": "len"}, {"name": "c", "type": "counter"}])
    rules = rule_set([rule])
    rules.feed_raw([b"Accept len: 1.5 fast"])
    assert {s.name for s in rules.samples(stale_after=60)} == {
        "specwatch_custom_g",
        "specwatch_custom_c",
    }
    assert {s.name for s in rules.samples(stale_after=1e-9)} == {"specwatch_custom_c"}


def test_gauges_of_lines_written_long_ago_are_left_out_counters_stay() -> None:
    """Lines of a file last written 2 hours ago (an old log moved into place)."""
    rule = _rule(metrics=[{"name": "g", "value": "len"}, {"name": "c", "type": "counter"}])
    rules = rule_set([rule])
    rules.feed_raw([b"Accept len: 1.5 fast"], written_by=time.time() - 7200)
    assert {(s.name, s.value) for s in rules.samples(stale_after=60)} == {
        ("specwatch_custom_c", 1.0)
    }
    rules.feed_raw([b"Accept len: 2.5 fast"], written_by=time.time())
    assert {(s.name, s.value) for s in rules.samples(stale_after=60)} == {
        ("specwatch_custom_g", 2.5),
        ("specwatch_custom_c", 2.0),
    }


def test_empty_rule_set_is_falsy() -> None:
    assert not rule_set([])
    assert rule_set([_rule()])


def test_the_configuration_page_example_extracts_the_profiler_line() -> None:
    section = section_of(doc("configuration.md"), "## Custom extraction rules")
    block = section[section.index("```yaml") + len("```yaml") : section.index("```\n\n")]
    rules = rule_set(yaml.safe_load(block)["custom_rules"])
    rules.feed_raw([PROF_LINE.encode()])
    labels = (("sync", "no sync"),)
    assert series(rules)[("specwatch_custom_eagle3_prof_accept_length", labels)] == 0.58


def test_overlong_label_value_is_counted_not_exported() -> None:
    rules = rule_set([_rule()])
    rules.feed_raw([b"Accept len: 1.5 " + b"m" * 129, b"Accept len: 2.5 " + b"m" * 128])
    assert series(rules) == {("specwatch_custom_prof_len", (("mode", "m" * 128),)): 2.5}
    assert rules.dropped_counts() == {("prof", "bad_value"): 1}


def test_a_backtracking_pattern_reads_a_hostile_line_in_linear_time() -> None:
    """``^(a+)+$`` takes Python's ``re`` hours on 40 ``a``s and a ``!``; RE2 reads a
    100,000-byte one at once, within the rule's CPU budget, so the rule stays enabled."""
    evil = {
        "name": "evil",
        "pattern": r"^(?P<run>a+)+$",
        "metrics": [{"name": "runs", "type": "counter"}],
    }
    rules = rule_set([evil])
    rules.feed_raw([b"a" * 40 + b"!", b"a" * 100_000 + b"!", b"aaaa"])
    assert series(rules) == {("specwatch_custom_runs", ()): 1.0}
    assert rules.dropped_counts() == {}


def test_a_rule_over_its_cpu_budget_is_disabled_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    slow = {
        "name": "slow",
        "pattern": r"x(?P<v>\d+)",
        "metrics": [{"name": "slow_v", "value": "v"}],
    }
    rules = CustomRuleSet(build_config({"custom_rules": [slow]}).custom_rules, cpu_budget=0.0)
    rules.feed_raw([b"x1", b"x2", b"x3"])  # any work is over a budget of 0: out after x1
    rules.feed_raw([b"x4", b"other", b"x6"])
    assert series(rules) == {("specwatch_custom_slow_v", ()): 1.0}  # what it read stays
    assert rules.dropped_counts() == {("slow", "over_budget"): 2 + 3}
    disabled = [r for r in caplog.records if "disabled until restart" in r.getMessage()]
    assert len(disabled) == 1
    assert disabled[0].getMessage().startswith("custom rule slow used")


def test_a_label_combination_without_lines_for_an_hour_frees_its_place() -> None:
    now = [0.0]
    config = build_config({"custom_rules": [_rule(max_series=2)]})
    rules = CustomRuleSet(config.custom_rules, clock=lambda: now[0])
    rules.feed_raw([b"Accept len: 1.5 old", b"Accept len: 1.5 busy"])
    now[0] = RETIRE_SECONDS - 1
    rules.feed_raw([b"Accept len: 2.0 busy", b"Accept len: 1.5 new"])  # full: refused
    assert rules.dropped_counts() == {("prof", "series_limit"): 1}
    now[0] = RETIRE_SECONDS + 1  # "old" is an hour quiet, "busy" is not
    rules.feed_raw([b"Accept len: 3.0 new"])
    assert series(rules) == {
        ("specwatch_custom_prof_len", (("mode", "busy"),)): 2.0,
        ("specwatch_custom_prof_len", (("mode", "new"),)): 3.0,
    }
    assert rules.dropped_counts() == {("prof", "series_limit"): 1}


def test_a_rule_matching_every_line_of_a_long_batch_is_working_not_over_budget() -> None:
    """A budget per batch disabled a healthy rule once a catch-up batch was long enough. A
    budget of 5 ms keeps the batch short: its lines take many times that, each far less."""
    rule = {
        "name": "al",
        "pattern": r"accept len: (?P<v>[\d.]+)",
        "metrics": [{"name": "al", "value": "v"}],
    }
    rules = rule_set([rule], cpu_budget=0.005)
    gc.disable()  # a collection of this test process's heap inside one line is not the rule's
    try:
        rules.feed_raw([decode_line(2.5).encode()] * 5_000)
    finally:
        gc.enable()
    assert rules.dropped_counts() == {}
    assert series(rules) == {("specwatch_custom_al", ()): 2.5}
