"""Custom rules through the real daemon: metrics from a log, and a bad rule refused at start."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.custom_rules import documented_rules
from tests.support.daemon import run_daemon, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import PROF_LINE
from tests.support.proc import SCRAPE_TIMEOUT

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


def test_an_old_log_moved_into_place_leaves_no_custom_gauge_current(
    tmp_path: Path, port: int
) -> None:
    """Its lines count, but a gauge read from a file last written 2 hours ago is history."""
    log, archived = tmp_path / "server.log", tmp_path / "archive.log"
    archived.write_text(PROF_LINE + "\n" + PROF_LINE + "\n")
    written = time.time() - 7200
    os.utime(archived, (written, written))
    config = tmp_path / "specwatch.yaml"
    config.write_text(yaml.safe_dump({"custom_rules": documented_rules()}))
    with run_daemon(["--config", str(config), "--log-file", str(log)], port) as d:
        os.rename(archived, log)
        name = "specwatch_custom_eagle3_prof_reports_total"
        s = d.wait_metric(name, lambda v: v == 2, target="default", sync="no sync")
        assert s.values("specwatch_custom_eagle3_prof_accept_length") == []
        append(log, PROF_LINE)  # the server writes again: current
        s = d.wait_metric("specwatch_custom_eagle3_prof_accept_length", lambda v: v == 0.58)
        assert s.value(name, target="default", sync="no sync") == 3


def _start(config: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``specwatch run`` with ``config``, expected to refuse it."""
    log = str(tmp_path / "x.log")
    cmd = specwatch_cmd("run", "--config", str(config), "--log-file", log)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)


def test_bad_rule_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "specwatch.yaml"
    rule = {"name": "bad", "pattern": "(?P<v", "metrics": [{"name": "m", "value": "v"}]}
    config.write_text(yaml.safe_dump({"custom_rules": [rule]}))
    result = _start(config, tmp_path)
    assert result.returncode == 2
    assert "custom_rules.0.pattern: invalid regular expression" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_rules_over_the_series_budget_stop_the_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "specwatch.yaml"
    rules = [
        {
            "name": f"r{i}",
            "pattern": r"id=(?P<id>\d+) v=(?P<v>\d+)",
            "labels": ["id"],
            "max_series": 1000,
            "metrics": [{"name": f"m{i}", "value": "v"}],
        }
        for i in range(300)
    ]
    config.write_text(yaml.safe_dump({"custom_rules": rules}))
    result = _start(config, tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("specwatch run: error: custom_rules: ")
    assert "300000 series" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


EVIL_RULE = {
    "name": "runs",
    "pattern": r"^(?P<run>a+)+$",  # nested quantifiers: exponential for a backtracking matcher
    "metrics": [{"name": "runs", "type": "counter"}],
}


def test_a_catastrophic_pattern_neither_stalls_scrapes_nor_signals(
    tmp_path: Path, port: int
) -> None:
    """Under Python's ``re`` one 41-byte line froze the tail thread, every scrape and SIGTERM."""
    log = tmp_path / "server.log"
    config = tmp_path / "specwatch.yaml"
    config.write_text(yaml.safe_dump({"custom_rules": [*documented_rules(), EVIL_RULE]}))
    with run_daemon(["--config", str(config), "--log-file", str(log)], port) as d:
        hostile = ["a" * n + "!" for n in (40, 64, 1000, 500_000)]
        append(log, *hostile, PROF_LINE)
        name = "specwatch_custom_eagle3_prof_reports_total"
        d.wait_metric(name, lambda v: v == 1, sync="no sync")  # read past them
        append(log, *hostile)
        # Frozen, the scrape and the stop never come: Prometheus' scrape timeout is ample.
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as answer:
            assert answer.status == 200
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=SCRAPE_TIMEOUT) == 0


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"pattern": r"^(?P<run>a+)\1$"}, "custom_rules.0.pattern"),  # a backreference
        ({"labels": ["__name__"], "pattern": r"(?P<__name__>\w+)"}, "custom_rules.0.labels"),
        (
            {"metrics": [{"name": "rule_dropped_lines", "type": "counter"}]},
            "custom_rules.0.metrics.0.name",
        ),
    ],
)
def test_a_rule_re2_cannot_run_or_a_reserved_label_stops_the_start(
    tmp_path: Path, change: dict[str, object], key: str
) -> None:
    config = tmp_path / "specwatch.yaml"
    config.write_text(yaml.safe_dump({"custom_rules": [{**EVIL_RULE, **change}]}))
    result = _start(config, tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"specwatch run: error: {key}: ")
    assert len(result.stderr.strip().splitlines()) == 1
