"""The installed ``specwatch`` console script: the commands the README lists, version, exits."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter import __version__
from exporter.cli import main
from tests.support.daemon import in_process, run_daemon
from tests.support.tools import free_port

pytestmark = pytest.mark.e2e

SPECWATCH = Path(sys.executable).with_name("specwatch")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SPECWATCH), *args], capture_output=True, text=True, timeout=60)


def test_help_lists_every_command() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^    (\w+)\s", result.stdout, re.MULTILINE))
    assert listed == {"run", "parse", "report", "baseline", "doctor", "simulate", "mixin"}, (
        result.stdout
    )


def test_version_names_the_package_version() -> None:
    result = run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"specwatch {__version__}")


def test_unknown_command_exits_2_on_one_line() -> None:
    result = run("serve")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "serve" in result.stderr


@pytest.fixture(scope="module")
def long_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An hour of a healthy server's log, written once (in this process: it is the input)."""
    log = tmp_path_factory.mktemp("cli") / "server.log"
    done = in_process("simulate", "--scenario", "healthy", "--duration", "3600", "--out", str(log))
    assert done.returncode == 0, done.stderr
    return log


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--scenario", "healthy", "--duration", "3600"],
        ["parse", "LOG"],
        ["parse", "--json", "LOG"],
    ],
)
def test_a_reader_that_stops_early_is_not_an_error(long_log: Path, command: list[str]) -> None:
    """`specwatch parse big.log | head`: exit 0, no complaint, whatever the command."""
    argv = [str(SPECWATCH), *(str(long_log) if arg == "LOG" else arg for arg in command)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()  # the reader goes away with most of the output unread
    _, stderr = proc.communicate(timeout=60)
    assert (proc.returncode, stderr.decode()) == (0, "")


def test_commands_run_the_cycle_collector_rarely(tmp_path: Path) -> None:
    """Reading a log makes a short-lived record per stats line; collecting every 700 new
    objects cost a report 6 to 8% of its CPU."""
    from exporter.runtime import YOUNG_GENERATION_THRESHOLD

    log = tmp_path / "server.log"
    log.write_text("[2026-02-23 00:14:33 TP0] Load weight end. type=LlamaForCausalLM\n")
    before = gc.get_threshold()
    gc.set_threshold(700, *before[1:])  # CPython's default, whatever ran here before
    try:
        assert main(["parse", str(log)]) == 0
        assert gc.get_threshold()[0] == YOUNG_GENERATION_THRESHOLD
    finally:
        gc.set_threshold(*before)


# What a daemon given only flags (a log, no URL, no web config) never needs, nor its scrapes.
UNUSED_MODULES = {
    "exporter.exposition.webconfig",
    "exporter.exposition.tlsconfig",
    "exporter.exposition.webreload",
    "exporter.sources.upstream",
    "exporter.sources.endpoints",
    "exporter.sources.resolve",
    "exporter.engines.sglang_upstream",
    "exporter.engines.vllm_upstream",
    "exporter.engines.trtllm_upstream",
    "prometheus_client.parser",
    "prometheus_client.openmetrics.parser",
}
UNUSED_PACKAGES = ("yaml", "re2", "bcrypt")
# Whole parts of specwatch a daemon never runs: the report and the baseline learnt from a log
# (unless a baseline log is configured), the simulator and each engine's simulation, the mixin.
UNUSED_PARTS = (
    "exporter.report",
    "exporter.simulate",
    "exporter.engines.simulation",
    "exporter.engines.sglang_sim",
    "exporter.engines.vllm_sim",
    "exporter.mixin",
)


def _imported(log: str) -> set[str]:
    """The modules a process imported, from what ``-X importtime`` wrote in ``log``."""
    return set(re.findall(r"^import time:\s*\d+ \|\s*\d+ \|\s*(\S+)$", log, re.MULTILINE))


def test_a_daemon_of_flags_alone_following_a_log_loads_only_what_it_uses(tmp_path: Path) -> None:
    """What a plain node does not use it does not pay for at start (nor at a scrape): the
    report, the simulator and the mixin (importing report/ for a baseline learnt from a log
    was a tenth of a start), PyYAML (no file given), RE2 and its C++ runtime (no custom
    rules), bcrypt and the TLS models (no web config), the upstream scraper (no server URL:
    its fetching, the exposition-format parsers, each engine's /metrics reader). Read from
    what ``-X importtime`` writes."""
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    port = free_port()
    with run_daemon(["--log-file", str(log)], port, env={"PYTHONPROFILEIMPORTTIME": "1"}) as d:
        assert d.scrape().value("specwatch_log_lines_total") == 0
    imported = _imported(d.logged)
    assert "exporter.daemon" in imported  # what -X importtime writes is read
    loaded = [
        m
        for m in imported
        if m in UNUSED_MODULES or m.split(".")[0] in UNUSED_PACKAGES or m.startswith(UNUSED_PARTS)
    ]
    assert sorted(loaded) == []
