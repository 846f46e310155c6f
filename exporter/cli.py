"""The ``specwatch`` command line: one subcommand per module in ``exporter.commands``.

Each command module exposes ``register(subparsers)`` that adds its parser and sets
``func(args) -> int``. Keeping the table here, and the commands apart, lets each command own
its flags without this file growing with every feature.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from exporter import __version__

# Order is the order `specwatch --help` lists them in.
COMMANDS: tuple[str, ...] = ("run", "parse", "doctor", "simulate", "report")


class UsageError(Exception):
    """A bad flag or config value: reported on one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """Report usage errors on one line: scripts and log collectors read the last line only.

    Abbreviated options are refused: ``--baseline-curv`` silently taken as ``--baseline-curve``
    works until another flag shares the prefix, and then a deployment stops starting.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        # Descriptions come from docstrings, whose ``literal`` markup means nothing in a terminal.
        return super().format_help().replace("``", "")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="specwatch",
        description="Prometheus exporter and alerting sidecar for speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"exporter.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        # One line whatever the message holds: scripts and log collectors read the last line.
        message = " ".join(str(exc).split())
        print(f"specwatch {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `specwatch parse big.log | head`: the reader has seen enough, which is not an error.
        # stdout goes to /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
