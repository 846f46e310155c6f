"""The installed ``specwatch`` console script: the commands the README lists, version, exits."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter import __version__

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


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--scenario", "healthy", "--duration", "3600"],
        ["parse", "LOG"],
        ["parse", "--json", "LOG"],
    ],
)
def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path, command: list[str]) -> None:
    """`specwatch parse big.log | head`: exit 0, no complaint, whatever the command."""
    log = tmp_path / "server.log"
    run("simulate", "--scenario", "healthy", "--duration", "3600", "--out", str(log))
    argv = [str(SPECWATCH), *(str(log) if arg == "LOG" else arg for arg in command)]
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
    code = (
        "import gc, sys\nfrom exporter.cli import main\n"
        "code = main(['parse', sys.argv[1]])\nprint(code, gc.get_threshold()[0])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.split()[-2:] == ["0", str(YOUNG_GENERATION_THRESHOLD)], result.stderr


def test_the_daemon_starts_without_importing_the_report_or_the_simulator() -> None:
    """What ``run`` imports is its start-up time: importing report/ for a baseline learnt
    from a log (which most nodes do not configure) was a tenth of it."""
    probe = (
        "import sys; from exporter.cli import build_parser; import exporter.daemon; "
        "build_parser(['run']); "
        "print(' '.join(m for m in sys.modules if m.startswith(('exporter.report', "
        "'exporter.simulate', 'exporter.mixin'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split() == []


def test_a_daemon_of_flags_alone_loads_no_yaml_re2_or_web_config(tmp_path: Path) -> None:
    """What a plain node does not use it does not pay for at start: PyYAML (no file given),
    RE2 and its C++ runtime (no custom rules), bcrypt and the TLS models (no web config)."""
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    probe = (
        "import sys; from exporter.config import load_config; from exporter.daemon import Daemon; "
        "Daemon(load_config(None, {'log_files': [sys.argv[1]], 'listen': '127.0.0.1:0'})); "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('yaml', 're2', 'bcrypt') "
        "or m.startswith(('exporter.exposition.webconfig', 'exporter.exposition.tlsconfig'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(log)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []
