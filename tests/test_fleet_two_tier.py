"""A two-tier Prometheus fleet, run for real: clusters forward to a central Prometheus.

Each of two clusters, ``east`` and ``west``, runs an agent-mode Prometheus with its own
``external_labels: {cluster: ...}`` that scrapes two real ``specwatch run`` daemons (one on an
SGLang log, one on a vLLM log, both written live by ``specwatch simulate``) and forwards
every sample by ``remote_write``. A central Prometheus receives them
(``--web.enable-remote-write-receiver``) and evaluates the multi-cluster rendering of the
rules, as a Thanos Ruler or Mimir ruler would. One node of ``east`` collapses; the page must
reach the central tier naming ``cluster="east"`` and that node's ``instance``, and nothing
else may page for it. The fleet recording rules and every query of the multi-cluster fleet
dashboard are then run on the central tier.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.mixin.dashboards.build import render as render_dashboards
from exporter.mixin.dashboards.queries import Query, dashboard_queries, expand
from exporter.mixin.groups import recorded
from exporter.mixin.render import render
from exporter.mixin_config import MixinConfig
from exporter.simulate.scenarios import SCENARIOS
from tests.support.daemon import entered_together, live_simulation, run_daemon
from tests.support.docs import doc, section
from tests.support.metrics import Scrape
from tests.support.realprom import RunningPrometheus, running_agent, running_prometheus
from tests.support.tools import duration_seconds, free_port, require_tool

pytestmark = pytest.mark.e2e

CONFIG = MixinConfig(multi_cluster=True, cluster_label="cluster")
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval at four 1 s scrapes, rounded up
PAGE_TIMEOUT = 120.0


@dataclass(frozen=True)
class Node:
    cluster: str
    name: str
    scenario: str
    engine: str


# The collapsed node is east's SGLang server; west's is slow (an undertrained drafter) but not
# collapsed, so every panel that lists sick nodes has one in each cluster. Each cluster also
# runs an adaptive SGLang server with drafting off at its load, by design: it must not page,
# and the adaptive panels have a node in each cluster.
NODES = (
    Node("east", "east-sglang", "collapsed", "sglang"),
    Node("east", "east-vllm", "healthy", "vllm"),
    Node("east", "east-adaptive", "adaptive", "sglang"),
    Node("west", "west-sglang", "undertrained", "sglang"),
    Node("west", "west-vllm", "healthy", "vllm"),
    Node("west", "west-adaptive", "adaptive", "sglang"),
)
COLLAPSED = NODES[0]


@cache
def rendered() -> dict[str, str]:
    """The multi-cluster rendering, made once a process (about 0.4 CPU-s) and only by the tests
    that run: collecting this file asks for none of it."""
    return render(CONFIG)


@dataclass(frozen=True)
class Fleet:
    central: RunningPrometheus
    instances: dict[str, str]  # node name -> the instance label its scrape carries


def central_rules(folder: Path) -> list[Path]:
    """The multi-cluster rendering, minutes of ``for``/``keep_firing_for`` cut to seconds."""
    files = rendered()
    paths = []
    for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml"):
        rules = yaml.safe_load(files[name])
        for rule in (r for g in rules["groups"] for r in g["rules"]):
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = f"{max(1, duration_seconds(rule[key]) // 60)}s"
        path = folder / name
        path.write_text(yaml.safe_dump(rules))
        paths.append(path)
    return paths


@contextmanager
def node_daemon(node: Node, folder: Path) -> Iterator[str]:
    log = folder / f"{node.name}.log"
    # SGLang servers log their finished requests (--log-requests), for the per-request panels.
    requests = "text" if node.engine == "sglang" else None
    baseline = SCENARIOS[node.scenario].baseline_flag()
    args = ["--log-file", str(log), "--from-beginning", "--target", node.name]
    args += ["--baseline-curve", baseline, "--expected-accept-length", "3.0"]
    port = free_port()
    with (
        live_simulation(node.scenario, log, engine=node.engine, log_requests=requests),
        run_daemon(args, port),
    ):
        yield f"127.0.0.1:{port}"


def collapse_alerts(central: RunningPrometheus) -> list[dict[str, Any]]:
    return [
        a
        for a in central.alerts()
        if a["labels"]["alertname"] == "SpecDecodeAcceptLengthCollapsed" and a["state"] == "firing"
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_tool("prometheus")
    folder = tmp_path_factory.mktemp("fleet")
    with ExitStack() as stack:
        started = entered_together(stack, [node_daemon(n, folder) for n in NODES])
        instances = {n.name: instance for n, instance in zip(NODES, started, strict=True)}
        central = stack.enter_context(
            running_prometheus(
                folder,
                [],
                rule_files=central_rules(folder),
                flags=["--web.enable-remote-write-receiver"],
            )
        )
        for cluster in ("east", "west"):
            targets = [instances[n.name] for n in NODES if n.cluster == cluster]
            stack.enter_context(
                running_agent(folder, targets, f"{central.url}/api/v1/write", {"cluster": cluster})
            )
        central.wait_for(lambda: collapse_alerts(central), timeout=PAGE_TIMEOUT)
        yield Fleet(central, instances)


def test_the_central_page_names_the_collapsed_nodes_cluster_and_instance(fleet: Fleet) -> None:
    (page,) = collapse_alerts(fleet.central)
    assert page["labels"]["cluster"] == COLLAPSED.cluster
    assert page["labels"]["instance"] == fleet.instances[COLLAPSED.name]
    assert page["labels"]["target"] == COLLAPSED.name
    assert f"in {COLLAPSED.cluster}" in page["annotations"]["description"]


def test_no_other_node_pages(fleet: Fleet) -> None:
    critical = [
        a["labels"]
        for a in fleet.central.alerts()
        if a["labels"].get("severity") == "critical" and a["state"] == "firing"
    ]
    assert {(c["cluster"], c.get("target")) for c in critical} == {
        (COLLAPSED.cluster, COLLAPSED.name)
    }


def fleet_records() -> list[str]:
    """The fleet's recording rules, from the groups the rendering writes: asked for when the
    file is collected, by every worker of every run, where the whole rendering (its YAML
    written and read back) cost each about 0.4 CPU-s."""
    return [
        r["record"] for g in recorded(CONFIG) for r in g["rules"] if r["record"].startswith("job:")
    ]


def clusters_in(result: list[dict[str, Any]]) -> set[str]:
    return {series["metric"].get("cluster", "") for series in result}


@pytest.mark.parametrize("record", fleet_records())
def test_fleet_recording_rules_aggregate_per_cluster(fleet: Fleet, record: str) -> None:
    result = fleet.central.wait_for(
        lambda: r if clusters_in(r := fleet.central.query(record)) == {"east", "west"} else None,
        timeout=30,
    )
    assert len(result) == 2, result  # one series per cluster (and job), not per node


# The fleet dashboard as the rendering writes it, without the rest of the rendering (collection).
FLEET_QUERIES = dashboard_queries(json.loads(render_dashboards(CONFIG)["specwatch-fleet.json"]))


@pytest.mark.parametrize("query", FLEET_QUERIES, ids=[q.where for q in FLEET_QUERIES])
def test_every_fleet_dashboard_query_returns_series_per_cluster(fleet: Fleet, query: Query) -> None:
    """Each series names its cluster; a panel repeated per cluster has data in each copy."""
    if query.repeat == "cluster":
        for cluster in ("east", "west"):
            expr = expand(query.expr, RATE_INTERVAL, {"cluster": cluster})
            assert fleet.central.wait_for(partial(fleet.central.query, expr), timeout=30)
        return
    expr = expand(query.expr, RATE_INTERVAL)
    result = fleet.central.wait_for(
        lambda: (r := fleet.central.query(expr)) and clusters_in(r) == {"east", "west"} and r,
        timeout=30,
    )
    assert result, expr


def documented_federation_matchers() -> list[str]:
    block = section(doc("deployment.md"), "## Cardinality").split("```yaml\n", 1)[1]
    job = yaml.safe_load(block.split("```", 1)[0])["scrape_configs"][0]
    matchers: list[str] = job["params"]["match[]"]
    return matchers


def test_the_documented_federation_match_takes_the_recording_rules_and_nothing_raw(
    fleet: Fleet,
) -> None:
    params = urllib.parse.urlencode([("match[]", m) for m in documented_federation_matchers()])
    with urllib.request.urlopen(f"{fleet.central.url}/federate?{params}", timeout=10) as answer:
        federated = Scrape(answer.read().decode())
    rules = yaml.safe_load(rendered()["prometheus_rules.yaml"])
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"]}
    with_data = {name for name in recorded if fleet.central.query(name)}
    assert with_data <= federated.names() <= recorded | {"specwatch_target_info"}
    assert len(federated.values("specwatch_target_info")) == len(NODES)
