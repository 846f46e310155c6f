"""The subcommands of ``specwatch``, one module each (see ``exporter.cli``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from exporter.analysis.thresholds import Thresholds
from exporter.cli import UsageError
from exporter.config import ConfigError
from exporter.mixin_config import load_mixin_config


def path_arg(value: str) -> Path:
    """An argparse type for paths: an empty value is refused, never taken as the working
    directory (what ``Path("")`` would make of it)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path names no file")
    return Path(value)


def add_baseline_flags(parser: argparse.ArgumentParser) -> None:
    """The baseline (README "Baselines") and expected accept length, alike wherever they appear.

    ``run`` and ``report`` both judge throughput against a baseline; one definition keeps their
    flags, exclusivity and help identical.
    """
    group = parser.add_mutually_exclusive_group()
    tok_s, curve, bench = BASELINE_FLAGS
    group.add_argument(
        tok_s, type=float, metavar="N", help="tok/s of the server without speculation"
    )
    group.add_argument(
        curve,
        metavar="CURVE",
        help='running requests:tok/s without speculation, e.g. "1:82,48:1500,128:2370"',
    )
    group.add_argument(
        bench,
        type=path_arg,
        metavar="FILE",
        help="sglang.bench_serving JSONL output of a run without speculation",
    )
    parser.add_argument(
        "--expected-accept-length",
        type=float,
        metavar="X",
        help="accept length this drafter should reach (e.g. 3.0)",
    )


BASELINE_FLAGS = ("--baseline-tok-s", "--baseline-curve", "--baseline-bench")


def baseline_flag(args: argparse.Namespace) -> str:
    """The baseline flag given, to name it when its baseline is refused.

    The flags exclude each other, so the one given is the one at fault; "baseline" when none
    was (the baseline came from the config file, whose error names its key).
    """
    given = (flag for flag in BASELINE_FLAGS if getattr(args, _dest(flag), None) is not None)
    return next(given, "baseline")


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def add_mixin_config_flag(parser: argparse.ArgumentParser) -> None:
    """``--mixin-config``: judge by the thresholds the user's rendered alerts use."""
    parser.add_argument(
        "--mixin-config",
        type=Path,
        metavar="FILE",
        help="judge by this mixin config's thresholds (those of your alerts; default: shipped)",
    )


def mixin_thresholds(args: argparse.Namespace) -> Thresholds:
    """The thresholds of ``--mixin-config``, or the shipped ones; a bad file is a usage error."""
    try:
        return load_mixin_config(args.mixin_config).thresholds
    except ConfigError as exc:
        raise UsageError(f"--mixin-config: {exc}") from None
