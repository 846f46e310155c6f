"""``promtool check metrics`` on a live ``/metrics``: what users' own tooling lints.

A running exporter, fed a simulated incident and scraping a stand-in SGLang over loopback, so
the scrape carries every family a busy node exports (per-window gauges, histogram, findings,
upstream health), in both exposition formats Prometheus negotiates.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from exporter.exposition.families import FAMILIES
from exporter.simulate import SCENARIOS
from tests.support.daemon import RunningDaemon, live_simulation, run_daemon
from tests.support.fake_sglang import sglang_http_api
from tests.support.tools import free_port, require_tool

TEXT = "text/plain; version=0.0.4"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture(scope="module")
def busy_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    log = tmp_path_factory.mktemp("lint") / "server.log"
    with sglang_http_api() as server, live_simulation("undertrained", log):
        args = [
            "--log-file", str(log), "--from-beginning", "--target", "sglang-0",
            "--metrics-url", f"{server.url}/metrics",
            "--server-info-url", f"{server.url}/server_info",
            "--baseline-curve", SCENARIOS["undertrained"].baseline_flag(),
            "--expected-accept-length", "3.0",
        ]  # fmt: skip
        with run_daemon(args, free_port()) as daemon:
            # The log's own windows, not only the upstream's values standing in before its
            # first decode line is read: two scrapes a moment apart must hold one set of
            # families.
            for name in ("specwatch_last_decode_timestamp_seconds", "specwatch_accept_ratio"):
                daemon.wait_metric(name, lambda v: v is not None, 30)
            daemon.wait_metric("specwatch_upstream_up", lambda v: v == 1, 30, endpoint="metrics")
            yield daemon


def fetch(port: int, accept: str) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith(accept.split(";")[0])
        body: bytes = resp.read()
        return body


def lint(promtool: str, body: bytes) -> str:
    """What promtool complains about (nothing, for a clean exposition)."""
    result = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, timeout=60
    )
    return "" if result.returncode == 0 else (result.stdout + result.stderr).decode()


@pytest.mark.e2e
def test_promtool_finds_nothing_to_lint_in_a_live_text_scrape(busy_exporter: RunningDaemon) -> None:
    promtool = require_tool("promtool")
    body = fetch(busy_exporter.port, TEXT)
    for family in (
        "specwatch_accept_ratio",
        "specwatch_accept_length_windows",
        "specwatch_finding",
    ):
        assert f"# TYPE {family} ".encode() in body, family
    assert lint(promtool, body) == ""


@pytest.mark.e2e
def test_openmetrics_scrape_parses_strictly_and_lints_clean(busy_exporter: RunningDaemon) -> None:
    """promtool reads only the text format: the OpenMetrics body is parsed by the strict
    OpenMetrics parser (it raises on any violation), then the same families are linted."""
    promtool = require_tool("promtool")
    body = fetch(busy_exporter.port, OPENMETRICS).decode()
    assert body.endswith("# EOF\n")
    families = list(openmetrics.text_string_to_metric_families(body))
    text = fetch(busy_exporter.port, TEXT).decode()
    assert {f.name for f in families} == {f.name for f in text_string_to_metric_families(text)}

    class Replay(Collector):
        def collect(self) -> Iterable[Metric]:
            return families

    registry = CollectorRegistry()
    registry.register(Replay())
    assert lint(promtool, generate_latest(registry)) == ""


# Units the naming guide replaces by base units (seconds, bytes, ratios of 0-1).
NON_BASE_UNIT = re.compile(
    r"_(percent|percentage|milliseconds|ms|microseconds|us|minutes|hours|days|"
    r"kilobytes|kb|megabytes|mb|gigabytes|gb|bits)(_|$)"
)


@pytest.mark.parametrize("short", sorted(FAMILIES))
def test_family_name_follows_the_naming_guide(short: str) -> None:
    """What promtool cannot see from one scrape: base units, `_ratio` on 0-1 shares, times in
    seconds, and counters named without the `_total` the exposition appends."""
    kind, help_text = FAMILIES[short]
    assert not NON_BASE_UNIT.search(short), short
    if "(0-1)" in help_text:
        assert short.endswith("_ratio"), short
    if re.search(r"timestamp|duration|_time\b", short):
        assert short.endswith("_seconds"), short
    if kind == "counter":
        assert not short.endswith("_total"), short


@pytest.mark.e2e
def test_the_lint_rejects_a_badly_named_family(tmp_path: Path) -> None:
    """The check above can fail: promtool flags a counter without `_total`."""
    promtool = require_tool("promtool")
    bad = b"# HELP specwatch_lines Lines.\n# TYPE specwatch_lines counter\nspecwatch_lines 1\n"
    result = subprocess.run([promtool, "check", "metrics"], input=bad, capture_output=True)
    assert result.returncode != 0 and b"_total" in result.stdout + result.stderr
