"""The systemd unit and its journald drop-in: systemd accepts them and they stay hardened.

``systemd-analyze verify`` reads the unit with the drop-in (found through SYSTEMD_UNIT_PATH)
and reports unknown keys and unparsable values as warnings with a zero exit status, so any
warning that points into our files fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.deploy import EXAMPLE, effective_config, log_dirs_of
from tests.support.tools import REPO, require_tool

SYSTEMD = REPO / "deploy" / "systemd"
UNIT = SYSTEMD / "specwatch.service"
DROP_IN = SYSTEMD / "specwatch.service.d" / "journald.conf"
# Where the unit's install comment puts deploy/specwatch.example.yaml.
INSTALLED_CONFIG = "/etc/specwatch/specwatch.yaml"


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) in file order; systemd allows repeated keys, so no dict."""
    entries, section = [], ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        entries.append((section, key.strip(), value.strip()))
    return entries


def effective(entries: list[tuple[str, str, str]], key: str) -> list[str]:
    """The values a list-type key ends up with: an empty assignment resets the list."""
    values: list[str] = []
    for _, k, v in entries:
        if k == key:
            values = [] if v == "" else [*values, v]
    return values


def single(entries: list[tuple[str, str, str]], key: str) -> str:
    values = effective(entries, key)
    assert values, f"{key} is not set"
    return values[-1]


def specwatch_argv(exec_start: str) -> list[str]:
    """The specwatch arguments of an ExecStart, also when it is wrapped in ``bash -c``."""
    words = shlex.split(exec_start)
    if Path(words[0]).name == "bash":
        words = shlex.split(words[words.index("-c") + 1])
        words = words[words.index("exec") + 1 : words.index("<")]
    assert Path(words[0]).name == "specwatch", exec_start
    return words[1:]


def verify(units: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` on the unit in ``units``, drop-ins found beside it."""
    analyze = require_tool("systemd-analyze")
    return subprocess.run(
        [analyze, "verify", str(units / UNIT.name)],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.e2e
def test_systemd_accepts_the_unit_and_the_drop_in(tmp_path: Path) -> None:
    shutil.copytree(SYSTEMD, tmp_path, dirs_exist_ok=True)
    result = verify(tmp_path)
    ours = [ln for ln in result.stderr.splitlines() if re.search(r"\.(service|conf):\d+:", ln)]
    assert not ours, "\n".join(ours)
    assert result.returncode == 0, result.stderr


@pytest.mark.e2e
def test_verify_reports_a_misspelt_key(tmp_path: Path) -> None:
    """Guard: the check above does see problems in a drop-in."""
    shutil.copytree(SYSTEMD, tmp_path, dirs_exist_ok=True)
    (tmp_path / "specwatch.service.d" / "typo.conf").write_text("[Service]\nProtectSytem=strict\n")
    assert "typo.conf:2:" in verify(tmp_path).stderr


def test_unit_runs_as_a_transient_user_with_a_read_only_system() -> None:
    entries = unit_entries(UNIT)
    expected = {
        "DynamicUser": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "RestartPreventExitStatus": "2",
    }
    for key, value in expected.items():
        assert single(entries, key) == value, key
    assert effective(entries, "CapabilityBoundingSet") == [], "no capabilities at all"
    assert "MemoryMax" in {k for _, k, _ in entries}


def test_unit_reads_the_example_config_and_may_read_its_log_directory() -> None:
    entries = unit_entries(UNIT)
    argv = specwatch_argv(single(entries, "ExecStart"))
    assert argv[argv.index("--config") + 1] == INSTALLED_CONFIG
    assert f"deploy/specwatch.example.yaml {INSTALLED_CONFIG}" in UNIT.read_text()
    config = effective_config(argv, EXAMPLE)
    readable = [p.lstrip("-") for v in effective(entries, "ReadOnlyPaths") for p in v.split()]
    assert log_dirs_of(config) <= set(readable)


def test_journald_drop_in_replaces_the_command_and_feeds_stdin() -> None:
    unit, drop_in = unit_entries(UNIT), unit_entries(DROP_IN)
    exec_start = effective(unit + drop_in, "ExecStart")
    assert len(exec_start) == 1, "the drop-in must reset ExecStart before setting it"
    argv = specwatch_argv(exec_start[0])
    config = effective_config(argv, EXAMPLE)
    assert [t.log_files for t in config.targets] == [["-"]]
    assert "systemd-journal" in effective(unit + drop_in, "SupplementaryGroups")


def journalctl_argv(exec_start: str) -> list[str]:
    """The command inside the drop-in's process substitution ``<(exec journalctl ...)``."""
    script = shlex.split(exec_start)[-1]
    words = shlex.split(script[script.index("<(") + 2 : script.rindex(")")])
    return words[words.index("journalctl") :]


@pytest.mark.e2e
def test_journalctl_accepts_the_drop_in_flags() -> None:
    """Run the real journalctl with the same flags (minus --follow, so it returns)."""
    journalctl = require_tool("journalctl")
    words = journalctl_argv(single(unit_entries(DROP_IN), "ExecStart"))
    assert "--follow" in words
    assert words[words.index("--output") + 1] == "cat", "SGLang's own line, no journal prefix"
    flags = [w for w in words[1:] if w != "--follow"]
    result = subprocess.run(
        [journalctl, *flags, "--no-pager"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
