"""The subcommands of ``specwatch``, one module each (see ``exporter.cli``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_baseline_flags(parser: argparse.ArgumentParser) -> None:
    """The baseline (spec section 11) and expected accept length, alike wherever they appear.

    ``run`` and ``report`` both judge throughput against a baseline; one definition keeps their
    flags, exclusivity and help identical.
    """
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--baseline-tok-s", type=float, metavar="N", help="tok/s without spec")
    group.add_argument("--baseline-curve", metavar="CURVE", help='e.g. "1:82,48:1500,128:2370"')
    group.add_argument("--baseline-bench", type=Path, metavar="FILE", help="bench_serving JSONL")
    parser.add_argument("--expected-accept-length", type=float, metavar="X")
