"""Every SGLang stats line of a batch read in one regex pass, and converted a column at a time.

A busy DP-attention node logs a decode line per rank every second, plus prefills; catching up
on its log, or reporting on it, went mostly to reading those lines one by one in Python. But
within one server run every line of a kind has the layout learnt from the previous one (see
``sglang``), so one pattern built from the learnt layouts finds and splits all of a batch's
stats lines in C, and ``int``/``float`` run over whole columns.

The chunk reader answers only when its answer is exactly the line-by-line reader's: every line
that could be a stats line (``] Decode batch`` / ``] Prefill batch``) matched the pattern,
and every value converted. Anything else (a new layout, an older header, a fractional stamp, a
Ray prefix, a garbage number) returns None, and the caller reads the batch line by line, which
defines the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, TypeVar

from exporter.engines.batch import KindColumns, StatsBatch
from exporter.engines.record import StatsRecord
from exporter.engines.sglang import (
    POOL_USAGES,
    RANK_LIST,
    TOKEN_USAGE,
    VALUE_FIELD_COUNT,
    LayoutColumns,
    SGLangLines,
    count_column,
    count_numbers,
    flag_column,
    iso_time,
    rank_numbers,
    real_column,
    real_numbers,
)

# Where a stats line's header meets its prefix; every stats line has one.
_STATS_HEADS = (b"] Decode batch", b"] Prefill batch")
# The prefix as the fast line reader takes it: whole seconds, a plain rank list.
_HEAD = rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(" + RANK_LIST.encode() + rb")\] "
_NEVER = rb"(?!)"
_IS_DECODE, _IS_PREFILL = b"D", b"P"
_VALUES_AT = 3  # the first group of decode's values: after the stamp, the ranks and the kind
_CACHE_SIZE = 4096  # distinct stamps (one a second) and rank lists kept; cleared when full
# A column this short is converted value by value: its repeats would not pay for a lookup.
_CACHED_ROWS = 64
# Why a long batch is read line by line instead (``specwatch_log_chunk_fallbacks_total``):
# no layout learnt yet (a source's first stats lines); the learnt layout keeps a value this
# reader does not convert by column (text such as ``timestamp:``, or a percentage such as
# ``cache hit rate: 12.5%``), so that whole log era is read line by line; a stats line in
# another layout (a new run's fields, an older header, a fractional-second stamp, a Ray
# prefix); a value a column could not convert; and, decided by the caller, bytes that are not
# UTF-8, a start-up event or server-end line among the lines, or terminal debris to clean.
FALLBACKS = (
    "unlearnt",
    "layout",
    "other_layout",
    "bad_value",
    "invalid_utf8",
    "events",
    "debris",
)

Row = tuple[bytes, ...]


class ChunkReader:
    """Reads a batch's stats lines with the pattern of the layouts learnt so far.

    The pattern also matches every other line with the same prefix, taking the first
    ``message_head`` bytes of its message: when every line of a batch matched, those heads
    are all a caller needs to search for messages that must be read line by line (startup
    events, which name their subject within their first words), not the whole batch. And it
    matches every newline, a line without the prefix as an empty row: the rows count the
    batch's lines, which costs no pass of its own.
    """

    def __init__(self, lines: SGLangLines, message_head: int) -> None:
        self._lines = lines  # the source's line reader, whose learnt layouts are used here
        self._message_head = message_head
        self._key: tuple[LayoutColumns | None, LayoutColumns | None] | None = None
        self._pattern: re.Pattern[bytes] | None = None
        self._unmatched: Row = ()  # the row of a line without the prefix: every group empty
        self._times = _Parsed(iso_time)
        # The DP, TP and PP rank of a rank list, a cache each: three C lookups per row.
        self._dp = _Parsed(_rank_number(0))
        self._tp = _Parsed(_rank_number(1))
        self._pp = _Parsed(_rank_number(2))
        self._values = _Values()

    def stamps(self) -> Callable[[bytes], str]:
        """Logged stamps (``2026-02-23 00:14:33``) as ``iso_time`` reads them, through the
        reader's cache of them, for a batch's other lines: the finished requests' lines share
        their seconds too."""
        self._times.bound()
        return self._times.__getitem__

    def read(self, blob: bytes, ascii: bool) -> tuple[int, StatsBatch, bytes | None] | str:
        """How many tidy lines ``blob`` holds (each between two ``\n``; ``ascii``: all its
        bytes are), their records in line order, and the other lines' message heads when
        every line has the plain prefix: the text in which the caller must find no startup
        event instead of the whole blob (None). Else why it must be read line by line (one of
        ``FALLBACKS``)."""
        decode = self._lines.learnt_columns("decode")
        prefill = self._lines.learnt_columns("prefill")
        if decode is None and prefill is None:
            learnt = self._lines.learnt("decode") or self._lines.learnt("prefill")
            return "layout" if learnt else "unlearnt"
        rows: list[Row] = self._compiled(decode, prefill).findall(blob)
        rows.pop()  # the blob's closing newline, which opens no line
        kinds = list(map(itemgetter(2), rows))
        if ascii and not rows.count(self._unmatched):  # every line has the plain prefix
            heads: bytes | None = b"\n".join(map(itemgetter(-1), rows))
        else:
            heads = None
            if len(rows) - kinds.count(b"") != sum(blob.count(head) for head in _STATS_HEADS):
                return "other_layout"  # a line that might be a stats line did not match
        # Comprehensions: a bound ``bytes.__eq__`` per row cost twice their compare.
        decodes = [row for row in rows if row[2] == _IS_DECODE]
        prefills = [row for row in rows if row[2] == _IS_PREFILL]
        decoded = self._columns("decode", decode, _VALUES_AT, decodes)
        prefill_at = _VALUES_AT + (0 if decode is None else decode.groups)
        prefilled = self._columns("prefill", prefill, prefill_at, prefills)
        if decoded is None or prefilled is None:
            return "bad_value"
        # The kinds in line order, a byte each, needed only where the batch holds both.
        order = b"".join(kinds) if decodes and prefills else b""
        return len(rows), StatsBatch(order, decoded, prefilled), heads

    def _compiled(
        self, decode: LayoutColumns | None, prefill: LayoutColumns | None
    ) -> re.Pattern[bytes]:
        """One pattern for every newline: where the plain prefix follows, group 2 is ``D`` for
        a decode line, ``P`` for a prefill line, followed by decode's values, then prefill's;
        the last group is another line's message head. A line without the prefix, or a stats
        line in another layout, matches no group."""
        if self._pattern is None or self._key != (decode, prefill):
            decode_body = _NEVER if decode is None else decode.body
            prefill_body = _NEVER if prefill is None else prefill.body
            stats = rb"([DP])(?:ecode batch, " + decode_body + rb"(?=\n)"
            stats += rb"|refill batch, " + prefill_body + rb"(?=\n))"
            other = rb"(?!Decode batch|Prefill batch)([^\n]{0,%d})" % self._message_head
            pattern = re.compile(rb"\n(?:" + _HEAD + rb"(?:" + stats + rb"|" + other + rb")|)")
            self._pattern, self._unmatched = pattern, (b"",) * pattern.groups
            self._key = (decode, prefill)
        return self._pattern

    def _columns(
        self, kind: str, layout: LayoutColumns | None, first: int, rows: list[Row]
    ) -> KindColumns | None:
        """The record fields of one kind's rows, by column; ``first`` is the group its
        layout's values start at. None if a value does not convert."""
        if not rows or layout is None:
            return KindColumns(0, _NO_COLUMNS, (kind, *_NO_CONSTANTS[1:]))
        columns = list(zip(*rows, strict=True))  # one pass, not one per group
        records = self._values.converted(layout, layout.records, columns, first)
        extras = self._values.converted(layout, layout.extras, columns, first)
        if records is None or extras is None:
            return None
        values: list[Sequence[Any] | None] = [None] * VALUE_FIELD_COUNT
        for position, column in records.items():
            values[position] = column
        pools = [list(extras[key]) for key in POOL_USAGES if key in extras]
        if pools and TOKEN_USAGE not in records:  # hybrid pools: the fullest, as sglang.py
            values[TOKEN_USAGE] = list(map(max, *pools)) if len(pools) > 1 else pools[0]
        stamps, ranks = columns[0], columns[1]
        caches = (self._times, self._dp, self._tp, self._pp)
        for cache in caches:
            cache.bound()
        # Rows with no extras share one dict: records never change theirs.
        extra: list[dict[str, Any]] | None = _extra_dicts(extras) if extras else None
        return KindColumns(
            len(rows),
            (
                None,
                list(map(self._times.__getitem__, stamps)),
                None,
                list(map(self._dp.__getitem__, ranks)),
                list(map(self._tp.__getitem__, ranks)),
                list(map(self._pp.__getitem__, ranks)),
                *values,
                extra,
            ),
            (kind, *_NO_CONSTANTS[1:-1], {}),
        )


