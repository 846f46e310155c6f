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

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.record import StatsRecord, Unrecognized

STATS_MARKERS: tuple[bytes, ...] = (b"Decode batch", b"Prefill batch")
EVENT_MARKERS: tuple[bytes, ...] = (
    b"server_args=",
    b"Load weight end.",
    b"max_total_num_tokens=",
    b"Capture cuda graph",
    b"Capture draft cuda graph",
    b"fired up and ready",
    b"Max running requests is reset",
    b"KV cache pool is full",
)

# Optional Ray actor tag, then "[YYYY-MM-DD HH:MM:SS(.mmm)? RANK...] message". Rank names are
# matched generically (DP, PP, ATTN_CP, MOE_DP, TP, EP so far) so a new parallelism kind or a
# reordering in a future release still parses.
_PREFIX = re.compile(
    r"(?:\([^()\s]+ pid=\d+(?:, ip=[^()\s]*)?\) )?"
    r"\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\] ?"
)
_RANK = re.compile(r" ([A-Z][A-Z_]*?)(\d+)")
# Ray folds repeated lines and says so at the end of the message.
_RAY_REPEAT = re.compile(r" \[repeated \d+x across cluster\]$")
_HEADER = re.compile(r"(Decode|Prefill) batch(?:\.|,| ?\[(\d+)\],?) ")
_FIELD = re.compile(r" ?([^,:]+): ([^,]*)")
_GRAPH_FIELD = re.compile(r"(\w+) graph")


@dataclass(slots=True, frozen=True)
class Prefix:
    """SGLang's line prefix, split off its message; ``time`` is ISO 8601 as logged (no zone)."""

    time: str | None
    dp_rank: int | None
    tp_rank: int | None
    message: str


def split_prefix(text: str) -> Prefix | None:
    """Split SGLang's ``[date time ranks] `` prefix (and a Ray actor tag) off a cleaned line.

    None means the line was not written by SGLang's log formatter: a traceback continuation,
    a tqdm bar, another program's output.
    """
    match = _PREFIX.match(text)
    if match is None:
        return None
    date, clock, fraction, ranks = match.groups()
    time = f"{date}T{clock}.{fraction}" if fraction else f"{date}T{clock}"
    message = text[match.end() :]
    if text[0] == "(" and message.endswith("cluster]"):
        message = _RAY_REPEAT.sub("", message)
    dp_rank = tp_rank = None
    if ranks:
        for name, number in _RANK.findall(ranks):
            if name == "DP":
                dp_rank = int(number)
            elif name == "TP":
                tp_rank = int(number)
    return Prefix(time=time, dp_rank=dp_rank, tp_rank=tp_rank, message=message)


def parse_stats(text: str) -> StatsRecord | Unrecognized | None:
    """Parse one cleaned log line; None when it is not a scheduler stats line at all."""
    prefix = split_prefix(text)
    if prefix is None:
        return None
    return stats_from_prefix(prefix)


def stats_from_prefix(prefix: Prefix) -> StatsRecord | Unrecognized | None:
    """Parse the message of an already split line (the pipeline splits once for events too)."""
    message = prefix.message
    if message.startswith("Decode batch"):
        kind = "decode"
    elif message.startswith("Prefill batch"):
        kind = "prefill"
    else:
        return None
    header = _HEADER.match(message)
    if header is None:
        return Unrecognized("header")
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if header.group(2) is not None:
        extra["forward_iter"] = int(header.group(2))
    try:
        _read_fields(message[header.end() :], values, extra)
    except ValueError:
        return Unrecognized("bad_value")
    if not values:
        return Unrecognized("no_fields")
    if "token_usage" not in values and "full_token_usage" in extra:
        values["token_usage"] = extra["full_token_usage"]
    return StatsRecord(
        kind=kind,
        time=prefix.time,
        dp_rank=prefix.dp_rank,
        tp_rank=prefix.tp_rank,
        extra=extra,
        **values,
    )


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


def _number(value: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(value)
    return number


def _percent(value: str) -> float:
    """``12.34%`` -> 0.1234: every ratio specwatch exports is 0..1."""
    if not value.endswith("%"):
        raise ValueError(value)
    return _number(value[:-1]) / 100


def _flag(value: str) -> bool:
    """Python's ``True``/``False`` exactly; anything else is drift, not a guess."""
    value = value.strip()
    if value == "True":
        return True
    if value == "False":
        return False
    raise ValueError(value)


def _text(value: str) -> str:
    return value.strip()


Converter = Callable[[str], Any]

# Spec section 5 fields, by SGLang's field name.
_RECORD_FIELDS: dict[str, tuple[str, Converter]] = {
    "#running-req": ("running_requests", _count),
    "#queue-req": ("queued_requests", _count),
    "token usage": ("token_usage", _number),
    "accept len": ("accept_length", _number),
    "accept rate": ("accept_rate", _number),
    "gen throughput (token/s)": ("gen_throughput", _number),
    "#new-token": ("new_tokens", _count),
    "#cached-token": ("cached_tokens", _count),
    "input throughput (token/s)": ("input_throughput", _number),
}

# Fields worth keeping for diagnosis (hybrid pools, PD queues, DSpark, occupancy); the rest of
# what a line carries is ignored.
_EXTRA_FIELDS: dict[str, tuple[str, Converter]] = {
    "full token usage": ("full_token_usage", _number),
    "swa token usage": ("swa_token_usage", _number),
    "mamba usage": ("mamba_usage", _number),
    "#new-seq": ("new_seqs", _count),
    "#pending-token": ("pending_tokens", _count),
    "cache hit rate": ("cache_hit_rate", _percent),
    "pre-allocated usage": ("preallocated_usage", _number),
    "#prealloc-req": ("prealloc_requests", _count),
    "#bootstrap-req": ("bootstrap_requests", _count),
    "#transfer-req": ("transfer_requests", _count),
    "#inflight-req": ("inflight_requests", _count),
    "#retracted-req": ("retracted_requests", _count),
    "largest-len": ("largest_len", _count),
    "cap len": ("cap_length", _number),
    "block accept len": ("block_accept_length", _number),
    "fwd occupancy": ("fwd_occupancy", _percent),
    "timestamp": ("timestamp", _text),
}


def _read_fields(body: str, values: dict[str, Any], extra: dict[str, Any]) -> None:
    """Fill ``values`` (record fields) and ``extra`` from the ``name: value`` pairs of ``body``.

    Raises ValueError for a known field whose value is garbage: a half-understood line must be
    counted as format drift, not exported with a wrong number.
    """
    for name, raw in _FIELD.findall(body):
        known = _RECORD_FIELDS.get(name)
        if known is not None:
            values[known[0]] = known[1](raw)
            continue
        known = _EXTRA_FIELDS.get(name)
        if known is not None:
            extra[known[0]] = known[1](raw)
            continue
        graph = _GRAPH_FIELD.fullmatch(name)
        if graph is not None:
            # "cuda graph" on GPUs; "cpu"/"npu"/"musa graph" elsewhere mean the same thing.
            values["cuda_graph"] = _flag(raw)
            if graph.group(1) != "cuda":
                extra["graph_device"] = graph.group(1)
