"""SGLang scheduler stats lines (``Decode batch`` / ``Prefill batch``) of every era since v0.4.

SGLang has added, removed, renamed and reordered fragments of these lines many times (headers
``Decode batch.`` / ``Decode batch [N],`` / ``Decode batch,``; hybrid SWA/SSM usage; PD fields;
``largest-len``; a ``timestamp:`` suffix; a trailing ``, `` in some releases; the graph label by
device; MFU and occupancy suffixes). What stayed stable is ``name: value`` pairs separated by
``, ``. So fields are read by name, unknown names are ignored, and a release that moves a field
keeps working.

A line is a stats line only when the header follows SGLang's own ``[date time ranks]`` prefix
directly: request logs echo user prompts, and a prompt may well contain "Decode batch, accept
len: 9.99".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any, TypeVar

from exporter.engines.record import LogLine, StatsRecord, Unrecognized

NAME = "sglang"
# Decode batches between two of its decode lines unless --decode-log-interval says otherwise.
DECODE_LOG_INTERVAL = 40
# Marker -> record kind; the pipeline reads a line with a stats marker as that kind first.
STATS_KINDS: dict[bytes, str] = {b"Decode batch": "decode", b"Prefill batch": "prefill"}
STATS_MARKERS: tuple[bytes, ...] = tuple(STATS_KINDS)
EVENT_MARKERS: tuple[bytes, ...] = (
    b"server_args=",
    b"Load weight end.",
    b"max_total_num_tokens=",
    b"fired up and ready",
    b"Max running requests is reset",
    b"AdaptiveSpeculativeParams initialized",
    b"Adaptive spec params updated",
    b"Switch adaptive runtime state",
)

# Optional Ray actor tag, then "[YYYY-MM-DD HH:MM:SS(.mmm)? RANK...] message". Rank names are
# matched generically (DP, PP, ATTN_CP, MOE_DP, TP, EP so far) so a new parallelism kind or a
# reordering in a future release still parses. Every digit run read as a number is bounded:
# int() refuses more than 4,300 digits, and a line must never raise out of the parser.
RANK_LIST = r"(?: [A-Z][A-Z_]*\d{1,9})*"
_PREFIX = re.compile(
    r"(?:\((?:[^()\s]+ )?pid=\d+(?:, ip=[^()\s]*)?\) )?"
    rf"\[(\d{{4}}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:[.,](\d{{1,6}}))?({RANK_LIST})\] ?"
)
_RANK = re.compile(r" ([A-Z][A-Z_]*?)(\d+)")
# Ray folds repeated lines and says so at the end of the message.
_RAY_REPEAT = re.compile(r" \[repeated \d+x across cluster\]$")
_HEADER = re.compile(r"(Decode|Prefill) batch(?:\.|,| ?\[(\d{1,18})\],?) ")


_Head = tuple[str, "int | None", "int | None", "int | None"]
_Ranks = tuple["int | None", "int | None", "int | None"]


def _parse_head(head: str) -> _Head | tuple[()]:
    """(ISO time, DP rank, TP rank, PP rank) of a prefix text, or ``()`` when it is not
    SGLang's."""
    match = _PREFIX.fullmatch(head)
    if match is None:
        return ()
    date, clock, fraction, ranks = match.groups()
    time = f"{date}T{clock}.{fraction}" if fraction else f"{date}T{clock}"
    return (time, *rank_numbers(ranks))


@functools.lru_cache(maxsize=256)
def rank_numbers(ranks: str) -> _Ranks:
    """(DP, TP, PP) of a rank list such as `` DP3 PP1 TP3 EP3``: a process logs the same one
    always."""
    named = {name: int(number) for name, number in _RANK.findall(ranks)}
    return named.get("DP"), named.get("TP"), named.get("PP")


def _record(
    kind: str, head: _Head, values: list[Any], extra: dict[str, Any]
) -> StatsRecord | Unrecognized:
    """The record of a read body: both the text and the raw-bytes readers end here."""
    if values[TOKEN_USAGE] is None:
        pools = [extra[key] for key in POOL_USAGES if key in extra]
        if pools:
            values[TOKEN_USAGE] = max(pools)
    if values.count(None) == len(values):
        return Unrecognized("no_fields")
    values.append(extra)  # the last field: one starred list is what a type checker can follow
    return StatsRecord(kind, head[0], "sglang", head[1], head[2], head[3], *values)