# A kind's record fields where no row has a value of its own: the kind, "sglang", else None.
_NO_CONSTANTS: tuple[Any, ...] = (None, None, "sglang", *repeat(None, len(StatsRecord._fields) - 3))
_NO_COLUMNS: tuple[None, ...] = (None,) * len(StatsRecord._fields)

_T = TypeVar("_T")
_K = TypeVar("_K", int, str)


class _Parsed(dict[bytes, _T]):
    """``parse`` of each key, kept: a batch holds few distinct stamps (one a second) and rank
    lists (one per rank), so each is parsed about once. A key not seen yet is parsed by
    ``__missing__``, so a column's lookups are one C pass (``map(cache.__getitem__, ...)``)
    with no pass of its own to find the new keys first."""

    def __init__(self, parse: Callable[[bytes], _T]) -> None:
        super().__init__()
        self._parse = parse

    def __missing__(self, key: bytes) -> _T:
        value = self[key] = self._parse(key)
        return value

    def bound(self) -> None:
        """Forget every key once ``_CACHE_SIZE`` are kept, before a batch's lookups (a batch
        adds at most its rows)."""
        if len(self) >= _CACHE_SIZE:
            self.clear()


def _rank_number(index: int) -> Callable[[bytes], int | None]:
    """The DP (0), TP (1) or PP (2) rank of a rank list's bytes."""

    def number(ranks: bytes) -> int | None:
        return rank_numbers(ranks.decode("ascii"))[index]

    return number


