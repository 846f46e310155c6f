"""Poison log lines against a real daemon: each costs only itself, counted, and every valid
line around it is read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.daemon import run_daemon
from tests.support.files import append
from tests.support.loglines import decode_line, startup
from tests.support.proc import rss_mib

pytestmark = pytest.mark.e2e

TARGET = {"target": "default"}
DIGITS = "9" * 5000  # more than int() accepts (4,300)


def poison_lines() -> list[str]:
    good = decode_line(2.5)
    return [
        good.replace(" TP0]", f" DP{DIGITS} TP0]"),  # a rank no int() can read
        good.replace("Decode batch,", f"Decode batch [{DIGITS}],"),
        good.replace("accept len: 2.50", "accept len: nan"),
        good.replace("accept len: 2.50", "accept len: -2.50"),  # was taken as a window
        good.replace("gen throughput (token/s): 600.00", "gen throughput (token/s): inf"),
        good.replace("#running-req: 48", f"#running-req: {DIGITS}"),
    ]


def test_poison_stats_lines_cost_only_themselves(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    poison = poison_lines()
    append(log, *[decode_line(2.5)] * 10, *poison, *[decode_line(2.5)] * 1000)
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as daemon:
        labels = {**TARGET, "kind": "decode"}
        daemon.wait_metric("specwatch_log_stats_lines_total", lambda v: v == 1010, **labels)
        scrape = daemon.wait_metric(
            "specwatch_log_unrecognized_stats_lines_total", lambda v: v == 5, **TARGET
        )
        assert scrape.value("specwatch_log_lines_total", **TARGET) == 10 + len(poison) + 1000
        # The rank line has no SGLang prefix at all; the other five are stats lines gone wrong.
        windows_sum = scrape.value("specwatch_accept_length_windows_sum", **TARGET)
        assert windows_sum is not None and math.isfinite(windows_sum)
        assert windows_sum == pytest.approx(2.5 * 1010)


@pytest.mark.parametrize("name", ["d" * 300, "d/" * 3000], ids=["component", "path"])
def test_a_server_args_line_naming_an_impossible_draft_path_costs_nothing(
    tmp_path: Path, port: int, name: str
) -> None:
    """Its draft lookup raised ENAMETOOLONG, which took the 1,000 lines read with it."""
    log = tmp_path / "server.log"
    lines = startup(draft_path=f"{tmp_path}/{name}")
    append(log, *lines, *[decode_line(2.5)] * 1000)
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as daemon:
        labels = {**TARGET, "kind": "decode"}
        scrape = daemon.wait_metric(
            "specwatch_log_stats_lines_total", lambda v: v == 1000, **labels
        )
        assert scrape.value("specwatch_log_lines_total", **TARGET) == len(lines) + 1000
        assert scrape.value("specwatch_log_read_errors_total", **TARGET) == 0
        reason = "name_too_long"
        assert scrape.value("specwatch_draft_config_errors_total", reason=reason) == 1
        assert scrape.value("specwatch_speculative_info", **TARGET, algorithm="EAGLE3") == 1


def docker(text: str) -> str:
    return json.dumps({"log": text + "\n", "stream": "stderr", "time": "2026-02-23T00:14:33Z"})


def test_a_deeply_nested_docker_record_costs_only_itself(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    nested = '{"log":' + "[" * 100_000 + "]" * 100_000 + "}"
    good = docker(decode_line(2.5))
    append(log, *[good] * 10, nested, *[good] * 1000)
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as daemon:
        labels = {**TARGET, "kind": "decode"}
        daemon.wait_metric("specwatch_log_stats_lines_total", lambda v: v == 1010, **labels)
        daemon.wait_metric("specwatch_log_lines_total", lambda v: v == 1011, **TARGET)


def test_dp_ranks_beyond_the_limit_are_counted(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    append(log, *(decode_line(2.5, ranks=f" DP{rank} TP{rank}") for rank in range(70)))
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as daemon:
        skipped = {**TARGET, "reason": "too_many_ranks"}
        daemon.wait_metric("specwatch_log_skipped_lines_total", lambda v: v == 38, **skipped)
        scrape = daemon.scrape()
        assert len(scrape.values("specwatch_accept_length", **TARGET)) == 32  # max_dp_ranks
        assert scrape.value("specwatch_folded_dp_ranks", **TARGET) == 38


def load_weight_lines(ranks: range) -> list[str]:
    return [
        f"[2026-02-23 00:14:33 DP{rank} TP{rank % 8}] Load weight end. elapsed=1.02 s, "
        "type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.12 GB, mem usage=15.02 GB."
        for rank in ranks
    ]


def test_startup_events_from_countless_ranks_do_not_grow_memory(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as daemon:
        append(log, *load_weight_lines(range(2000)))
        daemon.wait_metric("specwatch_log_lines_total", lambda v: v == 2000, **TARGET)
        before = rss_mib(daemon.proc.pid)
        append(log, *load_weight_lines(range(2000, 200_000)))
        # 198,000 lines: seconds on a quiet machine, past a minute when the tests' load leaves
        # the daemon an eighth of a core; the wait ends when they are read.
        daemon.wait_metric("specwatch_log_lines_total", lambda v: v == 200_000, 300, **TARGET)
        assert rss_mib(daemon.proc.pid) - before < 12
