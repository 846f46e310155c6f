"""One DP rank collapsed or low among healthy ones is named, rank by rank, in ``doctor`` and
``report`` (text, JSON, HTML), and by the daemon's evidence.

With DP attention SGLang prefixes each rank's lines with its ``DPn TPn`` ranks; each logs its
own ``Decode batch`` line (``decode_line`` writes SGLang's format).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.analysis.findings import evaluate
from exporter.cli import main
from exporter.engines.record import StatsRecord
from exporter.engines.server_config import ServerConfig
from exporter.state.evidence import Evidence
from tests.support.files import write_log
from tests.support.loglines import VLLM_START, decode_line, stamp, startup


def dp_log(accepts: dict[int, float], moments: int = 12) -> list[str]:
    """A DP-attention node: every rank logs a window each moment, at its own accept length."""
    lines = startup()
    for moment in range(moments):
        lines += [
            decode_line(
                accept, running=8, queue=0, tput=400, stamp=stamp(260 + 4 * moment, f"DP{r} TP{r}")
            )
            for r, accept in accepts.items()
        ]
    return lines


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


ONE_COLLAPSED = {0: 2.4, 1: 2.4, 2: 2.4, 3: 1.0, 4: 2.4, 5: 2.4}


def test_doctor_names_the_collapsed_rank_and_exits_critical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, dp_log(ONE_COLLAPSED))
    code, out = run(capsys, "doctor", "--log-file", log)
    assert code == 3
    assert "CRITICAL  dp_rank_collapsed: DP rank 3 collapsed: no draft token accepted" in out
    assert "DP rank 3: accept length 1.00 over 12 windows" in out
    assert "judged: DP rank 3 collapsed" in out  # the headline says it first


def test_report_lists_every_rank_in_text_json_and_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, dp_log(ONE_COLLAPSED))
    code, out = run(capsys, "report", log)
    assert code == 0
    assert out.startswith("DP rank 3 collapsed: no draft token accepted. ")
    assert "  DP rank   3: 1.00 over 12 windows  collapsed" in out
    assert "  DP rank   0: 2.40 over 12 windows\n" in out
    code, out = run(capsys, "report", log, "--json")
    data = json.loads(out)
    ranks = data["runs"][-1]["dp_ranks"]
    assert [(r["dp_rank"], round(r["accept_length"], 6)) for r in ranks] == sorted(
        ONE_COLLAPSED.items()
    )
    assert {r["windows"] for r in ranks} == {12}
    assert [f["code"] for f in data["findings"] if f["severity"] == "critical"] == [
        "dp_rank_collapsed"
    ]
    page = tmp_path / "report.html"
    assert main(["report", log, "--html", str(page)]) == 0
    html = page.read_text()
    assert "DP rank   3: 1.00 over 12 windows  collapsed" in html
    assert '<img alt="Accept length by DP rank"' in html
    assert "white-space: pre-wrap" in html  # the summary wraps instead of being clipped


def vllm_dp_log(collapsed: int, engines: int = 4, intervals: int = 12) -> list[str]:
    """vLLM with data parallelism: its API server logs each engine's interval as an ``Engine
    00N:`` line and that engine's own SpecDecoding line (``PerEngineStatLoggerAdapter``)."""
    lines = [VLLM_START]
    for interval in range(intervals):
        at = f"12-01 11:{1 + interval // 6:02d}:{interval % 6 * 10:02d}"
        for engine in range(engines):
            accepted = 0 if engine == collapsed else 1600
            lines += [
                f"(APIServer pid=401) INFO {at} [loggers.py:257] Engine {engine:03d}: Avg prompt "
                "throughput: 812.4 tokens/s, Avg generation throughput: 400.0 tokens/s, Running: "
                "16 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
                f"(APIServer pid=401) INFO {at} [metrics.py:120] SpecDecoding metrics: Mean "
                f"acceptance length: {1 + accepted / 1000:.2f}, Accepted throughput: "
                f"{accepted / 10:.2f} tokens/s, Drafted throughput: 300.00 tokens/s, Accepted: "
                f"{accepted} tokens, Drafted: 3000 tokens, Per-position acceptance rate: "
                f"{accepted / 2000:.3f}, {accepted / 3000:.3f}, {accepted / 6000:.3f}, Avg Draft "
                f"acceptance rate: {accepted / 30:.1f}%",
            ]
    return lines


def test_a_vllm_engines_fix_points_at_that_engines_own_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM names a DP rank's lines 'Engine 002:' and its process 'EngineCore_DP2', never
    SGLang's '[DP2 ...]' prefix."""
    log = write_log(tmp_path, vllm_dp_log(collapsed=2))
    code, out = run(capsys, "doctor", "--log-file", log, "--json")
    assert code == 3
    [finding] = [f for f in json.loads(out)["findings"] if f["code"] == "dp_rank_collapsed"]
    assert finding["summary"] == "DP rank 2 collapsed: no draft token accepted"
    assert "Engine 002:" in finding["fix"]
    assert "(EngineCore_DP2 pid=...)" in finding["fix"]
    assert "[DP2" not in finding["fix"]


def test_a_rank_far_below_the_others_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, dp_log({0: 3.1, 1: 3.0, 2: 1.6, 3: 3.2}))
    code, out = run(capsys, "doctor", "--log-file", log, "--json")
    assert code == 1
    finding = json.loads(out)["findings"][0]
    assert finding["code"] == "dp_rank_accept_length_low"
    assert finding["summary"] == "DP rank 2 accepts far less than the other ranks"


def test_ranks_that_differ_a_little_are_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, dp_log({0: 3.1, 1: 2.7, 2: 2.9, 3: 3.2}))
    code, out = run(capsys, "doctor", "--log-file", log, "--json")
    assert code == 0
    assert json.loads(out)["findings"] == []


def test_the_daemons_evidence_judges_each_ranks_recent_windows() -> None:
    """A rank that recovered is no longer named: the daemon judges each rank's newest windows."""
    evidence = Evidence(started_at=0.0)

    def moment(at: float, rank3: float) -> None:
        records = [
            StatsRecord("decode", dp_rank=r, accept_length=rank3 if r == 3 else 2.4)
            for r in range(6)
        ]
        evidence.add_records(records, at)

    for second in range(10):
        moment(second, 1.0)
    codes = {f.code for f in evaluate(evidence.observations(ServerConfig(), 10.0))}
    assert "dp_rank_collapsed" in codes
    for second in range(10, 20):
        moment(second, 2.3)
    codes = {f.code for f in evaluate(evidence.observations(ServerConfig(), 20.0))}
    assert not codes & {"dp_rank_collapsed", "dp_rank_accept_length_low"}
