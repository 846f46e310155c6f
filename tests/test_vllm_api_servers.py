"""vLLM with more than one API server (``--api-server-count N``, and its default under data
parallelism: one per DP rank).

Each API server's ``StatLoggerManager`` (``v1/metrics/loggers.py``) is told the client count
and, above one, adds no logging stat logger: it warns once per server and no engine line nor
``SpecDecoding metrics:`` line is ever written, since each engine hands its stats to one API
server a step and any one server's would be incomplete. ``/metrics`` stays whole: the servers
share a Prometheus multiprocess directory (``setup_multiprocess_prometheus``), and the
counters every server increments are summed across them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.analysis.findings import evaluate
from exporter.analysis.findings.shapes import Observations
from exporter.engines.record import LogLine
from exporter.engines.server_config import ServerConfig
from exporter.engines.vllm import VllmParser
from exporter.state.runs import RunTracker
from tests.support.daemon import doctor
from tests.support.loglines import VLLM_START

# v1/metrics/loggers.py, logged by each API server (process ApiServer_<i>) at WARNING.
STATS_OFF = (
    "AsyncLLM created with api_server_count more than 1; disabling stats logging to avoid "
    "incomplete stats."
)


def warning(server: int) -> str:
    return f"(ApiServer_{server} pid={430 + server}) WARNING 12-01 11:00:40 [loggers.py:1387] " + (
        STATS_OFF
    )


LOG = [
    "(APIServer pid=400) INFO 12-01 10:59:58 [utils.py:287] non-default args: {'model': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'api_server_count': 2, 'speculative_config': "
    "{'method': 'eagle3', 'model': 'yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', "
    "'num_speculative_tokens': 3}}",
    VLLM_START,
    warning(0),
    warning(1),
    '(ApiServer_0 pid=430) INFO:     10.0.0.5:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
]


def tracked(lines: list[str]) -> ServerConfig:
    tracker = RunTracker()
    parser = VllmParser()
    for line in lines:
        for result in parser.feed(line):
            if isinstance(result, LogLine):
                tracker.observe(result)
    return tracker.config


def stats_finding(**seen: object) -> list[str]:
    obs = Observations(config=tracked(LOG), log_watched=True, **seen)  # type: ignore[arg-type]
    return [f.fix for f in evaluate(obs) if f.code == "decode_stats_not_logged"]


def test_the_warning_is_read_as_the_engine_logging_no_stats() -> None:
    assert tracked(LOG).stats_not_logged == STATS_OFF
    assert tracked(LOG[:2]).stats_not_logged is None


def test_a_restart_with_one_api_server_forgets_it() -> None:
    assert tracked([*LOG, VLLM_START]).stats_not_logged is None


def test_watching_its_log_alone_is_told_to_scrape_metrics() -> None:
    [fix] = stats_finding()
    assert "/metrics" in fix and "--api-server-count 1" in fix


def test_with_metrics_read_its_missing_stats_lines_are_no_problem() -> None:
    """Requests flowing (running requests upstream) for minutes with no stats line would
    otherwise page for a node that is fine: /metrics carries every engine's counters."""
    assert (
        stats_finding(metrics_endpoint="ok", upstream_busy=True, seconds_without_decode=600) == []
    )
    assert stats_finding(metrics_endpoint="down") != []


@pytest.mark.e2e
def test_doctor_on_its_log_says_to_judge_it_by_metrics(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(LOG) + "\n")
    out = doctor("--log-file", str(log)).stdout
    assert "no stats lines at all" not in out
    assert "more than one API server" in out
    assert "doctor --url" in out
