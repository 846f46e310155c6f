"""The config a shipped deploy command line runs with, read by specwatch's own parser and loader."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from exporter.cli import build_parser
from exporter.commands.run import flag_overrides
from exporter.config import Config, load_config
from tests.support.tools import REPO

DEPLOY = REPO / "deploy"
EXAMPLE = DEPLOY / "specwatch.example.yaml"


def parse_specwatch_argv(argv: list[str]) -> argparse.Namespace:
    """Parse a deploy file's ``specwatch ...`` argument list with the real CLI parser.

    argparse exits (status 2) on an unknown flag or a bad value; that becomes a test failure
    naming the command line instead of a bare SystemExit.
    """
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"specwatch rejects {argv}: exit {exc.code}")


def effective_config(argv: list[str], config_file: Path | None) -> Config:
    """The config ``specwatch <argv>`` would run with, ``--config`` read from ``config_file``.

    The path inside argv is where the file lands in a container or on a host; the test passes
    the repository file that is installed there. The environment is left out on purpose.
    """
    args = parse_specwatch_argv(argv)
    assert args.command == "run", f"deploy files start the daemon, not {args.command!r}"
    assert (args.config is None) == (config_file is None), f"--config in {argv} vs {config_file}"
    return load_config(config_file, flag_overrides(args), environ={})


def log_dirs_of(config: Config) -> set[str]:
    """The deepest fixed directory of each log path: what must be mounted, not a single file.

    For a glob that is the part before the first wildcard's path component.
    """
    dirs = set()
    for target in config.targets:
        for pattern in target.log_files:
            if pattern != "-":
                fixed = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
                dirs.add(fixed.rsplit("/", 1)[0] or "/")
    return dirs
