"""End to end: a simulated incident log, the real exporter, Prometheus, Alertmanager, a webhook.

This is the path an on-call engineer's page takes: ``specwatch simulate`` writes an SGLang log
in real time, ``specwatch run`` tails it, a real Prometheus scrapes specwatch every second and
evaluates the shipped rules, a real Alertmanager routes with the shipped example config, and
the notification reaches a webhook in this test. Only two things differ from production, both
derived from the shipped files: ``for:``/``keep_firing_for:`` shrink from minutes to seconds,
and the Alertmanager receivers point at the test webhook and wait one second instead of 30.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, require_tool
from tests.daemon import run_daemon, specwatch_cmd, wait_for
from tests.realprom import (
    RunningAlertmanager,
    RunningPrometheus,
    WebhookReceiver,
    running_alertmanager,
    running_prometheus,
    webhook_receiver,
)

RULES = REPO / "alerts" / "specwatch-rules.yaml"
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
# Spec section 2, incident 1 and the baseline curve of spec section 11: 1,500 tok/s at 48 running.
BASELINE_CURVE = "1:82,48:1500,128:2370"
INCIDENT_1_SPEEDUP = 600 / 1500
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration_seconds(text: str) -> int:
    """Seconds of a Prometheus duration such as ``5m`` or ``1h30m``."""
    parts = re.findall(r"(\d+)([smh])", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"unsupported duration {text!r}"
    return sum(int(n) * DURATION_UNITS[u] for n, u in parts)


def fast_rules(rules_text: str) -> dict[str, Any]:
    """The shipped rules with every minute of ``for``/``keep_firing_for`` turned into a second."""
    rules = yaml.safe_load(rules_text)
    for group in rules["groups"]:
        for rule in group["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = f"{max(1, duration_seconds(rule[key]) // 60)}s"
    return rules


def fast_alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """The shipped Alertmanager example, every webhook aimed at ``webhook_url``, short waits."""
    config = yaml.safe_load(ALERTMANAGER.read_text())
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = webhook_url
    return config


def test_fast_rules_shrink_only_durations() -> None:
    shipped = yaml.safe_load(RULES.read_text())
    fast = fast_rules(RULES.read_text())
    for old_group, new_group in zip(shipped["groups"], fast["groups"], strict=True):
        for old, new in zip(old_group["rules"], new_group["rules"], strict=True):
            if "for" in old:
                assert duration_seconds(new["for"]) * 60 == duration_seconds(old["for"])
            assert {k: v for k, v in new.items() if k not in ("for", "keep_firing_for")} == {
                k: v for k, v in old.items() if k not in ("for", "keep_firing_for")
            }


@pytest.fixture
def alerting(tmp_path: Path) -> Iterator[tuple[WebhookReceiver, RunningAlertmanager]]:
    """A webhook receiver behind a real Alertmanager running the shipped example config."""
    require_tool("prometheus-alertmanager")
    with (
        webhook_receiver() as webhook,
        running_alertmanager(tmp_path, fast_alertmanager_config(webhook.url)) as alertmanager,
    ):
        yield webhook, alertmanager


@contextmanager
def simulated(tmp_path: Path, scenario: str) -> Iterator[Path]:
    """``scenario`` written in real time, wall-clock stamped, for as long as the block runs."""
    log = tmp_path / f"{scenario}.log"
    cmd = specwatch_cmd("simulate", "--scenario", scenario, "--out", str(log), "--rate", "4")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: log.exists() or proc.poll() is not None, timeout=15)
        assert proc.poll() is None, f"simulator exited: {proc.stderr.read() if proc.stderr else ''}"
        yield log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def watched_incident(
    tmp_path: Path, port: int, scenario: str, alertmanager: RunningAlertmanager
) -> Iterator[RunningPrometheus]:
    """The simulator, ``specwatch run`` on its log and Prometheus evaluating the fast rules."""
    require_tool("prometheus")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(fast_rules(RULES.read_text())))
    args = ["--from-beginning", "--target", "sglang-0", "--baseline-curve", BASELINE_CURVE]
    with (
        simulated(tmp_path, scenario) as log,
        run_daemon(["--log-file", str(log), *args], port),
        running_prometheus(tmp_path, [f"127.0.0.1:{port}"], [rules], alertmanager.url) as prom,
    ):
        yield prom


def held_back(alertmanager: RunningAlertmanager, alertname: str) -> list[dict[str, Any]]:
    """Alerts of that name Alertmanager holds and inhibits."""
    return [
        a
        for a in alertmanager.alerts()
        if a["labels"]["alertname"] == alertname and a["status"]["inhibitedBy"]
    ]


def firing(prometheus: RunningPrometheus, alertname: str) -> list[dict[str, Any]]:
    return prometheus.query(f'ALERTS{{alertname="{alertname}",alertstate="firing"}}')


def notified(webhook: WebhookReceiver, alertname: str) -> list[dict[str, Any]]:
    return [a for a in webhook.alerts() if a["labels"]["alertname"] == alertname]


def annotations_of(alertname: str) -> dict[str, str]:
    rules = yaml.safe_load(RULES.read_text())
    return next(
        rule["annotations"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == alertname
    )


def test_collapsed_drafter_pages_through_alertmanager_with_labels_and_annotations(
    tmp_path: Path, port: int, alerting: tuple[WebhookReceiver, RunningAlertmanager]
) -> None:
    webhook, alertmanager = alerting
    instance = f"127.0.0.1:{port}"
    with watched_incident(tmp_path, port, "collapsed", alertmanager) as prometheus:
        pages = prometheus.wait_for(
            lambda: notified(webhook, "SpecDecodeAcceptLengthCollapsed"), timeout=60
        )
        page = pages[0]
        assert page["receiver"] == "pager"
        assert page["labels"] == {
            "alertname": "SpecDecodeAcceptLengthCollapsed",
            "severity": "critical",
            "job": "specwatch",
            "instance": instance,
            "target": "sglang-0",
        }
        expected = annotations_of("SpecDecodeAcceptLengthCollapsed")
        assert page["annotations"]["summary"] == expected["summary"]
        assert page["annotations"]["runbook_url"] == expected["runbook_url"]
        # Every window of incident 1 logs `accept len: 1.00`.
        assert page["annotations"]["description"].startswith(
            f"Accept length on sglang-0 ({instance}) averaged 1.00 over 5 minutes"
        )

        tickets = prometheus.wait_for(
            lambda: notified(webhook, "SpecDecodeSlowerThanBaseline"), timeout=60
        )
        assert tickets[0]["receiver"] == "tickets"
        assert tickets[0]["labels"]["severity"] == "warning"
        speedup = re.search(r"generates ([0-9.]+)x", tickets[0]["annotations"]["description"])
        assert speedup and float(speedup.group(1)) == pytest.approx(INCIDENT_1_SPEEDUP, abs=0.05)

        # The warning twin fires in Prometheus but Alertmanager holds it back.
        prometheus.wait_for(lambda: firing(prometheus, "SpecDecodeAcceptLengthLow"), timeout=60)
        prometheus.wait_for(lambda: held_back(alertmanager, "SpecDecodeAcceptLengthLow"), 30)
        time.sleep(3)  # several group intervals: a leak would have been delivered by now
        assert notified(webhook, "SpecDecodeAcceptLengthLow") == []
        # Incident 1 is not a CUDA-graph, configuration or exporter problem.
        for quiet in ("SpecDecodeCudaGraphDisabled", "SpecwatchDown", "SpecDecodeMisconfigured"):
            assert firing(prometheus, quiet) == [], quiet


def test_wrong_algorithm_flag_pages_for_the_cause_not_the_symptom(
    tmp_path: Path, port: int, alerting: tuple[WebhookReceiver, RunningAlertmanager]
) -> None:
    """Incident 2: the page names the flag; the collapsed accept length it causes is held."""
    webhook, alertmanager = alerting
    with watched_incident(tmp_path, port, "eagle-flag", alertmanager) as prometheus:
        pages = prometheus.wait_for(lambda: notified(webhook, "SpecDecodeMisconfigured"), 60)
        assert pages[0]["receiver"] == "pager"
        assert pages[0]["labels"] == {
            "alertname": "SpecDecodeMisconfigured",
            "severity": "critical",
            "code": "eagle3_draft_with_eagle_algorithm",
            "job": "specwatch",
            "instance": f"127.0.0.1:{port}",
            "target": "sglang-0",
        }
        assert pages[0]["annotations"] == {
            key: value.replace("{{ $labels.target }}", "sglang-0").replace(
                "{{ $labels.instance }}", f"127.0.0.1:{port}"
            )
            for key, value in annotations_of("SpecDecodeMisconfigured").items()
        }
        prometheus.wait_for(
            lambda: firing(prometheus, "SpecDecodeAcceptLengthCollapsed"), timeout=60
        )
        prometheus.wait_for(
            lambda: held_back(alertmanager, "SpecDecodeAcceptLengthCollapsed"), timeout=30
        )
        time.sleep(3)  # several group intervals: a leak would have been delivered by now
        assert notified(webhook, "SpecDecodeAcceptLengthCollapsed") == []


def _alert(alertname: str, severity: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": alertname, "severity": severity, "job": "specwatch", **labels}}


def test_alertmanager_example_inhibits_symptoms_and_blind_spots(
    alerting: tuple[WebhookReceiver, RunningAlertmanager],
) -> None:
    """Inhibitions of the shipped config, alerts posted the way Prometheus posts them."""
    _, alertmanager = alerting
    node_a = {"instance": "a:9477", "target": "sglang-a"}
    node_b = {"instance": "b:9477", "target": "sglang-b"}
    node_c = {"instance": "c:9477", "target": "sglang-c"}
    alertmanager.post_alerts(
        [
            _alert("SpecDecodeAcceptLengthCollapsed", "critical", **node_a),
            _alert("SpecDecodeAcceptLengthLow", "warning", **node_a),  # twin: inhibited
            _alert("SpecDecodeAcceptLengthLow", "warning", **node_b),  # other target: kept
            _alert("SpecDecodeSlowerThanBaseline", "warning", **node_a),  # not a twin: kept
            _alert("SpecwatchDown", "warning", instance="c:9477"),
            _alert("SpecDecodeCudaGraphDisabled", "warning", **node_c),  # blind node: inhibited
            _alert(
                "SpecDecodeMisconfigured",
                "critical",
                code="eagle3_draft_with_eagle_algorithm",
                instance="d:9477",
                target="sglang-d",
            ),
            _alert(
                "SpecDecodeAcceptLengthCollapsed", "critical", instance="d:9477", target="sglang-d"
            ),
        ]
    )
    expected = {
        ("SpecDecodeAcceptLengthLow", "a:9477"),
        ("SpecDecodeCudaGraphDisabled", "c:9477"),
        ("SpecDecodeAcceptLengthCollapsed", "d:9477"),
    }

    def inhibited() -> set[tuple[str, str]] | None:
        alerts = alertmanager.alerts()
        if len(alerts) < 8:
            return None
        found = {
            (a["labels"]["alertname"], a["labels"]["instance"])
            for a in alerts
            if a["status"]["inhibitedBy"]
        }
        return found if found == expected else None

    wait_for(inhibited, timeout=15, interval=0.2)
