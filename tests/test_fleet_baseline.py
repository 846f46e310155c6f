"""A fleet's baseline, run for real: plain peers teach the speed of a model on its hardware.

Five live ``specwatch run`` daemons, none with a configured baseline, each following a log
written as the server writes it, line by line: two SGLang servers of one model on one hardware
serving *without* speculation (82 tok/s at one running request), and three speculative ones at
one running request: a healthy one of the same model (1.6x), one whose drafter was trained for
the previous model version (52 tok/s, as in the incident that started the project), and one of
another model, which has no plain peer. A real Prometheus evaluates the shipped rules (their
windows and ``for:`` cut to seconds): SpecDecodeSlowerThanBaseline must fire for the incident
node alone, naming the fleet as its baseline's source, and the lonely node has no speedup.
The same runs through the two-tier set-up (agents forwarding by ``remote_write`` to a central
Prometheus that evaluates the multi-cluster rendering).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.mixin.render import render
from exporter.mixin_config import MixinConfig
from tests.support.daemon import entered_together, run_daemon
from tests.support.files import live_lines
from tests.support.realprom import RunningPrometheus, running_agent, running_prometheus
from tests.support.tools import duration_seconds, free_port, require_tool

pytestmark = pytest.mark.e2e

MODEL = "kimi-k2.5"
HARDWARE = "8xH200"
PAGE_TIMEOUT = 240.0  # a loaded 2-core machine starts five daemons and two Prometheus slowly


@dataclass(frozen=True)
class Node:
    name: str
    model: str
    tok_s: float
    accept: float | None  # None: served without speculation


NODES = (
    Node("plain-a", MODEL, 82.0, None),
    Node("plain-b", MODEL, 82.4, None),
    Node("healthy", MODEL, 131.5, 2.6),
    Node("slow", MODEL, 52.0, 1.1),
    Node("lonely", "other-model", 40.0, 1.2),
)


def _start_line(node: Node) -> str:
    algorithm = None if node.accept is None else "EAGLE3"
    draft = None if node.accept is None else "/models/drafts/eagle3"
    args = {
        "model_path": node.model,
        "tp_size": 1,
        "decode_log_interval": 40,
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": draft,
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    return f"[{_now()}] server_args={args!r}"


def _decode_line(node: Node) -> str:
    spec = ""
    if node.accept is not None:
        spec = f"accept len: {node.accept:.2f}, accept rate: {(node.accept - 1) / 3:.2f}, "
    return (
        f"[{_now()}] Decode batch, #running-req: 1, #token: 900, token usage: 0.01, {spec}"
        f"cuda graph: True, gen throughput (token/s): {node.tok_s:.2f}, #queue-req: 0"
    )


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


@contextmanager
def live_log(path: Path, node: Node) -> Iterator[None]:
    """The node's server writing its log: the start, then a decode line every 0.25 s."""
    path.write_text(_start_line(node) + "\n")
    with live_lines(path, lambda: [_decode_line(node)], every=0.25):
        yield


@contextmanager
def node_daemon(node: Node, folder: Path) -> Iterator[str]:
    log = folder / f"{node.name}.log"
    config = folder / f"{node.name}.yaml"
    target = {
        "name": node.name,
        "log_files": [str(log)],
        "served_model": node.model,
        "hardware": HARDWARE,
    }
    config.write_text(yaml.safe_dump({"from_beginning": True, "targets": [target]}))
    port = free_port()
    with live_log(log, node), run_daemon(["--config", str(config)], port):
        yield f"127.0.0.1:{port}"


def fast_rules(folder: Path, config: MixinConfig) -> list[Path]:
    """The rendering with its windows and ``for:`` cut so a fleet is learned in seconds: the
    hour of plain windows becomes 40 s, five minutes 20 s, ten minutes of ``for`` 10 s."""
    files = render(config)
    paths = []
    for name in ("prometheus_rules.yaml", "prometheus_alerts.yaml"):
        rules = yaml.safe_load(files[name])
        for rule in (r for g in rules["groups"] for r in g["rules"]):
            rule["expr"] = re.sub(r"\[1h\]", "[40s]", rule["expr"])
            rule["expr"] = re.sub(r"\[5m\]", "[20s]", rule["expr"])
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = f"{max(1, duration_seconds(rule[key]) // 60)}s"
        path = folder / name
        path.write_text(yaml.safe_dump(rules))
        paths.append(path)
    return paths


