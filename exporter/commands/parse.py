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
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import TextIO

from exporter.commands import COMMANDS
from exporter.commands.usage import UsageError
from exporter.engines.record import LogLine, StatsRecord
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
_WIDTHS = tuple(width for _, _, width, _ in _COLUMNS)
_PLACES = tuple(places for _, _, _, places in _COLUMNS)
_VALUES = itemgetter(*(StatsRecord._fields.index(attr) for _, attr, _, _ in _COLUMNS))
_GRAPH = [attr for _, attr, _, _ in _COLUMNS].index("cuda_graph")
_KIND = attrgetter("kind")


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


_Text = Callable[[Sequence[StatsRecord]], str]


class PrintingSink(RecordSink):
    """Prints the records it is given and counts the rest for the stderr summary.

    A read's records come together (``on_records``) and are printed with one ``write`` and
    one count of kinds instead of one per record: a busy log holds hundreds of thousands of
    them. Nothing is held back, so ``tail -f log | specwatch parse -`` prints as lines come.
    """

    def __init__(self, out: TextIO, as_json: bool) -> None:
        self.out = out
        self._text: _Text = _json_lines if as_json else _Table().rows
        self.lines = 0
        self.records: Counter[str] = Counter()
        self.unrecognized = 0
        self.skipped: Counter[str] = Counter()

    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self.on_records([record])

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        self.records.update(map(_KIND, records))
        self.out.write(self._text(records))

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


def _json_lines(records: Sequence[StatsRecord]) -> str:
    return "\n".join([*map(json.dumps, map(StatsRecord.to_json_dict, records)), ""])


_Row = Callable[[tuple[object, ...]], str]
_MAX_SHAPES = 256


class _Table:
    """Table rows by one ``%`` template per shape of row instead of a formatting step per
    cell: a log's rows come in a handful of shapes (which columns are None or floats, the
    graph flag's word), and one template call per row is several times cheaper.
    """

    def __init__(self) -> None:
        self._rows: dict[tuple[object, ...], _Row] = {}

    def rows(self, records: Sequence[StatsRecord]) -> str:
        """The records' rows, each ended by a newline."""
        known = self._rows
        if len(known) > _MAX_SHAPES:  # a log has a handful; never let odd input grow it
            known.clear()
        rows = []
        for values in map(_VALUES, records):
            # Types decide each cell's conversion; a boolean prints as a word, so which word
            # the graph flag prints is part of the shape too.
            shape = (*map(type, values), values[_GRAPH] is True)
            row = known.get(shape) or known.setdefault(shape, _row_for(values))
            rows.append(row(values))
        rows.append("")
        return "\n".join(rows)


def _row_for(values: tuple[object, ...]) -> _Row:
    """The row of every value tuple shaped like ``values``.

    A cell whose text its shape fixes (None, the graph flag) is that text, and takes its
    value with ``%.0s`` (which prints nothing) so the template takes the whole tuple. A
    boolean outside the graph column (the parser makes none) is not in the shape: such rows
    are made cell by cell.
    """
    cells = []
    for column, (value, width, places) in enumerate(zip(values, _WIDTHS, _PLACES, strict=True)):
        if value is None or (column == _GRAPH and isinstance(value, bool)):
            cells.append(_cell(value, width, places).replace("%", "%%") + "%.0s")
        elif isinstance(value, bool):
            return _cells_row
        elif isinstance(value, float) and places:
            cells.append(f"%{width}.{places}f")
        else:
            cells.append(f"%{'-' if places is None else ''}{width}s")
    return " ".join(cells).__mod__


def header_row() -> str:
    return _cells_row(tuple(title for title, _, _, _ in _COLUMNS))


def _cells_row(values: tuple[object, ...]) -> str:
    """One aligned row, a cell at a time: the definition the templates of ``_Table`` follow."""
    return " ".join(map(_cell, values, _WIDTHS, _PLACES))


def _cell(value: object, width: int, places: int | None) -> str:
    """A value the line did not carry shows as ``-``."""
    align = "<" if places is None else ">"
    if value is None:
        value = "-"
    elif isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, float) and places:
        value = f"{value:.{places}f}"
    return f"{value!s:{align}{width}}"


def run(args: argparse.Namespace) -> int:
    sink = PrintingSink(sys.stdout, args.json)
    if "-" in args.files:  # a live pipe: each read's rows go out as it is printed
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
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
