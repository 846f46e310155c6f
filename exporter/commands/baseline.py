"""``specwatch baseline FILE...``: a non-speculative baseline curve learned from a plain log.

Give it a log of the same model on the same hardware served *without* speculative decoding:
an old log from before speculation was switched on, or a canary's (any engine, any format
specwatch reads). It prints the curve by load band, with the decode windows behind each
point, as a ``--baseline-curve`` value and as a ``baseline:`` config block. A band with fewer
than --min-windows windows gives no point. A log that speculates is refused, with the reason.
``run``, ``doctor`` and ``report`` also read such a log directly: --baseline-log FILE.
"""

from __future__ import annotations

import argparse
import json
import sys

from exporter.analysis.baseline import BaselineError
from exporter.analysis.load_bands import BAND_LABELS
from exporter.analysis.plain_speed import MIN_BAND_WINDOWS, LearnedPoint, curve_text
from exporter.commands import COMMANDS
from exporter.commands.usage import UsageError
from exporter.report.learn import LearnedLog, learn_log


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "baseline",
        help=COMMANDS["baseline"],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="log files in order ('-' = stdin)")
    p.add_argument(
        "--min-windows",
        type=_at_least_one,
        default=MIN_BAND_WINDOWS,
        metavar="N",
        help=f"decode windows a load band needs to give a point (default {MIN_BAND_WINDOWS})",
    )
    p.add_argument("--json", action="store_true", help="print the curve as JSON")
    p.set_defaults(func=main)


def _at_least_one(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def main(args: argparse.Namespace) -> int:
    try:
        learned = learn_log(args.files, args.min_windows)
    except BaselineError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(_json(learned, args.min_windows), indent=2))
    else:
        sys.stdout.write(render(learned, args.min_windows))
    return 0


def _json(learned: LearnedLog, minimum: int) -> dict[str, object]:
    return {
        "files": list(learned.paths),
        "decode_windows": learned.decode_windows,
        "min_windows": minimum,
        "points": [
            {"band": p.band, "running": p.running, "tok_s": p.tok_s, "windows": p.windows}
            for p in learned.points
        ],
        "curve": curve_text(learned.points),
    }


def render(learned: LearnedLog, minimum: int) -> str:
    """The curve for a human, then the two forms to paste."""
    curve = curve_text(learned.points)
    names = ", ".join(learned.paths)
    lines = [
        f"Baseline learned from {names}: {learned.decode_windows:,} decode windows "
        "without speculation.",
        "",
        f"  {'band':<9}{'running':>9}{'tok/s':>10}{'windows':>9}",
        *(_row(point) for point in learned.points),
    ]
    thin = _thin_bands(learned, minimum)
    if thin:
        lines += ["", f"Left out, under {minimum} windows each: {thin}."]
    lines += [
        "",
        "As a flag of run, doctor or report:",
        f'  --baseline-curve "{curve}"',
        "",
        "As a target's block in the config file:",
        "  baseline:",
        f'    curve: "{curve}"',
        "",
        f"Or have specwatch read the log itself: --baseline-log {learned.paths[0]}",
        "(config: baseline: {log: FILE}); it then judges only the bands above.",
        "",
    ]
    return "\n".join(lines)


def _row(point: LearnedPoint) -> str:
    return f"  {point.band:<9}{point.running:>9.1f}{point.tok_s:>10,.0f}{point.windows:>9,}"


def _thin_bands(learned: LearnedLog, minimum: int) -> str:
    thin = [
        f"{label} ({band.windows})"
        for label, band in zip(BAND_LABELS, learned.speed.bands, strict=True)
        if 0 < band.windows < minimum
    ]
    return ", ".join(thin)