def slower_alerts(prometheus: RunningPrometheus) -> list[dict[str, Any]]:
    return [
        alert
        for alert in prometheus.alerts()
        if alert["labels"]["alertname"] == "SpecDecodeSlowerThanBaseline"
        and alert["state"] == "firing"
    ]


@contextmanager
def single_tier(stack: ExitStack, folder: Path, targets: list[str]) -> Iterator[RunningPrometheus]:
    rules = fast_rules(folder, MixinConfig())
    yield stack.enter_context(running_prometheus(folder, targets, rule_files=rules))


@contextmanager
def two_tier(stack: ExitStack, folder: Path, targets: list[str]) -> Iterator[RunningPrometheus]:
    """Plain peers in one cluster, the speculative nodes in another: the fleet crosses them."""
    rules = fast_rules(folder, MixinConfig(multi_cluster=True, cluster_label="cluster"))
    central = stack.enter_context(
        running_prometheus(
            folder, [], rule_files=rules, flags=["--web.enable-remote-write-receiver"]
        )
    )
    write = f"{central.url}/api/v1/write"
    for cluster, members in (("east", targets[:2]), ("west", targets[2:])):
        stack.enter_context(running_agent(folder, members, write, {"cluster": cluster}))
    yield central


TIERS = {"single": single_tier, "two-tier": two_tier}


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningPrometheus]]:
    """The nodes' daemons, scraped by both tiers at once (each learns the fleet in its own
    Prometheus): one set of daemons and one wait for the pages, not one of each per tier."""
    require_tool("prometheus")
    folder = tmp_path_factory.mktemp("fleet")
    with ExitStack() as stack:
        targets = entered_together(stack, [node_daemon(node, folder) for node in NODES])
        tiers = {}
        for name, tier in TIERS.items():
            (own := folder / name).mkdir()
            tiers[name] = stack.enter_context(tier(stack, own, targets))
        for prometheus in tiers.values():
            prometheus.wait_for(partial(slower_alerts, prometheus), timeout=PAGE_TIMEOUT)
        yield tiers


@pytest.fixture(params=sorted(TIERS))
def fleet(
    request: pytest.FixtureRequest, fleets: dict[str, RunningPrometheus]
) -> RunningPrometheus:
    return fleets[request.param]


def test_only_the_incident_node_is_slower_than_its_plain_peers(
    fleet: RunningPrometheus,
) -> None:
    (page,) = slower_alerts(fleet)
    assert page["labels"]["target"] == "slow"
    assert page["labels"]["source"] == "fleet"
    assert "baseline source: fleet" in page["annotations"]["description"]
    assert "0.63x" in page["annotations"]["description"]


def test_the_fleet_baseline_is_the_plain_peers_speed_by_model_hardware_and_band(
    fleet: RunningPrometheus,
) -> None:
    (baseline,) = fleet.query(
        "served_model_hardware_band:specwatch_plain_gen_throughput_tokens_per_second:mean1h"
    )
    labels = {k: v for k, v in baseline["metric"].items() if k != "__name__"}
    assert labels == {"served_model": MODEL, "hardware": HARDWARE, "band": "1"}
    assert float(baseline["value"][1]) == pytest.approx(82.2, rel=0.01)


def test_the_healthy_node_is_faster_and_the_lonely_one_has_no_baseline(
    fleet: RunningPrometheus,
) -> None:
    ratios = {
        sample["metric"]["target"]: (sample["metric"]["source"], float(sample["value"][1]))
        for sample in fleet.query("target:specwatch_speedup:avg5m")
    }
    assert set(ratios) == {"healthy", "slow"}
    assert ratios["healthy"][0] == "fleet"
    assert ratios["healthy"][1] == pytest.approx(131.5 / 82.2, rel=0.02)
    assert ratios["slow"][1] == pytest.approx(52 / 82.2, rel=0.02)
