"""Every dashboard query returns data from a real Prometheus that scraped the real exporter,
and so does every runbook query whose series are there.

A renamed metric or label leaves a panel blank without any error in Grafana; here it fails a
test. Two ``specwatch run`` processes tail logs that ``specwatch simulate`` writes live:

- ``sick``: an undertrained drafter (scenario ``undertrained``) - findings active, CUDA
  graphs off, slower than its 90 tok/s baseline; its server's HTTP port refuses connections, so
  the upstream panels show a down endpoint and counted errors.
- ``ok``: the healthy scenario; its server's /metrics and /server_info are served on loopback in
  SGLang's formats, so the upstream panels also show endpoints that are up, and it logs its
  finished requests (``--log-requests``, JSON) for the per-request panels.
- ``vllm``: the healthy scenario on vLLM, from its log alone: the panels of what only vLLM
  logs (acceptance by draft position, accept length from its draft counters).
- ``llama`` and ``trtllm``: a llama.cpp and a TensorRT-LLM server, scraped only, whose
  counters keep counting: the panels of per-position counts, and both engines in every panel
  their metrics feed.
- ``adaptive``: SGLang's adaptive speculation with drafting off at 96 running, from its log
  alone: the panel of the draft steps in force and the share of windows with drafting off.

One Prometheus scrapes them all every second as job ``specwatch`` and evaluates the project's alert
rules with every ``for:`` cut to zero, so firing alerts exist for the annotation query. Each
query is then run with Grafana's variables on "All" and must return at least one series.
No query is exempt. The runbook's queries are run with its ``T`` (the alert's target) on every
target: one whose every series selector finds data must find data too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from exporter.mixin.dashboards.queries import Query, dashboard_queries, expand
from exporter.simulate.scenarios import SCENARIOS
from tests.support.daemon import RunningDaemon, entered_together, live_simulation, run_daemon
from tests.support.docs import runbook_queries
from tests.support.fake_sglang import fake_sglang, sglang_http_api
from tests.support.realprom import RunningPrometheus, running_prometheus
from tests.support.tools import REPO, free_port, require_tool, shipped_rules
from tests.support.upstream_servers import (
    TRTLLM_PATH,
    TrtllmMetrics,
    live,
    steady_llamacpp,
    steady_trtllm,
)

pytestmark = pytest.mark.e2e

# Grafana sets $__rate_interval to at least four scrape intervals; Prometheus scrapes every 1 s.
RATE_INTERVAL = "10s"
# A series selector of a query: a specwatch series, a recording rule or ``up``, with its
# matchers and offset; its range (``[10m]``) is left out, so the selector is an instant query.
SELECTOR = re.compile(
    r"(?<![\w:])((?:target|job|target_band|served_model_hardware_band):specwatch_\w+:\w+"
    r"|specwatch_\w+|up)(\{[^}]*\})?(?:\[\w+\])?"
    r"( offset \w+)?"
)
# A comparison filters series on purpose (``up == 0`` is empty while specwatch is up).
COMPARISON = re.compile(r"\s(?:==|!=|>=?|<=?)\s")
QUERIES: list[Query] = [
    query
    for name in ("specwatch-node.json", "specwatch-fleet.json")
    for query in dashboard_queries(json.loads((REPO / "dashboards" / name).read_text()))
]


@dataclass(frozen=True)
class Node:
    """One simulated serving node and how its specwatch is started."""

    name: str
    scenario: str
    upstream: str | None  # base URL of the server's HTTP API; None: the log alone
    engine: str = "sglang"
    log_requests: str | None = None  # the server logs its finished requests (text or json)


@contextmanager
def specwatch(node: Node, log: Path) -> Iterator[RunningDaemon]:
    """``specwatch run`` for one node, with the baseline and expected accept length set."""
    upstream = [
        *("--metrics-url", f"{node.upstream}/metrics"),
        *("--server-info-url", f"{node.upstream}/server_info"),
    ]
    args = [
        "--log-file",
        str(log),
        "--from-beginning",
        "--target",
        node.name,
        *(upstream if node.upstream else []),
        "--baseline-curve",
        SCENARIOS[node.scenario].baseline_flag(),
        "--expected-accept-length",
        "3.0",
    ]
    with run_daemon(args, free_port()) as daemon:
        yield daemon


def rules_firing_at_once(tmp_path: Path) -> Path:
    """The project's alert rules with ``for:`` removed, so alerts fire within seconds."""
    config = shipped_rules()
    for group in config["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
    path = tmp_path / "rules-firing-at-once.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def has_data(prom: RunningPrometheus, query: Query) -> bool:
    return bool(prom.query(expand(query.expr, RATE_INTERVAL)))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    """Both nodes running and scraped, once every query has data (or 90 s have passed)."""
    require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("dashboards-realprom")
    with ExitStack() as stack:
        refused = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        nodes = [
            Node("sick", "undertrained", refused),
            Node("ok", "healthy", stack.enter_context(sglang_http_api()).url, log_requests="json"),
            Node("vllm", "healthy", None, engine="vllm"),
            Node("adaptive", "adaptive", None),
        ]
        simulations = [
            live_simulation(
                node.scenario,
                tmp / f"{node.name}.log",
                engine=node.engine,
                log_requests=node.log_requests,
            )
            for node in nodes
        ]
        logs = entered_together(stack, simulations)
        starting = [specwatch(node, log) for node, log in zip(nodes, logs, strict=True)]
        scraped = stack.enter_context(fake_sglang())
        trtllm = steady_trtllm(TrtllmMetrics(), accepted_at=(36, 28, 16), iteration_accepted=8)
        for name, path, body in (
            ("llama", "/metrics", steady_llamacpp((0.8, 0.5, 0.2))),
            ("trtllm", TRTLLM_PATH, trtllm),
        ):
            stack.enter_context(live(scraped, path, body))
            scraped_only = ["--target", name, "--metrics-url", f"{scraped.url}{path}"]
            starting.append(run_daemon(scraped_only, free_port()))
        daemons = entered_together(stack, starting)
        prom = stack.enter_context(
            running_prometheus(
                tmp,
                [f"127.0.0.1:{daemon.port}" for daemon in daemons],
                rule_files=[rules_firing_at_once(tmp)],
            )
        )
        # On timeout, each query's own test below names what stayed empty.
        with suppress(AssertionError):
            prom.wait_for(lambda: all(has_data(prom, q) for q in QUERIES), timeout=90)
        yield prom


@pytest.mark.parametrize("query", QUERIES, ids=[q.where for q in QUERIES])
def test_dashboard_query_returns_data_from_real_prometheus(
    prometheus: RunningPrometheus, query: Query
) -> None:
    expr = expand(query.expr, RATE_INTERVAL)
    assert prometheus.query(expr), f"{query.where}: no data for {expr}"


def test_scraped_only_engines_show_in_the_fleet_panels(prometheus: RunningPrometheus) -> None:
    """TensorRT-LLM and llama.cpp, with no log, are counted and listed as any other target."""
    fleet = {
        q.where.split(" / ")[2]: q.expr for q in QUERIES if q.where.startswith("specwatch / Fleet")
    }
    per_target = prometheus.query(expand(fleet["Accept length per target"], RATE_INTERVAL))
    assert {"llama", "trtllm"} <= {series["metric"]["target"] for series in per_target}
    (watched,) = prometheus.query(expand(fleet["Targets watched"], RATE_INTERVAL))
    assert watched["value"][1] == "6"  # sick, ok, vllm, adaptive, llama, trtllm


def on_every_target(query: str) -> str:
    """A runbook query with its placeholders (the alert's target, instance) matching any."""
    return query.replace('target="T"', 'target=~".+"').replace(
        'instance="<instance>"', 'instance=~".+"'
    )


def test_runbook_queries_find_data_where_their_series_have_it(
    prometheus: RunningPrometheus,
) -> None:
    """A query whose sides never match (a histogram bucket's ``le`` against its ``_count``)
    answers nothing, and an on-call reads that as nothing wrong."""
    checked, empty = 0, []
    for query in map(on_every_target, runbook_queries()):
        selectors = ["".join(parts) for parts in SELECTOR.findall(query)]
        assert selectors, f"no series selector found in {query}"
        if COMPARISON.search(query) or not all(prometheus.query(s) for s in selectors):
            continue
        checked += 1
        if not prometheus.query(query):
            empty.append(query)
    assert checked > 20, "the runbook's queries are no longer found or no longer have data"
    assert not empty
