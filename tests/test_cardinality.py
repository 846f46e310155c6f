"""Series per target, measured from real daemons, against the budget the documentation states.

A platform team sizes Prometheus by the Cardinality section of docs/deployment.md and the
``sampleLimit`` of the shipped PodMonitor and ServiceMonitor. Each profile here (a healthy
SGLang node, one with findings active, a vLLM node, SGLang with 1 to 64 DP ranks) runs a real
``specwatch run`` over a log and counts what its ``/metrics`` carries.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from exporter.analysis.findings import SEVERITIES
from exporter.simulate.scenarios import SCENARIOS
from tests.support.daemon import run_daemon, simulated_log
from tests.support.docs import doc, section
from tests.support.loglines import decode_line, stamp, startup
from tests.support.metrics import Scrape
from tests.support.requests import finish_line
from tests.support.tools import REPO, free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

CARDINALITY = section(doc("deployment.md"), "## Cardinality")
BUDGET = re.search(
    r"at most (\d+) series per target.*?plus (\d+) per further DP rank.*?plus (\d+) per active "
    r"finding.*?per-request histogram when requests are logged \((\d+), and",
    CARDINALITY,
    re.S,
)
MONITORS = [
    REPO / "deploy" / "kubernetes" / "overlays" / "sidecar" / "servicemonitor.yaml",
    REPO / "deploy" / "kubernetes" / "overlays" / "daemonset" / "podmonitor.yaml",
]
MAX_DP_RANKS = 32  # the default


def budget() -> tuple[int, int, int, int]:
    """Series per target, per further DP rank, per finding, and of the per-request histogram."""
    assert BUDGET is not None, "the Cardinality section no longer states the budget"
    base, per_rank, per_finding, requests = (int(n) for n in BUDGET.groups())
    return base, per_rank, per_finding, requests


def measured(log: Path, *flags: str) -> tuple[int, int, int]:
    """Series with a ``target`` label, active findings, and every series of one scrape, once
    the daemon has read the whole log."""
    lines = sum(1 for _ in log.open(encoding="utf-8"))
    args = ["--log-file", str(log), "--from-beginning", "--stale-after", "1e9", *flags]
    with run_daemon(args, free_port()) as daemon:

        def read_through() -> Scrape | None:
            scrape = daemon.scrape()
            return scrape if (scrape.value("specwatch_log_lines_total") or 0) >= lines else None

        scrape = wait_for(read_through, timeout=30)
    per_target = [s for s in scrape.samples if "target" in s.labels]
    findings = [s for s in per_target if s.name == "specwatch_finding"]
    return len(per_target), len(findings), len(scrape.samples)


def dp_log(folder: Path, ranks: int) -> Path:
    """A DP-attention SGLang log: the startup lines, then four decode lines per DP rank and a
    finished request (``--log-requests``) each second."""
    lines = startup()
    for second in range(4):
        lines += [
            decode_line(3.0, rate=0.67, tput=900.0, stamp=stamp(60 + second, f"DP{r} TP{r} EP{r}"))
            for r in range(ranks)
        ]
        lines.append(finish_line(2.4, time_text=stamp(60 + second)[1:-1]))
    log = folder / f"dp{ranks}.log"
    log.write_text("\n".join(lines) + "\n")
    return log


@pytest.mark.parametrize(
    ("scenario", "engine"), [("healthy", "sglang"), ("undertrained", "sglang"), ("healthy", "vllm")]
)
def test_one_target_stays_within_the_budget(scenario: str, engine: str, tmp_path: Path) -> None:
    base, _, per_finding, _ = budget()
    log = simulated_log(tmp_path, scenario, engine)
    baseline = SCENARIOS[scenario].baseline_flag()
    series, findings, _ = measured(log, "--baseline-curve", baseline)
    assert series <= base + per_finding * findings, (series, findings)
    assert findings == (3 if scenario == "undertrained" else 0)


def test_dp_ranks_add_their_budget_until_max_dp_ranks(tmp_path: Path) -> None:
    base, per_rank, per_finding, requests = budget()
    counts = {ranks: measured(dp_log(tmp_path, ranks)) for ranks in (1, 8, MAX_DP_RANKS, 64)}
    one, findings, _ = counts[1]
    assert one <= base + per_finding * findings + requests
    for ranks in (8, MAX_DP_RANKS):
        assert counts[ranks][0] - one <= per_rank * (ranks - 1), counts
        assert counts[ranks][0] > one  # each rank keeps its own windows
    assert counts[64][0] <= counts[MAX_DP_RANKS][0] + 1, counts  # folded: in the totals only


def test_sample_limit_holds_a_full_target_and_no_runaway(tmp_path: Path) -> None:
    """A target at ``max_dp_ranks`` with every finding active fits; ten such do not."""
    base, per_rank, per_finding, requests = budget()
    per_target, _, whole = measured(dp_log(tmp_path, 1))
    process = whole - per_target  # the process's own series
    findings = per_finding * len(SEVERITIES)
    worst = base + per_rank * (MAX_DP_RANKS - 1) + findings + requests + process
    for path in MONITORS:
        limit = yaml.safe_load(path.read_text())["spec"]["sampleLimit"]
        assert worst <= limit < 10 * worst, (path.name, worst, limit)
        assert str(limit) in CARDINALITY
