"""The ``specwatch`` command line: parse the arguments, run the command, map its failures.

The table of subcommands lives in :mod:`exporter.commands`, each command in a module of its
own that registers its flags, so this file does not grow with every feature.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from exporter import __version__
from exporter.commands import register_all
from exporter.commands.usage import OneLineParser, UsageError
from exporter.runtime import tune_gc


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: only the command it names (all without one) with its flags."""
    parser = OneLineParser(
        prog="specwatch",
        description="Prometheus exporter and alerting sidecar for speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_all(subparsers, argv)
    return parser


def _command_parser(parser: argparse.ArgumentParser, name: str) -> OneLineParser:
    """The parser of subcommand ``name``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            command: OneLineParser = action.choices[name]
            return command
    raise LookupError(name)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tune_gc()
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command they were given to, whose help lists its flags
        command = _command_parser(parser, args.command)
        command.unrecognized(extra)
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