# StatsRecord's value fields, in the order its constructor takes them between
# (kind, time, engine, dp_rank, tp_rank, pp_rank) and extra. Readers fill a list in this order
# and the record is built from positional arguments, which costs about half of keyword
# arguments (the hot path, see bench/). A field a line does not carry stays None, the record's
# default.
_LEADING_FIELDS = ("kind", "time", "engine", "dp_rank", "tp_rank", "pp_rank")
_RECORD_FIELDS = StatsRecord._fields
if _RECORD_FIELDS[: len(_LEADING_FIELDS)] != _LEADING_FIELDS or _RECORD_FIELDS[-1] != "extra":
    # Fail at import, not by filling the wrong attributes of every record.
    raise TypeError("StatsRecord's field order changed: update the positional call in _stats")
_VALUE_FIELDS: tuple[str, ...] = _RECORD_FIELDS[len(_LEADING_FIELDS) : -1]
VALUE_FIELD_COUNT = len(_VALUE_FIELDS)
_POSITION = {name: position for position, name in enumerate(_VALUE_FIELDS)}
TOKEN_USAGE = _POSITION["token_usage"]
# A hybrid model's pools (full attention, sliding window, mamba state) each log their usage and
# no plain ``token usage``: the node's is the fullest, as SGLang's own token_usage gauge says
# (``get_max_pool_usage``), since the fullest pool is the one that queues requests.
POOL_USAGES = ("full_token_usage", "swa_token_usage", "mamba_usage")
_CUDA_GRAPH = _POSITION["cuda_graph"]


def _real(value: str | bytes) -> float:
    """A finite float of at least 0: one ``nan`` would poison every sum it enters for good, and
    no stats field (accept length, rate, throughput, usage) can be negative. Text or ASCII
    bytes alike (``float`` reads both the same), so every reader converts with this."""
    number = float(value)
    if not isfinite(number) or number < 0:
        raise ValueError(value)
    return number


def _count(value: str | bytes) -> int:
    """A count of requests or tokens: an integer of at least 0. A negative one is drift, not a
    number to export: no load band, sum or gauge has a place for it."""
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def count_column(column: Sequence[bytes]) -> list[int] | None:
    """:func:`_count` over a whole column (the chunk reader's), or None where it would refuse a
    value; ``int`` may raise ValueError as there."""
    return count_numbers(list(map(int, column)))


def count_numbers(numbers: list[int]) -> list[int] | None:
    """``numbers`` (each ``int`` of a value) when :func:`_count` takes every one, else None."""
    return numbers if min(numbers, default=0) >= 0 else None


def real_column(column: Sequence[bytes]) -> list[float] | None:
    """:func:`_real` over a whole column at C speed (the chunk reader's), or None where it
    would refuse a value; ``float`` may raise ValueError as there."""
    return real_numbers(list(map(float, column)))


def real_numbers(numbers: list[float]) -> list[float] | None:
    """``numbers`` (each ``float`` of a value) when :func:`_real` takes every one, else None."""
    # A finite sum has no inf or nan in it, and takes no call per value; finite values whose
    # sum overflows are looked at one by one.
    finite = isfinite(sum(numbers)) or all(map(isfinite, numbers))
    return numbers if finite and min(numbers, default=0.0) >= 0 else None


def _percent(value: str) -> float:
    """``12.34%`` -> 0.1234: every ratio specwatch exports is 0..1."""
    if not value.endswith("%"):
        raise ValueError(value)
    return _real(value[:-1]) / 100


def _flag(value: str | bytes) -> bool:
    """Python's ``True``/``False`` exactly, as text or ASCII bytes; anything else is drift, not
    a guess."""
    try:
        return _BOOLS[value]
    except KeyError:
        raise ValueError(value) from None


