"""Custom rules through the real daemon: metrics from a log, and a bad rule refused at start."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.custom_rules import documented_rules
from tests.support.daemon import run_daemon, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import PROF_LINE

pytestmark = pytest.mark.e2e


def test_profiler_lines_become_custom_metrics(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    config = tmp_path / "specwatch.yaml"
    config.write_text(yaml.safe_dump({"custom_rules": documented_rules()}))
    with run_daemon(["--config", str(config), "--log-file", str(log)], port) as d:
        append(log, PROF_LINE, PROF_LINE)
        name = "specwatch_custom_eagle3_prof_reports_total"
        s = d.wait_metric(name, lambda v: v == 2, target="default", sync="no sync")
        assert s.value("specwatch_custom_eagle3_prof_accept_length", sync="no sync") == 0.58


def test_bad_rule_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "specwatch.yaml"
    rule = {"name": "bad", "pattern": "(?P<v", "metrics": [{"name": "m", "value": "v"}]}
    config.write_text(yaml.safe_dump({"custom_rules": [rule]}))
    result = subprocess.run(
        specwatch_cmd("run", "--config", str(config), "--log-file", str(tmp_path / "x.log")),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "custom_rules.0.pattern: invalid regular expression" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
