"""One answer: ``doctor``, ``report`` (text, JSON, HTML) and the daemon's verdict series give
the same state on the same log, over every simulated scenario (SGLang's and vLLM's lines) and
over logs written from the engines' own code.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from exporter import clock
from exporter.cli import main
from exporter.config import BaselineConfig, TargetConfig
from exporter.exposition.insight import inspect_now
from exporter.parse import ranges
from exporter.simulate import ENGINES as SIMULATED
from exporter.simulate import generate, playable
from exporter.simulate.scenarios import SCENARIOS
from exporter.sources.tail import FileTailer
from exporter.sources.tail import file as tail_file
from exporter.sources.tail.lines import CHUNK_BYTES
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support import speclogs
from tests.support.files import interleaved, write_log
from tests.support.sweep import sweep

CURVE = "1:82,4:330,16:900,48:1500,96:2040,128:2370"
# What the scenarios are (``specwatch simulate --help``), as the one answer must say it.
EXPECTED = {
    "healthy": "healthy",
    "collapsed": "collapsed",
    "eagle-flag": "collapsed",
    "mismatched": "accept_length_low",
    "adaptive": "drafting_off",
    "adaptive-given-up": "drafting_off_below_baseline",
    "ngram": "healthy",
    "mtp": "healthy",
    "recovery": "healthy",  # its collapse was the run before the restart
}
# The HTML page embeds the text report's verdict and draws a chart per figure: half a CPU-second
# a log, most of this file's time. It is held to the others on one scenario of each state, and
# of each engine, not on every log. These are also the scenarios make unit runs; make test runs
# every one (tests/support/sweep.py).
HTML_CHECKED = {
    ("sglang", "healthy"),
    ("sglang", "collapsed"),
    ("sglang", "mismatched"),
    ("sglang", "adaptive"),
    ("sglang", "adaptive-given-up"),
    ("vllm", "collapsed"),
}


def answers(
    capsys: pytest.CaptureFixture[str], log: str, tmp: Path, *, html: bool = False
) -> dict[str, str]:
    """The state each consumer gives ``log`` (the HTML page's too, if ``html``)."""
    main(["doctor", "--log-file", log, "--json", "--baseline-curve", CURVE])
    doctor = json.loads(capsys.readouterr().out)["verdict"]["state"]
    assert main(["report", log, "--json", "--baseline-curve", CURVE]) == 0
    report = json.loads(capsys.readouterr().out)["verdict"]["state"]
    assert main(["report", log, "--baseline-curve", CURVE]) == 0
    text = capsys.readouterr().out
    target = Target.from_config(TargetConfig(name="node", baseline=BaselineConfig(curve=CURVE)))
    LogFeed(target.state).on_lines(Path(log).read_bytes().splitlines())
    insight = inspect_now(target, time.time(), 3600)
    assert insight.verdict is not None
    said = f"; {doctor.replace('_', ' ')} since "
    states = {
        "doctor": doctor,
        "report json": report,
        "report text": doctor if said in text else f"not in text: {text[:300]}",
        "daemon": insight.verdict.state,
    }
    if html:
        page = tmp / "report.html"
        assert main(["report", log, "--baseline-curve", CURVE, "--html", str(page)]) == 0
        capsys.readouterr()
        states["report html"] = doctor if said in page.read_text() else "not in html"
    return states


def test_the_html_page_is_checked_on_a_scenario_of_each_state() -> None:
    checked = {scenario for _, scenario in HTML_CHECKED}
    assert checked <= set(SCENARIOS)
    assert {EXPECTED[scenario] for scenario in checked} == set(EXPECTED.values())


@pytest.mark.parametrize(
    "case",
    sweep(
        [(scenario, engine) for engine in SIMULATED for scenario in sorted(playable(engine))],
        [(scenario, engine) for engine, scenario in HTML_CHECKED],
        id="-".join,
    ),
)
def test_every_consumer_gives_the_same_state_on_a_simulated_scenario(
    case: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario, engine = case
    log = str(tmp_path / "server.log")
    assert main(["simulate", "--scenario", scenario, "--engine", engine, "--out", log]) == 0
    capsys.readouterr()
    said = answers(capsys, log, tmp_path, html=(engine, scenario) in HTML_CHECKED)
    assert len(set(said.values())) == 1, said
    if engine == "sglang" and scenario in EXPECTED:
        assert said["doctor"] == EXPECTED[scenario]


def test_every_consumer_gives_the_same_state_on_sglangs_own_adaptive_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for lines in (speclogs.healthy_adaptive(), speclogs.given_up_adaptive()):
        log = write_log(tmp_path, lines)
        said = answers(capsys, log, tmp_path, html=True)
        assert len(set(said.values())) == 1, said


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("healthy", "sglang"), ("collapsed", "sglang")),
        (("healthy", "sglang"), ("collapsed", "vllm")),
    ],
)
def test_every_consumer_gives_no_state_of_two_servers_mixed_in_one_log(
    first: tuple[str, str],
    second: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two servers appending to one file, one healthy, one collapsed: doctor, report and the
    daemon all say ``interleaved``, none healthy or collapsed from their mix."""
    logs = []
    for seed, (scenario, engine) in enumerate((first, second)):
        out = tmp_path / f"{seed}.log"
        flags = ["--scenario", scenario, "--engine", engine, "--seed", str(seed)]
        assert main(["simulate", *flags, "--out", str(out)]) == 0
        logs.append(out.read_text().splitlines())
    log = write_log(tmp_path, interleaved(logs[0], logs[1]))
    capsys.readouterr()
    main(["doctor", "--log-file", log, "--json", "--baseline-curve", CURVE])
    doctor = json.loads(capsys.readouterr().out)["verdict"]["state"]
    assert main(["report", log, "--json", "--baseline-curve", CURVE]) == 0
    report = json.loads(capsys.readouterr().out)["verdict"]["state"]
    target = Target.from_config(TargetConfig(name="node", baseline=BaselineConfig(curve=CURVE)))
    LogFeed(target.state).on_lines(Path(log).read_bytes().splitlines())
    insight = inspect_now(target, time.time(), 3600)
    assert insight.verdict is not None
    assert [doctor, report, insight.verdict.state] == ["interleaved"] * 3
    assert "interleaved_servers" in {finding.code for finding in insight.findings}


def _collapsed_for_the_last(minutes: int, lines: list[str]) -> list[str]:
    """``lines`` (a healthy run) with every decode window of its last ``minutes`` accepting
    nothing: one server run whose drafter broke late, no restart between."""
    stamps = [line[1:20] for line in lines if "Decode batch" in line]
    last = datetime.fromisoformat(stamps[-1])
    broke = (last - timedelta(minutes=minutes)).isoformat(sep=" ")
    out = []
    for line in lines:
        if "Decode batch" in line and line[1:20] >= broke:
            line = re.sub(r"accept len: [0-9.]+", "accept len: 1.00", line)
            line = re.sub(r"accept rate: [0-9.]+", "accept rate: 0.25", line)
        out.append(line)
    return out


def test_the_daemon_started_on_a_log_judges_its_tail_by_the_log_s_own_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An hour healthy, then its last ten minutes collapsed: the daemon started on that log
    (reading its tail, as it does by default) says collapsed, as doctor and report do, and
    since about ten minutes before the file was last written. With the tail's windows all at
    the file's mtime it judged the tail's 13 minutes as one moment, and said healthy."""
    lines = _collapsed_for_the_last(10, list(generate("healthy", duration=4200)))
    log = write_log(tmp_path, lines)
    main(["doctor", "--log-file", log, "--json"])
    assert json.loads(capsys.readouterr().out)["verdict"]["state"] == "collapsed"
    assert main(["report", log, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["state"] == "collapsed"
    target = Target.from_config(TargetConfig(name="node"))
    written = time.time()
    tail = Path(log).read_bytes().splitlines()[-6000:]  # its last 13 minutes
    LogFeed(target.state).on_bootstrap(tail, written)
    insight = inspect_now(target, written, 3600)
    assert insight.verdict is not None
    assert insight.verdict.state == "collapsed"
    assert written - 11 * 60 < insight.verdict.since < written - 9 * 60


@pytest.mark.parametrize(
    "helpers", [False, pytest.param(True, marks=pytest.mark.e2e)], ids=["one reader", "helpers"]
)
def test_the_daemon_catching_up_from_the_beginning_judges_the_log_by_its_own_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: bool
) -> None:
    """The same log read ``--from-beginning``, by the tailer alone or with helper processes
    reading its far part: collapsed, since about ten minutes before the file was last
    written. With every window of the backlog at the file's mtime the whole run was one
    moment, and the hour healthy outweighed the ten minutes collapsed."""
    taken: list[int | None] = []  # where each catch-up by helpers ended (None: not taken)
    if helpers:
        monkeypatch.setattr(ranges, "helpers_available", lambda: 1)
        monkeypatch.setattr(ranges.IdleWatch, "cores", lambda self: 64.0)  # whatever runs
        monkeypatch.setattr(ranges, "SPLIT_ABOVE_BYTES", 0)
        monkeypatch.setattr(tail_file, "PASS_BUDGET_BYTES", CHUNK_BYTES)  # the log is many
        by_ranges = ranges.read_by_ranges

        def spied(*args: Any, **kwargs: Any) -> int | None:
            taken.append(by_ranges(*args, **kwargs))
            return taken[-1]

        monkeypatch.setattr(ranges, "read_by_ranges", spied)
    lines = _collapsed_for_the_last(10, list(generate("healthy", duration=4200)))
    log = write_log(tmp_path, lines)
    target = Target.from_config(TargetConfig(name="node"))
    feed = LogFeed(target.state)
    backlog = feed.read_backlog if helpers else None
    tailer = FileTailer(log, feed, from_beginning=True, backlog=backlog)
    try:
        previous = -1
        while (read := target.state.snapshot().log_lines) != previous:  # until a pass adds none
            previous = read
            tailer.poll()
    finally:
        tailer.stop()
    assert read == len(lines)
    assert any(end is not None for end in taken) == helpers
    written = clock.since(Path(log).stat().st_mtime)
    insight = inspect_now(target, written, 3600)
    assert insight.verdict is not None
    assert insight.verdict.state == "collapsed"
    assert written - 11 * 60 < insight.verdict.since < written - 9 * 60