def flag_column(column: Sequence[bytes]) -> list[bool] | None:
    """:func:`_flag` over a whole column (the chunk reader's), or None where it would refuse."""
    flags = list(map(_BOOLS.get, column))
    return None if None in flags else flags  # type: ignore[return-value]


_BOOLS: dict[str | bytes, bool] = {"True": True, "False": False, b"True": True, b"False": False}


def _text(value: str) -> str:
    return value.strip()


Converter = Callable[[str], Any]

# SGLang field name -> (is a StatsRecord field, record/extra key, converter). Extras are the
# few worth keeping for diagnosis (hybrid pools, PD queues, DSpark, occupancy); every other
# field a line carries is ignored. The converters reject garbage with ValueError.
_FIELDS: dict[str, tuple[bool, str, Converter]] = {
    "#running-req": (True, "running_requests", _count),
    "#queue-req": (True, "queued_requests", _count),
    "token usage": (True, "token_usage", _real),
    "accept len": (True, "accept_length", _real),
    "accept rate": (True, "accept_rate", _real),
    "gen throughput (token/s)": (True, "gen_throughput", _real),
    "#new-token": (True, "new_tokens", _count),
    "#cached-token": (True, "cached_tokens", _count),
    "input throughput (token/s)": (True, "input_throughput", _real),
    "cuda graph": (True, "cuda_graph", _flag),
    "full token usage": (False, "full_token_usage", _real),
    "swa token usage": (False, "swa_token_usage", _real),
    "mamba usage": (False, "mamba_usage", _real),
    "#new-seq": (False, "new_seqs", _count),
    "#pending-token": (False, "pending_tokens", _count),
    "cache hit rate": (False, "cache_hit_rate", _percent),
    "pre-allocated usage": (False, "preallocated_usage", _real),
    "#prealloc-req": (False, "prealloc_requests", _count),
    "#bootstrap-req": (False, "bootstrap_requests", _count),
    "#transfer-req": (False, "transfer_requests", _count),
    "#inflight-req": (False, "inflight_requests", _count),
    "#retracted-req": (False, "retracted_requests", _count),
    "largest-len": (False, "largest_len", _count),
    "cap len": (False, "cap_length", _real),
    "block accept len": (False, "block_accept_length", _real),
    "fwd occupancy": (False, "fwd_occupancy", _percent),
    "timestamp": (False, "timestamp", _text),
}


def _read_each(body: str, extra: dict[str, Any]) -> list[Any]:
    """Split ``body`` into its pieces and convert the known ones, in line order.

    Record values come back in ``_VALUE_FIELDS`` order; kept extras go to ``extra``.

    Raises ValueError for a known field whose value is garbage: a half-understood line must be
    counted as format drift, not exported with a wrong number.
    """
    values: list[Any] = [None] * len(_VALUE_FIELDS)
    for piece in body.split(", "):
        name, _, raw = piece.partition(": ")
        known = _FIELDS.get(name)
        if known is not None:
            is_record, key, convert = known
            if is_record:
                values[_POSITION[key]] = convert(raw)
            else:
                extra[key] = convert(raw)
        elif name.endswith(" graph"):
            # "cpu", "npu", "musa graph": the same flag as "cuda graph" on other devices.
            values[_CUDA_GRAPH] = _flag(raw)
            extra["graph_device"] = name[: -len(" graph")]
    return values


@dataclass(frozen=True, slots=True)
class LayoutColumns:
    """A learnt layout as the chunk reader (``sglang_chunk``) uses it: the body's raw pattern,
    and (match group, record position or extra key, ``int``/``real``/``flag``) per value kept."""

    body: bytes
    groups: int  # capture groups in ``body``
    records: tuple[tuple[int, int, str], ...]
    extras: tuple[tuple[int, str, str], ...]


