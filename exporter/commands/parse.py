"""``specwatch parse [--json] FILE...``: the stats records a log holds, one per line.

The same envelope decoder, marker filter and parser as the daemon, so what `parse` prints is
exactly what the exporter would have exported from that log: the tool to check a log from a
new SGLang release, or to feed records into other tools.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import TextIO

from exporter.commands import COMMANDS
from exporter.commands.usage import UsageError
from exporter.engines.record import StatsRecord
from exporter.engines.sglang import LogLine
from exporter.parse.pipeline import RecordSink
from exporter.parse.reader import ReadError, read_logs, require_readable

# (header, record attribute, width, decimals) of the readable table; widths fit SGLang's
# value ranges. Text columns are left-aligned, numbers right-aligned.
_COLUMNS: tuple[tuple[str, str, int, int | None], ...] = (
    ("time", "time", 23, None),
    ("kind", "kind", 7, None),
    ("dp", "dp_rank", 3, 0),
    ("tp", "tp_rank", 3, 0),
    ("run", "running_requests", 5, 0),
    ("queue", "queued_requests", 5, 0),
    ("usage", "token_usage", 5, 2),
    ("acc_len", "accept_length", 7, 2),
    ("acc_rate", "accept_rate", 8, 2),
    ("graph", "cuda_graph", 5, None),
    ("gen_tok/s", "gen_throughput", 10, 2),
    ("new_tok", "new_tokens", 7, 0),
    ("cached", "cached_tokens", 7, 0),
    ("in_tok/s", "input_throughput", 10, 2),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "parse",
        help=COMMANDS["parse"],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    p.add_argument("files", nargs="+", metavar="FILE", help="log file; '-' reads stdin")
    p.set_defaults(func=run)


class _PrintingSink(RecordSink):
    """Prints each record as it is found and counts the rest for the stderr summary."""

    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out = out
        self.as_json = as_json
        self.lines = 0
        self.records: Counter[str] = Counter()
        self.unrecognized = 0
        self.skipped: Counter[str] = Counter()

    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self.records[record.kind] += 1
        if self.as_json:
            self.out.write(json.dumps(record.to_json_dict()) + "\n")
        else:
            self.out.write(format_row(record) + "\n")

    def on_unrecognized(self, reason: str) -> None:
        self.unrecognized += 1

    def on_skipped(self, reason: str) -> None:
        self.skipped[reason] += 1

    def on_event(self, line: LogLine) -> None:
        """Startup events are the daemon's business; `parse` prints stats records only."""

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.records.items()))
        text = (
            f"{self.lines} lines read, {sum(self.records.values())} records"
            f"{f' ({kinds})' if kinds else ''}, {self.unrecognized} unrecognised"
        )
        if self.skipped:
            text += ", skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items()))
        return text


def format_row(record: StatsRecord) -> str:
    """One aligned table row; a value the line did not carry shows as ``-``."""
    return " ".join(
        _cell(getattr(record, attr), width, places) for _, attr, width, places in _COLUMNS
    )


def header_row() -> str:
    return " ".join(_cell(title, width, places) for title, _, width, places in _COLUMNS)


def _cell(value: object, width: int, places: int | None) -> str:
    align = "<" if places is None else ">"
    if value is None:
        value = "-"
    elif isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, float) and places:
        value = f"{value:.{places}f}"
    return f"{value!s:{align}{width}}"


def run(args: argparse.Namespace) -> int:
    sink = _PrintingSink(sys.stdout, args.json)
    try:
        require_readable(args.files)
        if not args.json:
            sys.stdout.write(header_row() + "\n")
        read_logs(args.files, sink)
    except ReadError as exc:
        raise UsageError(str(exc)) from None
    sys.stdout.flush()
    print(sink.summary(), file=sys.stderr)
    return 0
