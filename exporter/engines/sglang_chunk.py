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
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from math import isfinite
from operator import itemgetter, not_
from typing import Any, TypeVar

from exporter.engines.record import StatsRecord, record_from_row
from exporter.engines.sglang import (
    RANK_LIST,
    RAW_BOOLS,
    TOKEN_USAGE,
    VALUE_FIELD_COUNT,
    LayoutColumns,
    iso_time,
    learnt_columns,
    rank_numbers,
)

# Where a stats line's header meets its prefix; every stats line has one.
_STATS_HEADS = (b"] Decode batch", b"] Prefill batch")
# The prefix as the fast line reader takes it: whole seconds, a plain rank list.
_HEAD = rb"\n\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(" + RANK_LIST.encode() + rb")\] "
_NEVER = rb"(?!)"
_CACHE_SIZE = 4096  # distinct stamps (one a second) and rank lists kept; cleared when full

Row = tuple[bytes, ...]


class ChunkReader:
    """Reads a batch's stats lines with the pattern of the layouts learnt so far."""

    def __init__(self) -> None:
        self._key: tuple[LayoutColumns | None, LayoutColumns | None] | None = None
        self._pattern: re.Pattern[bytes] | None = None
        self._times: dict[bytes, str] = {}
        self._ranks: dict[bytes, tuple[int | None, int | None]] = {}

    def read(self, blob: bytes) -> list[StatsRecord] | None:
        """The records of ``blob`` (tidy lines, no startup events, each line between two
        ``\\n``), in line order, or None: read it line by line."""
        expected = sum(blob.count(head) for head in _STATS_HEADS)
        if not expected:
            return []
        decode, prefill = learnt_columns("decode"), learnt_columns("prefill")
        if decode is None and prefill is None:
            return None
        rows: list[Row] = self._compiled(decode, prefill).findall(blob)
        if len(rows) != expected:
            return None  # a line that might be a stats line did not match: read each line
        kinds = _column(rows, 2)  # b"D" for a decode line, b"" for a prefill line
        decodes = list(compress(rows, kinds))
        prefills = list(compress(rows, map(not_, kinds))) if len(decodes) < len(rows) else []
        decoded = self._records("decode", decode, 3, decodes)
        after_decode = 3 + (0 if decode is None else decode.groups)
        prefilled = self._records("prefill", prefill, after_decode, prefills)
        if decoded is None or prefilled is None:
            return None
        if not prefills or not decodes:
            return decoded or prefilled
        by_kind = {b"D": iter(decoded), b"": iter(prefilled)}
        return list(map(next, map(by_kind.__getitem__, kinds)))  # back in line order

    def _compiled(
        self, decode: LayoutColumns | None, prefill: LayoutColumns | None
    ) -> re.Pattern[bytes]:
        """One pattern for both kinds; group 3 onwards are decode's values, then prefill's."""
        if self._pattern is None or self._key != (decode, prefill):
            decode_body = _NEVER if decode is None else decode.body
            prefill_body = _NEVER if prefill is None else prefill.body
            alternatives = rb"(?:(D)ecode batch, " + decode_body
            alternatives += rb"|Prefill batch, " + prefill_body + rb")"
            self._pattern = re.compile(_HEAD + alternatives + rb"(?=\n)")
            self._key = (decode, prefill)
        return self._pattern

    def _records(
        self, kind: str, layout: LayoutColumns | None, first: int, rows: list[Row]
    ) -> list[StatsRecord] | None:
        """Records of one kind's rows; ``first`` is the group its layout's values start at."""
        if not rows or layout is None:
            return []
        records = _converted(layout.records, rows, first)
        extras = _converted(layout.extras, rows, first)
        if records is None or extras is None:
            return None
        values: list[Iterable[Any]] = [repeat(None)] * VALUE_FIELD_COUNT
        for position, column in records.items():
            values[position] = column
        if "full_token_usage" in extras and TOKEN_USAGE not in records:
            values[TOKEN_USAGE] = extras["full_token_usage"]  # hybrid pools log only this one
        ranks = _looked_up(self._ranks, _column(rows, 1), _rank_numbers)
        fields = zip(
            repeat(kind),
            _looked_up(self._times, _column(rows, 0), iso_time),
            repeat("sglang"),
            map(itemgetter(0), ranks),
            map(itemgetter(1), ranks),
            *values,
            _extra_dicts(extras, len(rows)),
        )
        return list(map(record_from_row, fields))


_T = TypeVar("_T")
_K = TypeVar("_K", int, str)


def _looked_up(
    cache: dict[bytes, _T], keys: Sequence[bytes], parse: Callable[[bytes], _T]
) -> list[_T]:
    """``parse`` of each key, through a bounded cache: a batch holds few distinct stamps (one
    a second) and rank lists (one per rank), so each is parsed about once."""
    missing = set(keys).difference(cache)
    if len(cache) + len(missing) > _CACHE_SIZE:
        cache.clear()
        missing = set(keys)
    for key in missing:
        cache[key] = parse(key)
    return list(map(cache.__getitem__, keys))


def _rank_numbers(ranks: bytes) -> tuple[int | None, int | None]:
    return rank_numbers(ranks.decode("ascii"))


def _column(rows: list[Row], group: int) -> list[bytes]:
    return list(map(itemgetter(group), rows))


def _converted(
    entries: tuple[tuple[int, _K, str], ...], rows: list[Row], first: int
) -> dict[_K, list[Any]] | None:
    """Each entry's (group, key, converter) column converted, by key, or None if one fails."""
    converted: dict[_K, list[Any]] = {}
    for group, key, converter in entries:
        column = _convert(converter, _column(rows, first + group))
        if column is None:
            return None
        converted[key] = column
    return converted


def _extra_dicts(extras: dict[str, list[Any]], count: int) -> list[dict[str, Any]]:
    """One fresh dict per row (records own theirs), keys in line order as the line reader's."""
    if not extras:
        return [{} for _ in range(count)]
    if len(extras) == 1:  # prefill lines keep one (#new-seq): a third of the cost
        ((key, column),) = extras.items()
        return [{key: value} for value in column]
    keys = list(extras)
    return [dict(zip(keys, row, strict=True)) for row in zip(*extras.values(), strict=True)]


def _convert(converter: str, column: Sequence[bytes]) -> list[Any] | None:
    """A column's values as the line reader converts each, or None if any would fail there."""
    try:
        if converter == "int":
            return list(map(int, column))
        if converter == "real":
            numbers = list(map(float, column))
            return numbers if all(map(isfinite, numbers)) else None
    except ValueError:
        return None
    flags = list(map(RAW_BOOLS.get, column))
    return None if None in flags else flags


if len(StatsRecord._fields) != 5 + VALUE_FIELD_COUNT + 1:
    raise TypeError("StatsRecord's fields changed: update the chunk reader's rows")