class _Layout:
    """One order of field names, read with a single ``fullmatch`` instead of a split per field.

    The pattern is the names joined by ``", "``, each followed by ``": "`` and a value without
    a comma. A body it matches splits on ``", "`` into exactly those ``name: value`` pieces (a
    name holds neither ``", "`` nor ``": "``: it was cut out of such a piece), so both reads
    convert the same values in the same order; any other body is read field by field.
    """

    __slots__ = (
        "_extras",
        "_pattern",
        "_raw",
        "_raw_extras",
        "_raw_records",
        "_records",
        "columns",
    )

    def __init__(self, names: tuple[str, ...]) -> None:
        parts: list[str] = []
        # (index in match.groups(), position in _VALUE_FIELDS, converter) of the record fields;
        # (index in match.groups(), key, converter) of the kept extras.
        self._records: list[tuple[int, int, Converter]] = []
        self._extras: list[tuple[int, str, Converter]] = []
        groups = 0
        for name in names:
            known = _FIELDS.get(name)
            if known is not None:
                is_record, key, convert = known
                if is_record:
                    self._records.append((groups, _POSITION[key], convert))
                else:
                    self._extras.append((groups, key, convert))
                groups += 1
                parts.append(f"{re.escape(name)}: ([^,]*)")
            elif name.endswith(" graph"):
                self._extras.append((groups, "graph_device", str))
                self._records.append((groups + 1, _CUDA_GRAPH, _flag))
                groups += 2
                parts.append(f"({re.escape(name[: -len(' graph')])}) graph: ([^,]*)")
            else:
                parts.append(f"{re.escape(name)}: [^,]*")
        self._pattern = re.compile(", ".join(parts) + "(?:, )?")
        # The same pattern over raw bytes, for the pipeline's byte-level fast path (ASCII only).
        self._raw = (
            re.compile(self._pattern.pattern.encode()) if self._pattern.pattern.isascii() else None
        )
        self._raw_records = [(i, pos, _raw(convert)) for i, pos, convert in self._records]
        self._raw_extras = [(i, key, _raw(convert)) for i, key, convert in self._extras]
        self.columns = self._columns()

    def _columns(self) -> LayoutColumns | None:
        """This layout for reading many lines at once, when every value kept is a number or a
        flag (the chunk reader converts a column at a time, and knows only those)."""
        records = _typed_columns(self._records)
        extras = _typed_columns(self._extras)
        if self._raw is None or not records or records is None or extras is None:
            return None
        # One line of ASCII per value: the chunk pattern runs over many lines at once, and
        # a line that is not ASCII is read as text (see read_stats_line).
        body = self._raw.pattern.replace(rb"[^,]*", rb"[^,\n\x80-\xff]*")
        return LayoutColumns(body, self._raw.groups, records, extras)

    def read(self, text: str, extra: dict[str, Any], start: int = 0) -> list[Any] | None:
        """Record values of the body ``text[start:]`` (extras go to ``extra``), read in place.

        None when the body has another layout.
        """
        match = self._pattern.fullmatch(text, start)
        if match is None:
            return None
        raw = match.groups()
        for index, key, convert in self._extras:
            extra[key] = convert(raw[index])
        values: list[Any] = [None] * len(_VALUE_FIELDS)
        for index, position, convert in self._records:
            values[position] = convert(raw[index])
        return values

    def read_raw(self, line: bytes, start: int) -> tuple[list[Any], dict[str, Any]] | None:
        """(record values, extras) of the ASCII body ``line[start:]``, or None (another layout).

        The same match and conversions as :meth:`read` on the decoded text: ``int`` and
        ``float`` take ASCII bytes as they take text.
        """
        match = None if self._raw is None else self._raw.fullmatch(line, start)
        if match is None:
            return None
        raw = match.groups()
        extra: dict[str, Any] = {}
        for index, key, convert in self._raw_extras:
            extra[key] = convert(raw[index])
        values: list[Any] = [None] * len(_VALUE_FIELDS)
        for index, position, convert in self._raw_records:
            values[position] = convert(raw[index])
        return values, extra


_Key = TypeVar("_Key", int, str)


def _typed_columns(
    entries: list[tuple[int, _Key, Converter]],
) -> tuple[tuple[int, _Key, str], ...] | None:
    """(group, key, converter) with the converter named, or None if one is not a column's."""
    named = []
    for group, key, convert in entries:
        kind = _COLUMN_KINDS.get(convert)
        if kind is None:
            return None
        named.append((group, key, kind))
    return tuple(named)


_COLUMN_KINDS: dict[Converter, str] = {_count: "int", _real: "real", _flag: "flag"}


