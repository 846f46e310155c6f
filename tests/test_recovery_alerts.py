"""A resolved page opens no ticket: after SpecDecodeAcceptLengthCollapsed resolves, neither
SpecDecodeAcceptLengthLow nor SpecDecodeSlowerThanBaseline fires on the tail of its 5-minute
mean, which still holds the collapse. Proven live: the real daemon follows a log that
collapses and recovers (SGLang's lines, and vLLM's), a real Prometheus evaluates the shipped
rules (every ``for:`` shrunk from minutes to seconds, the averaging windows left real).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from typing import Any

import pytest
import yaml

from tests.support.daemon import entered_together, run_daemon
from tests.support.files import live_lines
from tests.support.loglines import decode_line, startup
from tests.support.realprom import RunningPrometheus, running_prometheus
from tests.support.tools import duration_seconds, fast_rules, free_port, require_tool

pytestmark = pytest.mark.e2e

LINE_EVERY = 0.5
BASELINE = "1:82,16:900,32:1210,48:1500"
# Rule evaluations (a second apart) the collapse lasts once it pages: long enough for the
# warnings' means to hold it well past their (shrunk) ``for:`` after the page resolves, so a
# warning unguarded would fire.
COLLAPSE_AFTER_PAGE = 25
# The accept-length tail is over for a node once its 2-minute mean, which the low warning
# requires to be under the floor as well, is back at the floor: from then on it cannot fire.
# The speed's tail lasts minutes longer; it is watched for as many evaluations as the slower
# warning's ``for:`` (shrunk) takes, and five more.
TAIL_OVER = "target:specwatch_accept_length:avg2m >= specwatch_accept_length_floor"
WARNINGS = {"SpecDecodeAcceptLengthLow", "SpecDecodeSlowerThanBaseline"}
PAGE = "SpecDecodeAcceptLengthCollapsed"


class Node:
    """A node whose drafter accepts nothing until ``recover()``, then accepts well again."""

    def __init__(self, line: Callable[[bool], list[str]]) -> None:
        self.healthy = False
        self._line = line

    def __call__(self) -> list[str]:
        return self._line(self.healthy)


def sglang(healthy: bool) -> list[str]:
    stamp = f"[{datetime.now().strftime('%Y-%m-%d %H:%M:%S')} TP0]"
    if healthy:
        return [decode_line(3.0, running=48, queue=0, tput=1900, stamp=stamp)]
    return [decode_line(1.0, running=48, queue=0, tput=700, stamp=stamp)]


VLLM_START = (
    "INFO 12-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.33.0) with config: "
    "model='/models/target', speculative_config=SpeculativeConfig(method='eagle3', "
    "model='/models/eagle3', num_spec_tokens=3), tokenizer='/models/target', "
    "enforce_eager=False, seed=None"
)


def vllm(healthy: bool) -> list[str]:
    """vLLM's engine line and its SpecDecoding line of one interval (its logging code's sums:
    400 drafts of 3 tokens; all accepted, or none)."""
    at = datetime.now().strftime("%m-%d %H:%M:%S")
    tput, accepted, rates = (
        (1400.0, 1200, "1.000, 1.000, 1.000")
        if healthy
        else (
            520.0,
            0,
            "0.000, 0.000, 0.000",
        )
    )
    return [
        f"INFO {at} [loggers.py:111] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
        f"generation throughput: {tput:.1f} tokens/s, Running: 32 reqs, Waiting: 0 reqs, GPU "
        "KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
        f"INFO {at} [metrics.py:82] SpecDecoding metrics: Mean acceptance length: "
        f"{1 + accepted / 400:.2f}, Accepted throughput: {accepted / 10:.2f} tokens/s, Drafted "
        f"throughput: 120.00 tokens/s, Accepted: {accepted} tokens, Drafted: 1200 tokens, "
        f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: "
        f"{accepted / 12:.1f}%",
    ]


NODES = {"sglang": (startup(), sglang), "vllm": ([VLLM_START], vllm)}


def firing(prom: RunningPrometheus, target: str) -> set[str]:
    query = f'ALERTS{{alertstate="firing",target="{target}"}}'
    return {series["metric"]["alertname"] for series in prom.query(query)}


def evaluations_to_fire(rules: dict[str, Any]) -> int:
    """Evaluations (one a second) the slowest of the ``WARNINGS`` needs to fire, and five."""
    durations = [
        duration_seconds(rule.get("for", "0s"))
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") in WARNINGS
    ]
    return max(durations) + 5


@pytest.fixture(scope="module")
def seen_after_recovery(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Both engines' nodes at once, behind one Prometheus: each collapses until both have
    paged, holds the collapse ``COLLAPSE_AFTER_PAGE`` evaluations longer, recovers, and is
    watched once both pages resolved until their accept-length tails are over and a warning
    has had its time to fire. The warnings seen firing, per engine."""
    require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("recovery")
    rules, shrunk = tmp / "rules.yaml", fast_rules()
    rules.write_text(yaml.safe_dump(shrunk))
    nodes: dict[str, Node] = {}
    with ExitStack() as stack:
        daemons, ports = [], [free_port() for _ in NODES]
        for (engine, (first, line)), port in zip(NODES.items(), ports, strict=True):
            nodes[engine] = Node(line)
            log = tmp / f"{engine}.log"
            log.write_text("".join(f"{text}\n" for text in first))
            args = ["--log-file", str(log), "--target", engine, "--baseline-curve", BASELINE]
            daemons.append(run_daemon(args, port))
        entered_together(stack, daemons)
        for engine, node in nodes.items():
            stack.enter_context(live_lines(tmp / f"{engine}.log", node, LINE_EVERY))
        instances = [f"127.0.0.1:{port}" for port in ports]
        prom = stack.enter_context(running_prometheus(tmp, instances, [rules]))
        prom.wait_for(lambda: all(PAGE in firing(prom, e) for e in NODES), timeout=90)
        paged = prom.rule_evaluations()
        prom.wait_for(lambda: prom.rule_evaluations() >= paged + COLLAPSE_AFTER_PAGE, 90)
        for node in nodes.values():
            node.healthy = True
        prom.wait_for(lambda: not any(PAGE in firing(prom, e) for e in NODES), timeout=90)
        seen: dict[str, set[str]] = {engine: set() for engine in NODES}
        enough = prom.rule_evaluations() + evaluations_to_fire(shrunk)

        def tail_over() -> bool:
            """Notes the warnings firing now; whether the watch is over."""
            for engine in NODES:
                seen[engine] |= firing(prom, engine) & WARNINGS
            over = {series["metric"]["target"] for series in prom.query(TAIL_OVER)}
            return over >= NODES.keys() and prom.rule_evaluations() >= enough

        prom.wait_for(tail_over, timeout=90)
        return seen


@pytest.mark.parametrize("engine", sorted(NODES))
def test_no_warning_fires_after_the_collapse_page_resolves(
    engine: str, seen_after_recovery: dict[str, set[str]]
) -> None:
    seen = seen_after_recovery[engine]
    assert seen == set(), f"{sorted(seen)} fired after {PAGE} resolved"
