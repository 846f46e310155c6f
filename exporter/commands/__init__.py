"""The subcommands of ``specwatch``, one module each, and the flags several of them share.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int``; :data:`COMMANDS` is the table ``exporter.cli`` builds its parser from.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.analysis.baseline import Baseline, BaselineError
from exporter.analysis.thresholds import DEFAULT, Thresholds
from exporter.commands.usage import OneLineParser, UsageError

if TYPE_CHECKING:
    from exporter.config import TargetConfig

# Name -> the line `specwatch --help` shows, in the order it lists them.
COMMANDS: dict[str, str] = {
    "run": "run the exporter daemon",
    "parse": "print the stats records of a server log, of whichever engine",
    "doctor": "judge a server, log or draft config and suggest fixes",
    "simulate": "write a realistic server log for an incident scenario (--engine)",
    "report": "summarise a log: accept length, throughput vs baseline, findings",
    "baseline": "learn a non-speculative baseline curve from a log served without speculation",
    "mixin": "render the alert rules, recording rules and dashboards for your labels",
}
BASELINE_FLAGS = ("--baseline-tok-s", "--baseline-curve", "--baseline-bench", "--baseline-log")
# The config's ``baseline:`` keys, in the order of their flags.
BASELINE_KEYS = ("tok_s", "curve", "bench_file", "log")


def register_all(
    subparsers: argparse._SubParsersAction[OneLineParser], argv: Sequence[str] | None = None
) -> None:
    """Add every command's parser, in :data:`COMMANDS` order.

    Only the command ``argv`` names is imported and given its flags (all of them when it
    names none, for ``--help``): the commands together import the settings models, the daemon
    and the simulator, about a tenth of a second of CPU more for every ``report`` on a log
    (half a second while the settings models were pydantic's).
    """
    chosen = None if argv is None else next((arg for arg in argv if arg in COMMANDS), None)
    for name, line in COMMANDS.items():
        if chosen in (None, name):
            importlib.import_module(f"exporter.commands.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=line)


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=path_arg, metavar="FILE", help="YAML config file (flags win over it)"
    )


def path_arg(value: str) -> Path:
    """An argparse type for paths: an empty value is refused, never taken as the working
    directory (what ``Path("")`` would make of it)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path names no file")
    return Path(value)


def add_baseline_flags(parser: argparse.ArgumentParser) -> None:
    """The baseline (docs/configuration.md) and expected accept length, alike everywhere.

    ``run``, ``doctor`` and ``report`` all judge throughput against a baseline; one definition
    keeps their flags, exclusivity and help identical.
    """
    group = parser.add_mutually_exclusive_group()
    tok_s, curve, bench, log = BASELINE_FLAGS
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
        help="the JSONL sglang.benchmark.serving wrote for a run without speculation",
    )
    group.add_argument(
        log,
        type=path_arg,
        metavar="FILE",
        help="a log of this model served without speculation (`specwatch baseline` shows "
        "what it learns)",
    )
    parser.add_argument(
        "--expected-accept-length",
        type=float,
        metavar="X",
        help="accept length this drafter should reach (e.g. 3.0)",
    )


def baseline_flag(args: argparse.Namespace) -> str:
    """The baseline flag given, to name it when its baseline is refused.

    The flags exclude each other, so the one given is the one at fault; "baseline" when none
    was (the baseline came from the config file, whose error names its key).
    """
    given = (flag for flag in BASELINE_FLAGS if getattr(args, _dest(flag), None) is not None)
    return next(given, "baseline")


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class Judging:
    """What a one-shot command judges a log by, and where each part came from."""

    baseline: Baseline | None = None
    baseline_option: str | None = None  # the flag or config key that set it, for messages
    expected_accept_length: float | None = None
    draft_config: Path | None = None


def judging_options(args: argparse.Namespace) -> Judging:
    """Baseline and expected accept length from the flags, over ``--config``'s target.

    The same precedence as ``specwatch run`` (flags, then ``SPECWATCH_*``, then the file), so
    ``doctor --config`` judges by exactly what the daemon exports.
    """
    pairs = zip(BASELINE_KEYS, BASELINE_FLAGS, strict=True)
    flags = {key: getattr(args, _dest(flag)) for key, flag in pairs}
    given = {key: value for key, value in flags.items() if value is not None}
    where = baseline_flag(args)
    expected = args.expected_accept_length
    draft = None
    config_path = getattr(args, "config", None)
    if config_path is not None and not given:
        target = _config_target(args)
        if target.baseline is not None:
            values = {k: getattr(target.baseline, k) for k in BASELINE_KEYS}
            given = {k: v for k, v in values.items() if v is not None}
            where = f"baseline.{next(iter(given))} in {config_path}"
        expected = expected if expected is not None else target.expected_accept_length
        draft = target.draft_config
    if expected is not None and expected < 1:
        raise UsageError("--expected-accept-length: must be at least 1 (the bonus token)")
    # Here, not at the top: importing report/ (the log reader and builder behind a baseline
    # learnt from a log) was a fifth of every command's start-up, `run` included.
    from exporter.report.learn import baseline_from_options

    try:
        baseline = baseline_from_options(
            tok_s=given.get("tok_s"),
            curve=given.get("curve"),
            bench_file=given.get("bench_file"),
            log=given.get("log"),
        )
    except BaselineError as exc:  # one baseline at most, so the one given is at fault
        raise UsageError(f"{where}: {exc}") from None
    return Judging(baseline, where if baseline else None, expected, draft)


def _config_target(args: argparse.Namespace) -> TargetConfig:
    """The one target of ``--config`` (``--target`` picks among several)."""
    from exporter.config import load_config  # the models: only when a file is given
    from exporter.settings import ConfigError

    name = getattr(args, "target", None)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(f"--config: {exc}") from None
    targets = [t for t in config.targets if name is None or t.name == name]
    if len(targets) != 1:
        names = ", ".join(t.name for t in config.targets)
        raise UsageError(f"--target: name one of the config's targets ({names})")
    return targets[0]


def add_mixin_config_flag(parser: argparse.ArgumentParser) -> None:
    """``--mixin-config``: judge by the thresholds the user's rendered alerts use."""
    parser.add_argument(
        "--mixin-config",
        type=path_arg,
        metavar="FILE",
        help="judge by this mixin config's thresholds (those of your alerts; default: shipped)",
    )


def mixin_thresholds(args: argparse.Namespace) -> Thresholds:
    """The thresholds of ``--mixin-config``, or the shipped ones; a bad file is a usage error."""
    if args.mixin_config is None:
        return DEFAULT
    from exporter.mixin_config import load_mixin_config
    from exporter.settings import ConfigError

    try:
        return load_mixin_config(args.mixin_config).thresholds
    except ConfigError as exc:
        raise UsageError(f"--mixin-config: {exc}") from None