_OPEN_BRACKET = ord("[")
_RAW_HEADERS = {"decode": b"Decode batch, ", "prefill": b"Prefill batch, "}
# Whole seconds only: a fraction makes the rank list fail its pattern, and the text path
# reads the line.
_RAW_STAMP = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_RAW_RANK_LIST = re.compile(RANK_LIST.encode())


def iso_time(stamp: bytes) -> str:
    """``2026-02-23 00:14:33`` as the text reader gives it: ``2026-02-23T00:14:33``."""
    return stamp.decode("ascii").replace(" ", "T")


def _raw(convert: Converter) -> Callable[[bytes], Any]:
    """``convert`` for ASCII bytes: numbers directly, everything else through its text."""
    if convert is _count or convert is _real or convert is _flag:
        return convert
    return lambda value: convert(value.decode("ascii"))


# SGLang's longest lines have about 30 fields; a longer body is not worth a pattern.
_MAX_LAYOUT_FIELDS = 64
_MAX_LAYOUT_CHARS = 2048


def _learn(body: str) -> _Layout | None:
    """The layout of ``body`` when every piece is ``name: value`` (a trailing ``, `` aside)."""
    if len(body) > _MAX_LAYOUT_CHARS:
        return None
    pieces = [piece.partition(": ") for piece in body.split(", ")]
    if pieces[-1] == ("", "", ""):
        pieces.pop()  # the trailing ", " of some releases; the pattern allows one anyway
    if not pieces or len(pieces) > _MAX_LAYOUT_FIELDS or not all(sep for _, sep, _ in pieces):
        return None
    return _compiled_layout(tuple(name for name, _, _ in pieces))


@functools.lru_cache(maxsize=32)
def _compiled_layout(names: tuple[str, ...]) -> _Layout:
    """Compiling costs about a hundred lines' parsing: a layout seen before is reused."""
    return _Layout(names)


# Lines written in the same second by the same rank share their prefix text exactly, so the
# prefix regex runs about once per second and rank instead of once per line (the hot path,
# see bench/). Bounded: each cache is cleared when full.
_HEAD_CACHE_SIZE = 4096


