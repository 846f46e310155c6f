"""The oldest Prometheus specwatch supports: 2.x, here Debian 12's 2.42 from the PATH.

Every other real-component test runs the pinned Prometheus 3.5 LTS and current Alertmanager
(``make tools``). This is the cheap subset that keeps 2.x from breaking unseen: the shipped
rules load, and one incident pages end to end (a simulated collapsed drafter, the real daemon,
a Prometheus 2 scraping it with the shipped rules, ``for:`` shrunk to seconds).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import live_simulation, run_daemon
from tests.support.realprom import running_prometheus
from tests.support.tools import RULE_FILES, fast_rules, floor_tool, free_port

pytestmark = pytest.mark.e2e

# The collapsed drafter's decode speed against the documented baseline curve (docs/alerts.md).
BASELINE_CURVE = "1:82,48:1500,128:2370"
# A collapse is the page alone: its low accept length and slowdown are not alerts of their own.
COLLAPSE = {"SpecDecodeAcceptLengthCollapsed"}


def test_prometheus_2_loads_every_shipped_rule() -> None:
    promtool = floor_tool("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_2_raises_the_collapse_from_a_live_log(tmp_path: Path) -> None:
    prometheus = floor_tool("prometheus")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(fast_rules()))
    log = tmp_path / "server.log"
    args = ["--log-file", str(log), "--from-beginning", "--target", "collapsed"]
    args += ["--baseline-curve", BASELINE_CURVE]
    with (
        live_simulation("collapsed", log),
        run_daemon(args, port := free_port()),
        running_prometheus(tmp_path, [f"127.0.0.1:{port}"], [rules], binary=prometheus) as prom,
    ):

        def firing() -> set[str]:
            query = 'ALERTS{alertstate="firing",target="collapsed"}'
            return {series["metric"]["alertname"] for series in prom.query(query)}

        assert prom.wait_for(lambda: firing() >= COLLAPSE or None, timeout=90)
