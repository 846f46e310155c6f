"""The rules and dashboards on a Prometheus 3 that stores classic histograms as native ones.

With ``convert_classic_histograms_to_nhcb: true`` in the scrape config and native histograms
on (``--enable-feature=native-histograms``; without it Prometheus 3.5 keeps neither form),
common on Prometheus 3, specwatch's histograms are kept as native histograms with custom
buckets: their ``_bucket`` and ``_count`` series no longer exist. A rule reading only those
stays empty and its alert can never fire; a heatmap reading only them goes blank. Here a
simulated node whose requests partly get nothing from the drafter (scenario
``hidden-share``, logging its finished requests) is scraped that way by the pinned
Prometheus with the shipped rules (``for:`` in seconds): the share is recorded, the alert
fires, and every dashboard query that reads a histogram returns data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from exporter.mixin.dashboards.queries import Query, dashboard_queries, expand
from tests.support.daemon import live_simulation, run_daemon
from tests.support.realprom import RunningPrometheus, running_prometheus
from tests.support.tools import REPO, fast_rules, free_port

pytestmark = pytest.mark.e2e

NATIVE = {"convert_classic_histograms_to_nhcb": True}
NATIVE_FLAGS = ["--enable-feature=native-histograms"]
HISTOGRAMS = ("specwatch_request_accept_length", "specwatch_accept_length_windows")
# Grafana's $__rate_interval: at least four scrape intervals of one second.
RATE_INTERVAL = "10s"
HISTOGRAM_QUERIES = [
    query
    for name in ("specwatch-node.json", "specwatch-fleet.json")
    for query in dashboard_queries(json.loads((REPO / "dashboards" / name).read_text()))
    if any(histogram in query.expr for histogram in HISTOGRAMS)
]


def firing(prom: RunningPrometheus) -> set[str]:
    return {s["metric"]["alertname"] for s in prom.query('ALERTS{alertstate="firing"}')}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    """The node scraped with conversion on; yields once the requests' alert fires."""
    tmp = tmp_path_factory.mktemp("native-histograms")
    rules = tmp / "rules.yaml"
    rules.write_text(yaml.safe_dump(fast_rules()))
    log = tmp / "server.log"
    args = ["--log-file", str(log), "--from-beginning", "--target", "hidden-share"]
    with (
        live_simulation("hidden-share", log),
        run_daemon(args, port := free_port()),
        running_prometheus(
            tmp, [f"127.0.0.1:{port}"], [rules], flags=NATIVE_FLAGS, settings=NATIVE
        ) as prom,
    ):
        prom.wait_for(lambda: "SpecDecodeRequestsWithoutBenefit" in firing(prom), timeout=120)
        yield prom


def test_the_histograms_are_stored_as_native_ones(prometheus: RunningPrometheus) -> None:
    """The premise: conversion is on, so the classic series the old rules read are gone."""
    assert prometheus.query("specwatch_request_accept_length_bucket") == []
    assert prometheus.query("specwatch_request_accept_length_count") == []
    [series] = prometheus.query("specwatch_request_accept_length")
    assert "histogram" in series


def test_the_share_without_benefit_is_recorded(prometheus: RunningPrometheus) -> None:
    [share] = prometheus.query("target:specwatch_requests_without_benefit:ratio")
    assert 0.1 < float(share["value"][1]) < 1


@pytest.mark.parametrize("query", HISTOGRAM_QUERIES, ids=[q.where for q in HISTOGRAM_QUERIES])
def test_histogram_panels_show_data(prometheus: RunningPrometheus, query: Query) -> None:
    expr = expand(query.expr, RATE_INTERVAL)
    assert prometheus.query(expr), f"no data for {expr}"