class SGLangLines:
    """One source's SGLang lines read with what its previous lines taught: the layout of the
    previous stats line of each kind, and the prefixes already parsed.

    A server writes every line of a kind with the same fields in the same order, so that
    layout is tried first, in place (the hot path, see bench/); a line in another layout is
    read field by field, which defines the result, and teaches the new layout. Kept per
    source (one per line processor): two targets running different SGLang versions never
    relearn each other's layouts, and no caller shares it across threads.
    """

    __slots__ = ("_heads", "_layouts", "_raw_ranks", "_raw_stamps")

    def __init__(self) -> None:
        # kind -> layout of the previous line of that kind read field by field (None: not
        # learnable).
        self._layouts: dict[str, _Layout | None] = {}
        self._heads: dict[str, _Head | tuple[()]] = {}
        self._raw_stamps: dict[bytes, str] = {}
        self._raw_ranks: dict[bytes, _Ranks | tuple[()]] = {}

    def classify(self, text: str) -> StatsRecord | Unrecognized | LogLine | None:
        """Everything the pipeline needs from one cleaned line, splitting its prefix once.

        A stats line gives its record (or Unrecognized); any other SGLang line gives its
        LogLine (the caller looks for startup events in it); a line SGLang did not format
        gives None.
        """
        split = self._split(text)
        if split is None:
            return None
        head, message = split
        if message.startswith("Decode batch"):
            return self._stats("decode", len("Decode batch"), head, message)
        if message.startswith("Prefill batch"):
            return self._stats("prefill", len("Prefill batch"), head, message)
        return LogLine(head[0], head[1], head[2], message, NAME, head[3])

    def learnt_columns(self, kind: str) -> LayoutColumns | None:
        """The layout the next line of ``kind`` is expected in, for reading many lines at
        once; None before one was learnt, or when its values are not all numbers or flags."""
        layout = self._layouts.get(kind)
        return None if layout is None else layout.columns

    def learnt(self, kind: str) -> bool:
        """Whether a layout of ``kind`` was learnt (whatever the chunk reader makes of it)."""
        return self._layouts.get(kind) is not None

    def read_stats_line(self, kind: str, line: bytes) -> StatsRecord | Unrecognized | None:
        """A raw ASCII stats line of ``kind``, read without decoding it, or None: read it as
        text.

        Only the common case is taken here: SGLang's plain prefix, today's ``Decode batch, ``
        header, and the body in the layout learnt from the previous line of its kind. The
        result equals the text read of the same line (a property test holds it there).
        """
        layout = self._layouts.get(kind)
        end = line.find(b"] ") + 2
        if layout is None or end < 21 or line[0] != _OPEN_BRACKET:
            return None
        head = self._raw_head(line[1:20], line[20 : end - 2])
        header = _RAW_HEADERS[kind]
        if head is None or not line.startswith(header, end):
            return None
        try:
            read = layout.read_raw(line, end + len(header))
        except ValueError:
            return Unrecognized("bad_value")
        return None if read is None else _record(kind, head, *read)

    def _split(self, text: str) -> tuple[_Head, str] | None:
        """((ISO time, DP rank, TP rank, PP rank), message) of an SGLang-formatted line, else
        None."""
        if not text.startswith(("[", "(")):
            return None
        end = text.find("] ") + 2
        if end == 1:
            end = len(text) if text.endswith("]") else 0
        prefix = text[:end]
        parsed = self._heads.get(prefix)
        if parsed is None:
            parsed = _parse_head(prefix)
            if len(self._heads) >= _HEAD_CACHE_SIZE:
                self._heads.clear()
            self._heads[prefix] = parsed
        if not parsed:
            return None
        message = text[end:]
        if text[0] == "(" and message.endswith("cluster]"):
            message = _RAY_REPEAT.sub("", message)
        return parsed, message

    def _stats(
        self, kind: str, word_end: int, head: _Head, message: str
    ) -> StatsRecord | Unrecognized:
        """The record of a line whose message starts like a stats line, or why there is none.

        ``word_end`` is where "Decode batch"/"Prefill batch" ends in ``message``.
        """
        extra: dict[str, Any] = {}
        if message.startswith(", ", word_end):
            body_start = word_end + 2  # the header since v0.5.4.post1: no regex needed
        else:
            header = _HEADER.match(message)
            if header is None:
                return Unrecognized("header")
            if header.group(2) is not None:
                extra["forward_iter"] = int(header.group(2))
            body_start = header.end()
        try:
            layout = self._layouts.get(kind)
            values = None if layout is None else layout.read(message, extra, body_start)
            if values is None:
                body = message[body_start:]
                values = _read_each(body, extra)
                self._layouts[kind] = _learn(body)
        except ValueError:
            return Unrecognized("bad_value")
        return _record(kind, head, values, extra)

    def _raw_head(self, stamp: bytes, ranks: bytes) -> _Head | None:
        """The prefix ``[<stamp><ranks>] `` as the text path parses it, or None: read it as
        text.

        On a busy node every second brings new prefixes (one per rank), so the two halves are
        cached apart: the stamp changes once a second for all ranks, the rank list never.
        """
        time = self._raw_stamps.get(stamp)
        if time is None:
            valid = _RAW_STAMP.fullmatch(stamp) is not None
            time = iso_time(stamp) if valid else ""
            if len(self._raw_stamps) >= _HEAD_CACHE_SIZE:
                self._raw_stamps.clear()
            self._raw_stamps[stamp] = time
        numbers = self._raw_ranks.get(ranks)
        if numbers is None:
            valid = _RAW_RANK_LIST.fullmatch(ranks) is not None
            numbers = rank_numbers(ranks.decode("ascii")) if valid else ()
            if len(self._raw_ranks) >= _HEAD_CACHE_SIZE:
                self._raw_ranks.clear()
            self._raw_ranks[ranks] = numbers
        if not time or not numbers:
            return None
        return (time, *numbers)


def classify(text: str) -> StatsRecord | Unrecognized | LogLine | None:
    """One line read on its own, with nothing learnt from others (detection, one-off reads)."""
    return SGLangLines().classify(text)
