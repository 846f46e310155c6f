"""``specwatch simulate``: write a realistic server log for one incident scenario.

Two modes. By default the whole log is written at once with simulated, reproducible stamps
(same seed, same bytes). With ``--real-time`` (implied by ``--rate`` or ``--speed``) lines are
paced like a live server and stamped with the wall clock, which is what the demo, the
end-to-end tests and the benchmarks tail.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from exporter.commands import COMMANDS
from exporter.commands.usage import UsageError
from exporter.simulate import (
    DEFAULT_ENGINE,
    ENGINES,
    ENVELOPES,
    FORMATS,
    SCENARIOS,
    events,
    generate,
    logging_requests,
    playable,
    refusal,
    scenario,
    simulation,
)
from exporter.simulate.realtime import speed_for_rate, write_live
from exporter.simulate.scenarios import Scenario

DEFAULT_DURATION = 300.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    width = max(len(name) for name in SCENARIOS)
    listing = "\n".join(f"  {name:<{width}}  {s.summary}" for name, s in SCENARIOS.items())
    parser = subparsers.add_parser(
        "simulate",
        help=COMMANDS["simulate"],
        description=__doc__.split("\n\n")[1],
        epilog=f"scenarios:\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario",
        required=True,
        choices=list(SCENARIOS),
        metavar="NAME",
        help=f"what the server does (one of: {', '.join(SCENARIOS)}; each described below)",
    )
    parser.add_argument("--out", default="-", help="file to write (default: stdout)")
    parser.add_argument(
        "--duration",
        type=float,
        help=f"seconds of log (default {DEFAULT_DURATION:g}); with --real-time, wall seconds "
        "to run (default: until interrupted)",
    )
    parser.add_argument("--seed", type=int, default=0, help="same seed, same log (default 0)")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=DEFAULT_ENGINE,
        help=f"the server to simulate (default {DEFAULT_ENGINE})",
    )
    defaults = ", ".join(f"{simulation(name).default_format} for {name}" for name in ENGINES)
    parser.add_argument(
        "--format-version",
        choices=[fmt for formats in FORMATS.values() for fmt in formats],
        help=f"how the stats lines are written (default: {defaults})",
    )
    parser.add_argument(
        "--envelope",
        choices=ENVELOPES,
        default="plain",
        help="plain lines, or as a container runtime stores them: cri or docker (default plain)",
    )
    parser.add_argument(
        "--log-requests",
        choices=("text", "json"),
        help="the server logs each finished request, in this format (where its engine can); "
        "the hidden-share scenario logs them as text unless told",
    )
    parser.add_argument("--real-time", action="store_true", help="pace lines like a live server")
    parser.add_argument("--speed", type=float, help="real-time speed factor (implies --real-time)")
    parser.add_argument(
        "--rate", type=float, help="decode lines per second, real-time (implies --real-time)"
    )
    parser.set_defaults(func=run)


def _positive(args: argparse.Namespace, name: str) -> None:
    value = getattr(args, name)
    if value is not None and not value > 0:
        raise UsageError(f"--{name} must be a positive number, got {value:g}")


def run(args: argparse.Namespace) -> int:
    for name in ("duration", "speed", "rate"):
        _positive(args, name)
    if args.speed is not None and args.rate is not None:
        raise UsageError("--rate and --speed both set the pace; give one of them")
    chosen = _playable(args)
    with _output(args.out) as out:
        if args.real_time or args.speed is not None or args.rate is not None:
            speed = args.speed or 1.0
            if args.rate is not None:
                speed = speed_for_rate(chosen, args.rate, simulation(args.engine))
            source = events(chosen, engine=args.engine, seed=args.seed, fmt=args.format_version)
            write_live(source, out, envelope=args.envelope, speed=speed, duration=args.duration)
        else:
            lines = generate(
                args.scenario,
                seed=args.seed,
                duration=args.duration or DEFAULT_DURATION,
                fmt=args.format_version,
                envelope=args.envelope,
                engine=args.engine,
                log_requests=args.log_requests,
            )
            out.writelines(line + "\n" for line in lines)
    return 0


def _playable(args: argparse.Namespace) -> Scenario:
    """The scenario as asked, which the engine must be able to play in the format asked;
    one line names what it can otherwise."""
    chosen = scenario(args.scenario)
    why = refusal(chosen, args.engine)
    if why is not None:
        known = ", ".join(playable(args.engine))
        raise UsageError(f"--scenario {args.scenario}: {why}; with {args.engine}: {known}")
    if args.log_requests is not None:
        chosen = logging_requests(chosen, args.log_requests)
        if (why := refusal(chosen, args.engine)) is not None:
            raise UsageError(f"--log-requests: {why}")
    formats = FORMATS[args.engine]
    if args.format_version is not None and args.format_version not in formats:
        raise UsageError(
            f"--format-version {args.format_version} is not {args.engine}'s; "
            f"known: {', '.join(formats)}"
        )
    return chosen


@contextmanager
def _output(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield sys.stdout
        return
    try:
        handle = open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--out: cannot write {path}: {exc.strerror}") from exc
    with handle:
        yield handle