def _extra_dicts(extras: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The rows' extras, keys in line order as the line reader's. Rows with the same extras
    share one dict: records never change theirs (``extra`` is a read-only ``Mapping``), and a
    busy node's prefill lines keep one of few values (#new-seq)."""
    if len(extras) == 1:
        ((key, column),) = extras.items()
        return list(map(_Shared(key).__getitem__, column))
    keys = list(extras)
    return [dict(zip(keys, row, strict=True)) for row in zip(*extras.values(), strict=True)]


class _Shared(dict[Any, dict[str, Any]]):
    """``{key: value}`` of each value, made once per distinct value of a batch."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self._key = key

    def __missing__(self, value: Any) -> dict[str, Any]:
        extra = self[value] = {self._key: value}
        return extra


class _Values:
    """Numbers converted once per distinct text, for the columns whose values repeat.

    Most of a stats line's values take few distinct texts (running and queued requests,
    token usage, accept length and rate, new sequences): a dict lookup costs about half an
    ``int`` or ``float`` of the bytes, and the records then share one number object each.
    A column whose values seldom repeat (throughputs, token counts) is found so in one batch
    and converted value by value from then on. Either way each value is ``int`` or ``float``
    of its text, as the line reader converts it.
    """

    def __init__(self) -> None:
        self._ints: _Parsed[int] = _Parsed(int)
        self._reals: _Parsed[float] = _Parsed(float)
        # (layout, group) of the columns whose values seldom repeat: converted value by value.
        self._direct: set[tuple[int, int]] = set()

    def converted(
        self,
        layout: LayoutColumns,
        entries: tuple[tuple[int, _K, str], ...],
        columns: list[Row],
        first: int,
    ) -> dict[_K, list[Any]] | None:
        """Each entry's (group, key, converter) column converted, by key, or None if one
        fails."""
        converted: dict[_K, list[Any]] = {}
        for group, key, converter in entries:
            column = self._convert(converter, columns[first + group], (id(layout), group))
            if column is None:
                return None
            converted[key] = column
        return converted

    def _convert(
        self, converter: str, column: Sequence[bytes], key: tuple[int, int]
    ) -> list[Any] | None:
        """A column's values as the line reader converts each, or None if any would fail
        there (``int`` and ``float`` raise ValueError through the cache as without it)."""
        if converter == "flag":
            return flag_column(column)
        try:
            if len(column) < _CACHED_ROWS or key in self._direct:
                return count_column(column) if converter == "int" else real_column(column)
            if converter == "int":
                return count_numbers(self._through(self._ints, column, key))
            return real_numbers(self._through(self._reals, column, key))
        except ValueError:
            return None

    def _through(
        self, cache: _Parsed[_T], column: Sequence[bytes], key: tuple[int, int]
    ) -> list[_T]:
        """``column`` converted through ``cache``; a column that added more than an eighth of
        its length of new texts is converted value by value from now on."""
        cache.bound()
        before = len(cache)
        values = list(map(cache.__getitem__, column))
        if len(cache) - before > len(column) >> 3:
            self._direct.add(key)
        return values


if len(StatsRecord._fields) != 6 + VALUE_FIELD_COUNT + 1:
    raise TypeError("StatsRecord's fields changed: update the chunk reader's rows")
