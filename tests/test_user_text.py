"""Text a user reads: every ``--help`` and every metric HELP string can be followed as is.

No raw docstring markup, no pointer to a document the user does not have, and help for every
option; the scenarios of ``simulate`` are each described.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from exporter.cli import build_parser
from exporter.commands import COMMANDS
from exporter.exposition.families import FAMILIES
from exporter.simulate import SCENARIOS
from tests.support.daemon import run_daemon, simulated_log, specwatch_cmd

# Pointers to documents that ship with nothing a user has.
PRIVATE_REFERENCE = re.compile(r"spec (section|§)|spec §|\(spec [0-9]|incident [0-9]", re.I)


def help_text(*args: str) -> str:
    result = subprocess.run(
        specwatch_cmd(*args, "--help"), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def assert_readable(text: str, where: str) -> None:
    assert "``" not in text, f"{where}: raw double backticks"
    found = PRIVATE_REFERENCE.search(text)
    assert found is None, f"{where}: refers to a document users do not have: {found.group(0)!r}"


@pytest.mark.parametrize("command", [None, *COMMANDS])
@pytest.mark.e2e
def test_help_has_no_markup_nor_private_references(command: str | None) -> None:
    args = () if command is None else (command,)
    assert_readable(help_text(*args), f"specwatch {command or ''} --help")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(command: str) -> None:
    parser = subparsers()[command]
    silent = [
        a.option_strings[0] if a.option_strings else a.dest for a in parser._actions if not a.help
    ]
    assert not silent, f"specwatch {command}: options without help: {silent}"


@pytest.mark.e2e
def test_simulate_help_describes_every_scenario() -> None:
    text = help_text("simulate")
    for name, scenario in SCENARIOS.items():
        line = next((ln for ln in text.splitlines() if ln.split()[:1] == [name]), None)
        assert line is not None, f"scenario {name} is not described"
        assert scenario.summary.split(":")[0] in line


@pytest.mark.parametrize("command", COMMANDS)
def test_abbreviated_options_are_refused(command: str) -> None:
    """``--baseline-curv`` must not quietly become ``--baseline-curve`` (or any other flag)."""
    parser = subparsers()[command]
    longs = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    longest = max((o for o in longs if o != "--help"), key=len)
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args([command, longest[:-1], "1"])
    assert caught.value.code == 2


def test_every_metric_help_string_is_readable() -> None:
    for short, (_, doc) in FAMILIES.items():
        assert_readable(doc, f"specwatch_{short} HELP")


@pytest.mark.e2e
def test_a_live_scrape_has_readable_help_strings(tmp_path: Path, port: int) -> None:
    """The HELP lines as Prometheus stores them, from a daemon that has something to say."""
    log = simulated_log(tmp_path, "eagle-flag")
    args = ["--log-file", str(log), "--from-beginning", "--metrics-url", "http://127.0.0.1:9/m"]
    with run_daemon(args, port) as daemon:
        daemon.wait_metric(
            "specwatch_finding", lambda v: v == 1, code="eagle3_draft_with_eagle_algorithm"
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    helps = [line for line in text.splitlines() if line.startswith("# HELP specwatch_")]
    assert len(helps) > 15, "the scrape no longer shows specwatch's families"
    for line in helps:
        assert_readable(line, line.split()[2])
