"""Node states beyond the seed incidents, through the real daemon and a real Prometheus running
the shipped rules (every ``for:`` shrunk from minutes to seconds): each raises its alerts and
nothing else.

Every log is written here in the engine's own format; the ones that must look live are
appended by a thread with wall-clock stamps, as the server would write them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime

import pytest
import yaml

from tests.support.daemon import entered_together, run_daemon
from tests.support.files import live_lines
from tests.support.loglines import crashed, decode_line, startup
from tests.support.realprom import RunningPrometheus, running_prometheus
from tests.support.tools import fast_rules, free_port, require_tool

pytestmark = pytest.mark.e2e

LINE_EVERY = 0.5  # seconds between the live lines of one log
# Rule evaluations (one a second) before the firing sets are read: the probes' prefill rate
# passes 0.2/s after about 15 s, and a 10-minute `for:` is 10 s here.
UNINTENDED_WAIT = 40


def now_stamp(ranks: str) -> str:
    return f"[{datetime.now().strftime('%Y-%m-%d %H:%M:%S')} {ranks}]"


def one_rank_collapsed() -> list[str]:
    """Six DP-attention ranks logging their decode windows; rank 3's drafter accepts nothing."""
    return [
        decode_line(
            1.0 if rank == 3 else 2.4,
            running=8,
            queue=0,
            tput=400,
            stamp=now_stamp(f"DP{rank} TP{rank}"),
        )
        for rank in range(6)
    ]


V0_START = (
    "INFO 12-01 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: "
    "model='meta-llama/Meta-Llama-3-8B-Instruct', speculative_config=SpeculativeConfig("
    "draft_model='yuhuili/EAGLE-LLaMA3-Instruct-8B', num_spec_tokens=4), enforce_eager=False"
)


class V0Collapsed:
    """vLLM 0.6.3 whose draft model accepts nothing: its engine line and its Speculative
    metrics line of lifetime totals, the drafted tokens growing and the accepted ones not."""

    def __init__(self) -> None:
        self.drafted = 0

    def __call__(self) -> list[str]:
        self.drafted += 4 * 100
        at = datetime.now().strftime("%m-%d %H:%M:%S")
        return [
            f"INFO {at} metrics.py:351] Avg prompt throughput: 210.0 tokens/s, Avg generation "
            "throughput: 380.0 tokens/s, Running: 16 reqs, Swapped: 0 reqs, Pending: 0 reqs, "
            "GPU KV cache usage: 22.4%, CPU KV cache usage: 0.0%.",
            f"INFO {at} metrics.py:367] Speculative metrics: Draft acceptance rate: 0.000, "
            "System efficiency: 0.200, Number of speculative tokens: 4, Number of accepted "
            f"tokens: 0, Number of draft tokens: {self.drafted}, Number of emitted tokens: "
            f"{self.drafted // 4}.",
        ]


def health_probes() -> list[str]:
    """An idle SGLang node behind probes (kubelet's, a load balancer's): each /health writes a
    one-token prefill line, four every half second here, so that a rule counting prefill
    lines would see them as traffic (over 0.2/s in a 10-minute rate) within the test."""
    probe = (
        f"{now_stamp('TP0')} Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, "
        "cuda graph: False"
    )
    return [probe] * 4


# target -> (the whole log written before the daemon starts, the live line maker or None,
# the alerts that must fire, and only those)
Scenario = tuple[list[str], Callable[[], list[str]] | None, set[str]]
SCENARIOS: dict[str, Scenario] = {
    "crashed": (crashed(), None, {"SpecDecodeServerCrashed"}),
    "rank-collapsed": (startup(), one_rank_collapsed, {"SpecDecodeDpRankCollapsed"}),
    "idle-probes": (startup(), health_probes, set()),
    "vllm-v0-collapsed": (
        [V0_START],
        V0Collapsed(),
        {"SpecDecodeAcceptLengthCollapsed"},
    ),
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPrometheus]:
    """Every scenario's daemon behind one Prometheus; yields once every intended alert fires
    and every rule group has been evaluated five more times (time for an unintended one)."""
    require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("node-states")
    rules = tmp / "rules.yaml"
    rules.write_text(yaml.safe_dump(fast_rules()))
    with ExitStack() as stack:
        daemons, ports = [], [free_port() for _ in SCENARIOS]
        for (target, (lines, _, _)), port in zip(SCENARIOS.items(), ports, strict=True):
            log = tmp / f"{target}.log"
            log.write_text("".join(f"{line}\n" for line in lines))
            args = ["--log-file", str(log), "--from-beginning", "--target", target]
            daemons.append(run_daemon(args, port))
        entered_together(stack, daemons)
        for target, (_, live, _) in SCENARIOS.items():
            if live is not None:
                stack.enter_context(live_lines(tmp / f"{target}.log", live, LINE_EVERY))
        instances = [f"127.0.0.1:{port}" for port in ports]
        prom = stack.enter_context(running_prometheus(tmp, instances, [rules]))
        prom.wait_for(
            lambda: all(firing(prom, t) >= alerts for t, (_, _, alerts) in SCENARIOS.items()),
            timeout=90,
        )
        # Five more evaluations, and at least UNINTENDED_WAIT: an unintended alert has had its
        # time.
        fired_at = prom.rule_evaluations()
        enough = max(fired_at + 5, UNINTENDED_WAIT)
        prom.wait_for(lambda: prom.rule_evaluations() >= enough, timeout=60)
        yield prom


def firing(prometheus: RunningPrometheus, target: str) -> set[str]:
    query = f'ALERTS{{alertstate="firing",target="{target}"}}'
    return {series["metric"]["alertname"] for series in prometheus.query(query)}


@pytest.mark.parametrize("target", SCENARIOS)
def test_each_node_state_raises_its_alerts_and_only_those(
    prometheus: RunningPrometheus, target: str
) -> None:
    assert firing(prometheus, target) == SCENARIOS[target][2]


def test_the_collapsed_rank_is_named_by_its_alert_and_the_daemons_finding(
    prometheus: RunningPrometheus,
) -> None:
    alert = 'ALERTS{alertstate="firing",target="rank-collapsed"}'
    assert {s["metric"]["dp_rank"] for s in prometheus.query(alert)} == {"3"}
    finding = 'specwatch_finding{target="rank-collapsed"}'
    assert {s["metric"]["code"] for s in prometheus.query(finding)} == {"dp_rank_collapsed"}


def test_the_crash_is_exported_with_when_specwatch_read_it(prometheus: RunningPrometheus) -> None:
    [ended] = prometheus.query('specwatch_server_ended_timestamp_seconds{target="crashed"}')
    assert 0 <= time.time() - float(ended["value"][1]) < 300
    finding = 'specwatch_finding{target="crashed"}'
    assert {s["metric"]["code"] for s in prometheus.query(finding)} == {"server_crashed"}
    assert (
        prometheus.query('specwatch_server_ended_timestamp_seconds{target="rank-collapsed"}') == []
    )
