"""Adaptive speculation: the draft steps in force are state, and drafting off is its own state.

Logs are written from SGLang 0.5.23's adaptive lines (``tests/support/speclogs.py``) and fed
through the daemon's own pipeline (``LogFeed``) or ``doctor``.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config import BaselineConfig, TargetConfig
from exporter.engines.events import AdaptiveSteps
from exporter.engines.record import LogLine
from exporter.engines.server_config import ServerConfig
from exporter.engines.sglang import classify
from exporter.engines.sglang_startup import parse_event
from exporter.exposition.landing import landing_page
from exporter.state.feed import LogFeed
from exporter.state.target_state import TargetState
from exporter.target import Target
from tests.support.daemon import doctor, specwatch_cmd
from tests.support.fake_sglang import Route, fake_sglang, server_info
from tests.support.metrics import Clock, Scrape, render
from tests.support.speclogs import (
    adaptive_initialized,
    adaptive_start,
    adaptive_updated,
    decode,
    given_up_adaptive,
    healthy_adaptive,
    runtime_switched,
    server_args,
)

BASELINE = ("--baseline-curve", "1:82,48:1500,128:2370")


def _message(line: str) -> str:
    parsed = classify(line)
    assert isinstance(parsed, LogLine)
    return parsed.message


def test_the_three_adaptive_lines_give_the_steps_in_force() -> None:
    assert parse_event(_message(adaptive_initialized(3, [1, 3, 5, 7], 1))) == AdaptiveSteps(
        3, (1, 3, 5, 7)
    )
    assert parse_event(_message(adaptive_updated(3, 0, 0.61, 1))) == AdaptiveSteps(
        0, ema_accept=0.61
    )
    assert parse_event(_message(runtime_switched(0, 5, 1))) == AdaptiveSteps(5)


def _scrape(lines: list[str]) -> tuple[Scrape, Target]:
    """The lines through the daemon's pipeline into a target's state, then one scrape."""
    target = Target(TargetConfig(name="node"), TargetState("node"), None)
    feed = LogFeed(target.state, engine="sglang")
    feed.on_lines([line.encode() for line in lines])
    clock = Clock()
    clock.now = time.time()
    return render([target], clock), target


def test_drafting_off_windows_carry_no_accept_length_and_are_counted() -> None:
    scrape, _ = _scrape(healthy_adaptive(windows_off=20))
    assert scrape.value("specwatch_accept_length", target="node") is None
    assert scrape.value("specwatch_accept_ratio", target="node") is None
    assert scrape.value("specwatch_speculative_steps", target="node") == 0
    assert scrape.value("specwatch_speculative_draft_tokens", target="node") == 1
    assert scrape.value("specwatch_drafting_off_windows_total", target="node") == 20
    assert scrape.value("specwatch_adaptive_step_changes_total", target="node") == 1
    assert scrape.value("specwatch_drafting_off_ratio", target="node") == 1.0
    # The six windows with drafting on are the only ones in the accept-length histogram.
    assert scrape.value("specwatch_accept_length_windows_count", target="node") == 6
    # Drafting off nearly always: no floor, so neither accept-length alert can fire.
    assert scrape.value("specwatch_accept_length_floor", target="node") is None
    assert scrape.value("specwatch_finding", target="node") is None


def test_accept_ratio_divides_by_the_steps_adaptive_has_in_force() -> None:
    """Five steps: six verified positions; SGLang's own rate still divides by the start's 3."""
    lines = [*adaptive_start(), runtime_switched(3, 5, 90), decode(100, 4.0, running=2, tput=200)]
    scrape, _ = _scrape(lines)
    assert scrape.value("specwatch_accept_ratio", target="node") == pytest.approx(3.0 / 5)
    assert scrape.value("specwatch_speculative_steps", target="node") == 5
    assert scrape.value("specwatch_accept_length_floor", target="node") == 1.8


def test_a_restart_with_more_draft_tokens_never_divides_the_old_window_by_the_new_count() -> None:
    """4 draft tokens at accept length 3.0 (0.67 of drafts accepted), then a restart with 8:
    until the new run logs, the old window keeps its own 0.67; from the first new window the
    new count divides."""
    first = [server_args("EAGLE3", draft_path="/models/d", draft_tokens=4), decode(60, 3.0)]
    scrape, target = _scrape(first)
    assert scrape.value("specwatch_accept_ratio", target="node") == pytest.approx(2 / 3)
    feed = LogFeed(target.state, engine="sglang")
    restart = server_args("EAGLE3", draft_path="/models/d", steps=7, draft_tokens=8, at=100)
    feed.on_lines([restart.encode()])
    clock = Clock()
    clock.now = time.time()
    assert render([target], clock).value("specwatch_accept_ratio") == pytest.approx(2 / 3)
    feed.on_lines([decode(200, 5.2, draft_tokens=8).encode()])
    assert render([target], clock).value("specwatch_accept_ratio") == pytest.approx(4.2 / 7)


@pytest.mark.e2e
def test_doctor_calls_a_healthy_adaptive_node_off_not_collapsed(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(healthy_adaptive()) + "\n")
    result = doctor("--log-file", str(log), *BASELINE)
    assert result.returncode == 0, result.stdout
    assert "speculation off (adaptive) in 20 of 26 decode windows" in result.stdout
    assert "collapsed" not in result.stdout.lower()


@pytest.mark.e2e
def test_the_off_note_continues_a_headline_that_ends_a_sentence(tmp_path: Path) -> None:
    """Without a baseline the speed headline is a sentence of its own; the adaptive note goes
    on from it, not after a stray full stop ('... --baseline-bench).; speculation off')."""
    log = tmp_path / "server.log"
    log.write_text("\n".join(healthy_adaptive()) + "\n")
    result = doctor("--log-file", str(log))
    assert result.returncode == 0, result.stdout
    assert "--baseline-bench); speculation off (adaptive) in 20 of 26" in result.stdout
    assert ".;" not in result.stdout


@pytest.mark.e2e
def test_doctor_warns_of_a_drafter_adaptive_has_given_up_on(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(given_up_adaptive()) + "\n")
    result = doctor("--log-file", str(log), *BASELINE, "--json")
    assert result.returncode == 1, result.stdout
    report = json.loads(result.stdout)
    assert report["verdicts"] == []
    [finding] = report["findings"]
    assert finding["code"] == "adaptive_drafter_given_up"
    assert finding["severity"] == "warning"
    assert "ema_accept_len=0.02" in finding["seen"]


def test_given_up_drafter_is_a_finding_in_the_daemon_too() -> None:
    scrape, _ = _scrape(given_up_adaptive())
    assert scrape.value(
        "specwatch_finding", target="node", code="adaptive_drafter_given_up", severity="warning"
    )
    assert scrape.value("specwatch_accept_length_floor", target="node") is None


def test_dspark_cap_and_block_accept_lengths_are_exported_and_npu_graphs_count_as_graphs() -> None:
    """SGLang 0.5.23's DSPARK decode line on an NPU: ``cap len``, ``block accept len`` and the
    ``npu graph`` label."""
    lines = [
        server_args("DSPARK", draft_path="/models/dspark"),
        decode(60, 3.4, graph="npu graph", cap=4.6, block=3.9),
    ]
    scrape, _ = _scrape(lines)
    assert scrape.value("specwatch_cap_length", target="node") == 4.6
    assert scrape.value("specwatch_block_accept_length", target="node") == 3.9
    assert scrape.value("specwatch_cuda_graph", target="node") == 1
    assert scrape.value("specwatch_accept_length", target="node") == 3.4


def test_lines_without_the_dspark_fields_export_neither() -> None:
    scrape, _ = _scrape([server_args("EAGLE3", draft_path="/models/d"), decode(60, 3.0)])
    assert scrape.value("specwatch_cap_length", target="node") is None
    assert scrape.value("specwatch_block_accept_length", target="node") is None


def test_landing_page_says_speculation_is_off_not_collapsed() -> None:
    _, target = _scrape(healthy_adaptive())
    page = landing_page([target], 60.0, time.time).decode()
    assert "speculation off (adaptive): plain decoding at this load" in page
    assert "accept length 1.00" not in page  # plain decoding's 1.00 is no accept length
    _, target = _scrape([*adaptive_start(), decode(100, 3.1, running=4, tput=320.0)])
    assert "adaptive speculation drafting 3 steps" in landing_page([target], 60.0).decode()


@pytest.mark.parametrize("batch", [8, 200])
def test_a_switch_amid_a_long_batch_stamps_only_the_windows_after_it(batch: int) -> None:
    """A catching-up daemon reads long batches whole (the chunk reader): a switch line among
    them must still split the windows before it from those after it."""
    before = [decode(100 + i, 3.1, running=4, tput=320.0) for i in range(batch // 2)]
    after = [decode(500 + i, 1.0, running=96, tput=2040.0) for i in range(batch // 2)]
    lines = [*adaptive_start(), *before, runtime_switched(3, 0, 400), *after]
    scrape, _ = _scrape(lines)
    assert scrape.value("specwatch_drafting_off_windows_total", target="node") == batch // 2
    assert scrape.value("specwatch_accept_length_windows_count", target="node") == batch // 2


@pytest.mark.e2e
def test_report_names_adaptive_speculation_and_the_steps_it_ended_with(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(healthy_adaptive()) + "\n")
    result = subprocess.run(
        specwatch_cmd("report", str(log)), capture_output=True, text=True, timeout=60, check=False
    )
    assert "adaptive speculation, 0 steps at the end of the log (drafting off)" in result.stdout
    assert "speculation off (adaptive) in 20 of 26 decode windows" in result.stdout


def test_a_tree_keeps_its_draft_tokens_when_metrics_tell_only_its_steps() -> None:
    """``sglang:spec_num_steps`` of a fixed tree (5 steps, top-k 4, 16 tokens) is no chain."""
    tree = ServerConfig(num_steps=5, eagle_topk=4, num_draft_tokens=16, active_steps=5)
    assert tree.draft_tokens_now == 16
    off = ServerConfig(num_steps=3, num_draft_tokens=4, adaptive=True, active_steps=0)
    assert (off.steps_now, off.draft_tokens_now) == (0, 1)


def test_adaptive_speculation_gets_no_single_draft_token_count() -> None:
    """Adaptive runs no one count: with 7 steps (8 draft tokens) at start and little accepted,
    the advice is the schedule by load (doctor, report), not draft_tokens_excessive."""
    lines = [
        server_args("EAGLE3", draft_path="/models/d", steps=7, draft_tokens=8, adaptive=True),
        adaptive_initialized(7, [1, 3, 5, 7], 40),
    ]
    lines += [decode(100 + 5 * i, 2.2, draft_tokens=8, running=2, tput=150.0) for i in range(6)]
    scrape, _ = _scrape(lines)
    assert scrape.values("specwatch_finding", target="node") == []


def _sglang_metrics_drafting_off() -> bytes:
    """SGLang 0.5.23's gauges at 96 running on both ranks, adaptive with drafting off: every
    round yields one token (``spec_accept_length`` 1.00) and the setup gauges read 0 steps and
    1 verified position."""
    lines = []
    gauges = [
        ("num_running_reqs", "The number of running requests.", "96"),
        ("num_queue_reqs", "The number of requests in the waiting queue.", "0"),
        ("gen_throughput", "The generation throughput (token/s).", "1000"),
        ("spec_accept_length", "The average acceptance length.", "1.0"),
        ("spec_num_steps", "Currently active speculative_num_steps.", "0"),
        ("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens.", "1"),
    ]
    for name, doc, value in gauges:
        lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge"]
        lines += [f'sglang:{name}{{dp_rank="{r}",model_name="kimi"}} {value}' for r in (0, 1)]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.e2e
def test_doctor_url_on_adaptive_with_drafting_off_judges_speed_not_a_collapse() -> None:
    """The node the daemon does not page: doctor --url on its /metrics exits 0 too."""
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=_sglang_metrics_drafting_off())
        server.routes["/server_info"] = Route(
            body=server_info(speculative_algorithm="EAGLE3", speculative_adaptive=True)
        )
        result = doctor("--url", server.url, "--baseline-curve", "1:82,96:2000")
    assert result.returncode == 0, result.stdout
    assert "speculation off (adaptive)" in result.stdout
    assert "collapsed" not in result.stdout


def test_metrics_only_adaptive_with_drafting_off_exports_no_accept_length() -> None:
    """Scraped alone, the same node: its gauge's 1.00 with 0 steps in force is plain decoding,
    so no accept length is exported for the collapse rule to page on; speed still is."""
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=_sglang_metrics_drafting_off())
        server.routes["/server_info"] = Route(
            body=server_info(speculative_algorithm="EAGLE3", speculative_adaptive=True)
        )
        target = Target.from_config(TargetConfig(name="a", metrics_url=f"{server.url}/metrics"))
        assert target.upstream is not None
        target.upstream.scrape_once()
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    assert scrape.value("specwatch_accept_length", target="a") is None
    assert scrape.value("specwatch_accept_ratio", target="a") is None
    assert scrape.value("specwatch_gen_throughput_tokens_per_second", target="a") == 2000


def test_metrics_only_with_drafting_off_far_below_the_baseline_is_told_as_drafting_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No log, so no share of windows: the gauges' 0 steps in force say drafting is off. At
    2,000 tok/s against 3,400 (0.59x) doctor --url gives the verdict and the daemon the
    finding, both with SGLang's remedy; neither calls speculation slower."""
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=_sglang_metrics_drafting_off())
        server.routes["/server_info"] = Route(
            body=server_info(speculative_algorithm="EAGLE3", speculative_adaptive=True)
        )
        code = main(["doctor", "--url", server.url, "--baseline-curve", "1:82,96:3400", "--json"])
        config = TargetConfig(
            name="a",
            metrics_url=f"{server.url}/metrics",
            server_info_url=f"{server.url}/server_info",
            baseline=BaselineConfig(curve="1:82,96:3400"),
        )
        target = Target.from_config(config)
        assert target.upstream is not None
        target.upstream.scrape_once()
    assert code == 1
    [verdict] = json.loads(capsys.readouterr().out)["verdicts"]
    assert verdict["code"] == "drafting_off_below_baseline"
    assert "(0.59x), with 0 draft steps in force (adaptive)" in verdict["seen"]
    assert "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1" in verdict["fix"]
    clock = Clock()
    clock.now = time.time()
    scrape = render([target], clock)
    finding = {"code": "drafting_off_below_baseline", "severity": "warning"}
    assert scrape.value("specwatch_finding", target="a", **finding) == 1
    assert scrape.value("specwatch_speedup", target="a") == pytest.approx(2000 / 3400)
