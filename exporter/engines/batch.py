"""A batch's stats records held by column, each record built only where one is read.

The chunk reader (``sglang_chunk``) splits a batch's stats lines into columns and converts
each column in C. Building a record per line from them cost about as much again as the
conversion, and a report reads few of them: it folds its sums, counts, node moments and
histogram straight from the columns (``report.builder``), and needs whole records only for
the newest lines and a sample. Every other reader (the daemon's state, ``parse``, a range
helper's spool) iterates the batch as any sequence, which builds all its records once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import islice, repeat
from typing import Any, overload

from exporter.engines.record import StatsRecord, record_from_row

FIELDS = StatsRecord._fields
(KIND, TIME, ENGINE, DP_RANK, TP_RANK, PP_RANK, RUNNING, QUEUED) = range(8)
ACCEPT_LENGTH = FIELDS.index("accept_length")
CUDA_GRAPH = FIELDS.index("cuda_graph")
GEN_THROUGHPUT = FIELDS.index("gen_throughput")
DRAFT_COUNTS = FIELDS.index("draft_counts")
EXTRA = FIELDS.index("extra")
if FIELDS[:8] != (
    "kind", "time", "engine", "dp_rank", "tp_rank", "pp_rank", "running_requests",
    "queued_requests",
):  # fmt: skip
    raise TypeError("StatsRecord's fields changed: update the batch's field positions")


class KindColumns(Sequence[StatsRecord]):
    """One kind's rows of a batch: per record field, the column of every row's value, or
    None where every row has the same value, ``constants``'s. As a sequence, its records,
    each built when read."""

    __slots__ = ("columns", "constants", "rows")

    def __init__(
        self, rows: int, columns: tuple[Sequence[Any] | None, ...], constants: tuple[Any, ...]
    ) -> None:
        self.rows = rows
        self.columns = columns
        self.constants = constants

    def __len__(self) -> int:
        return self.rows

    @overload
    def __getitem__(self, index: int) -> StatsRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[StatsRecord]: ...

    def __getitem__(self, index: int | slice) -> StatsRecord | Sequence[StatsRecord]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.rows)
            if step == 1:
                return self.records(start, stop)
            return self.records()[index]
        if not -self.rows <= index < self.rows:
            raise IndexError("row out of range")
        row = index % self.rows  # a sample's record: no column sliced for it
        fields = zip(self.columns, self.constants, strict=True)
        return record_from_row([c if v is None else v[row] for v, c in fields])

    def column(self, field: int) -> Sequence[Any]:
        """Every row's value of the record field at position ``field``."""
        column = self.columns[field]
        return [self.constants[field]] * self.rows if column is None else column

    def same(self, field: int) -> bool:
        """Whether every row has the one value ``constants`` holds for ``field``."""
        return self.columns[field] is None

    def records(self, start: int = 0, stop: int | None = None) -> list[StatsRecord]:
        """The records of rows ``start`` to ``stop`` (the last by default), in row order."""
        stop = self.rows if stop is None else stop
        if start >= stop:
            return []
        whole = start == 0 and stop == self.rows
        fields = zip(self.columns, self.constants, strict=True)
        columns = (repeat(c) if v is None else v if whole else v[start:stop] for v, c in fields)
        return list(map(record_from_row, islice(zip(*columns, strict=False), stop - start)))


# A line's kind in a batch's order: the byte the chunk reader's pattern matched.
_DECODE, _PREFILL = b"D", b"P"


class StatsBatch(Sequence[StatsRecord]):
    """A batch's stats records in line order: its decode rows and prefill rows, and which
    kind each line was, one byte a line (``D`` or ``P``), as the chunk reader found them.
    Iterating or slicing it whole builds every record once; an index or a short slice builds
    only those."""

    __slots__ = ("_order", "_records", "decodes", "prefills")

    def __init__(self, order: bytes, decodes: KindColumns, prefills: KindColumns) -> None:
        self.decodes = decodes
        self.prefills = prefills
        self._order = order  # empty where the batch holds one kind only
        self._records: list[StatsRecord] | None = None

    def __len__(self) -> int:
        return self.decodes.rows + self.prefills.rows

    def __iter__(self) -> Iterator[StatsRecord]:
        return iter(self._all())

    @overload
    def __getitem__(self, index: int) -> StatsRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[StatsRecord]: ...

    def __getitem__(self, index: int | slice) -> StatsRecord | Sequence[StatsRecord]:
        if self._records is not None:
            return self._records[index]
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1 or 2 * (stop - start) > len(self):
                return self._all()[index]
            return self._merged(start, stop, KindColumns.records)
        if not -len(self) <= index < len(self):
            raise IndexError("batch index out of range")
        at = index % len(self)
        record: StatsRecord = self._merged(at, at + 1, KindColumns.records)[0]
        return record

    def column(self, field: int, start: int = 0) -> list[Any]:
        """Every line's value of the record field at position ``field``, in line order, from
        line ``start``."""
        return self._merged(start, len(self), _column(field))

    def value(self, field: int, at: int) -> Any:
        """Line ``at``'s value of the record field at position ``field``: an index out of
        range raises, as a list's does (wrapped around, it read another line's value)."""
        if not -len(self) <= at < len(self):
            raise IndexError("batch index out of range")
        at %= len(self)
        return self._merged(at, at + 1, _column(field))[0]

    def recent_start(self, decodes: int) -> int:
        """Where the last ``decodes`` decode lines begin (0 if fewer), found in C."""
        if not self._order:
            return self.decodes.rows - decodes if self.decodes.rows >= decodes else 0
        end = len(self._order)
        for _ in range(decodes):
            end = self._order.rfind(_DECODE, 0, end)
            if end < 0:
                return 0
        return end

    def _merged(
        self, start: int, stop: int, part: Callable[[KindColumns, int, int], list[Any]]
    ) -> list[Any]:
        """``part`` of each kind's rows of lines ``start`` to ``stop``, merged in line order:
        a line's row is the count of the lines of its kind before it."""
        order = self._order
        if not order:
            return part(self.decodes if self.decodes.rows else self.prefills, start, stop)
        decode, decode_end = order.count(_DECODE, 0, start), order.count(_DECODE, 0, stop)
        prefill, prefill_end = start - decode, stop - decode_end
        by_kind = {
            _DECODE[0]: iter(part(self.decodes, decode, decode_end)),
            _PREFILL[0]: iter(part(self.prefills, prefill, prefill_end)),
        }
        return list(map(next, map(by_kind.__getitem__, order[start:stop])))

    def _all(self) -> list[StatsRecord]:
        """Every record in line order, built once."""
        if self._records is None:
            self._records = self._merged(0, len(self), KindColumns.records)
        return self._records


def _column(field: int) -> Callable[[KindColumns, int, int], list[Any]]:
    """A kind's values of one record field, of its rows ``start`` to ``stop``."""

    def values(rows: KindColumns, start: int, stop: int) -> list[Any]:
        column = rows.columns[field]
        if column is None:
            return [rows.constants[field]] * (stop - start)
        return list(column[start:stop])

    return values
