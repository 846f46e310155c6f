"""Every command-line flag named in ``deploy/`` exists in the program that takes it.

A renamed specwatch flag would otherwise surface only as a crash-looping pod or a failed
unit on a user's machine. specwatch's own flags are read from ``specwatch run --help`` of the
installed console script, as a user would; so are the flags of the other programs that are
installed where the tests run. The rest (SGLang, the Docker CLI and Dockerfile instruction
options) cannot run here and are listed from their documentation.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.deploy import DEPLOY
from tests.support.tools import require_tool

pytestmark = pytest.mark.e2e

TEE = DEPLOY / "kubernetes" / "overlays" / "sidecar" / "sglang-log-tee.py"
SPECWATCH = Path(sys.executable).with_name("specwatch")
# A long flag as written in a command line or a comment: `--name`, `--name=value`.
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9.-]*[a-z0-9]")
# `specwatch run ...` up to the end of the shell command, or an exec-form ["run", ...] list.
RUN_COMMAND = re.compile(r"""\bspecwatch run\b([^\n<|)`]*)|\[\s*"run"\s*,([^\]]*)\]""")
# Other programs deploy/ runs or mentions -> their flags it uses, checked against their --help.
CHECKED_FLAGS: dict[tuple[str, ...], set[str]] = {
    ("prometheus",): {"--config.file", "--storage.tsdb.path", "--web.listen-address"},
    ("prometheus-alertmanager",): {"--config.file", "--storage.path", "--web.listen-address"},
    ("journalctl",): {"--follow", "--unit", "--output", "--lines"},
    ("systemctl",): {"--now"},
    ("useradd",): {"--system", "--uid", "--gid", "--no-create-home", "--home-dir", "--shell"},
    ("groupadd",): {"--system", "--gid"},
    ("pip", "wheel"): {"--no-cache-dir", "--wheel-dir"},
    ("pip", "install"): {"--no-cache-dir", "--no-index", "--find-links"},
    ("docker-compose", "up"): {"--build"},
    ("sglang-log-tee.py",): {"--max-bytes", "--backups"},
    ("specwatch", "mixin"): {"--config", "--out"},
}
# How each of those is started for its --help (pip and the tee run with the tests' Python).
HELP_ARGV: dict[str, list[str]] = {
    "pip": [sys.executable, "-m", "pip"],
    "sglang-log-tee.py": [sys.executable, str(TEE)],
    "specwatch": [str(SPECWATCH)],
}
DOCUMENTED_FLAGS = {
    # python -m sglang.launch_server and sglang.bench_serving (server_args.py, bench_serving.py)
    "--model-path", "--speculative-algorithm", "--speculative-draft-model-path",
    "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
    "--enable-metrics", "--host", "--port", "--api-key", "--log-requests", "--output-file",
    # vllm serve, named by the rendered alerts' fixes (the PrometheusRule)
    "--speculative-config",
    # docker run, and the options of the Dockerfile's RUN and HEALTHCHECK instructions
    "--read-only", "--tmpfs", "--network", "--mount", "--interval", "--timeout", "--start-period",
    "--retries",
}  # fmt: skip


def deploy_texts() -> dict[str, str]:
    """Every file in deploy/ by its path below deploy/."""
    return {
        p.relative_to(DEPLOY).as_posix(): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(DEPLOY.rglob("*"))
        if p.is_file()
    }


def help_flags(argv: list[str]) -> set[str]:
    """The long flags a program's ``--help`` lists."""
    result = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return set(FLAG.findall(result.stdout + result.stderr))


@pytest.fixture(scope="module")
def run_flags() -> set[str]:
    assert SPECWATCH.is_file(), f"{SPECWATCH} is missing: install the package (make test does)"
    return help_flags([str(SPECWATCH), "run"])


def run_commands() -> list[tuple[str, str]]:
    """(file, arguments) of every ``specwatch run`` command line in deploy/."""
    return [
        (name, match[0] or match[1])
        for name, text in deploy_texts().items()
        for match in RUN_COMMAND.findall(text)
    ]


def test_specwatch_command_lines_use_only_flags_of_specwatch_run(run_flags: set[str]) -> None:
    commands = run_commands()
    # Dockerfile, Compose, two Kubernetes workloads, the unit and its journald drop-in.
    assert len(commands) >= 6, commands
    for name, args in commands:
        unknown = set(FLAG.findall(args)) - run_flags
        assert not unknown, f"deploy/{name}: specwatch run has no {sorted(unknown)}"


def test_a_renamed_flag_would_be_caught(run_flags: set[str]) -> None:
    """Guard: the patterns above find flags in both command forms and reject unknown ones."""
    text = 'ExecStart=/x/specwatch run --config a --log-files b\nCMD ["run", "--listen-on", "x"]'
    found = {flag for m in RUN_COMMAND.findall(text) for flag in FLAG.findall(m[0] or m[1])}
    assert found - run_flags == {"--log-files", "--listen-on"}


@pytest.mark.parametrize("command", CHECKED_FLAGS, ids=" ".join)
def test_other_programs_flags_exist_in_their_help(command: tuple[str, ...]) -> None:
    program, *sub = command
    argv = HELP_ARGV.get(program) or [require_tool(program)]
    missing = CHECKED_FLAGS[command] - help_flags([*argv, *sub])
    assert not missing, f"{' '.join(command)} --help does not list {sorted(missing)}"


def test_every_flag_in_deploy_belongs_to_a_program_it_runs(run_flags: set[str]) -> None:
    """Also flags in comments, e.g. "set HEALTHCHECK_URL when --listen moves the port"."""
    known = run_flags | DOCUMENTED_FLAGS | set().union(*CHECKED_FLAGS.values())
    unknown = {
        (name, flag)
        for name, text in deploy_texts().items()
        for flag in FLAG.findall(text)
        if flag not in known
    }
    assert not unknown, sorted(unknown)
