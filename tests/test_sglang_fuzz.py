"""Property tests: nothing crashes the line processor, and any valid stats line round-trips.

Valid lines are generated from SGLang's stats-line and prefix formats: any subset and
order of fields, every header and line-end variant, any rank subset in any order, Ray's tag,
unknown fields mixed in. Values are drawn in hundredths because SGLang prints 2 decimals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from exporter.engines.record import LogLine, StatsRecord, Unrecognized
from exporter.engines.sglang import (
    _VALUE_FIELDS,
    SGLangLines,
    _learn,
    _read_each,
    classify,
)
from exporter.parse.pipeline import LineProcessor, RecordSink


@dataclass
class CountingSink(RecordSink):
    lines: int = 0
    records: list[StatsRecord] = field(default_factory=list)
    other: int = 0

    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self.records.append(record)

    def on_unrecognized(self, reason: str) -> None:
        assert isinstance(reason, str)
        self.other += 1

    def on_skipped(self, reason: str) -> None:
        self.other += 1

    def on_event(self, line: LogLine) -> None:
        assert isinstance(line, LogLine)
        self.other += 1


# Fragments that steer random bytes into every branch of the pipeline.
_FRAGMENTS = [
    b"[2026-02-23 00:14:33 TP0] ",
    b"[2026-02-23 00:14:33.123 DP1 TP2 EP3] ",
    b"(SGLangEngine pid=1, ip=1.2.3.4) ",
    b"Decode batch, ",
    b"Decode batch. ",
    b"Decode batch [7], ",
    b"Prefill batch, ",
    b"#running-req: ",
    b"accept len: ",
    b"cuda graph: ",
    b"npu graph: ",
    b"cache hit rate: ",
    b"fwd occupancy: ",
    b"1.00",
    b"True",
    b"%",
    b", ",
    b": ",
    b"\r",
    b"\x1b[32m",
    b"\x00",
    b"\xff",
    b"server_args=",
    b"Load weight end.",
    b'{"log":"',
    b'\\n","stream":"stderr"}',
    b"2026-02-23T00:14:33Z stderr P ",
    b"2026-02-23T00:14:33Z stdout F ",
]

raw_lines = st.lists(
    st.one_of(
        st.binary(max_size=200),
        st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.binary(max_size=8)), max_size=12).map(
            b"".join
        ),
    ),
    max_size=30,
)


@given(st.lists(raw_lines, max_size=4))
def test_arbitrary_bytes_never_crash_and_every_payload_line_is_counted(
    batches: list[list[bytes]],
) -> None:
    sink = CountingSink()
    processor = LineProcessor(sink)
    for batch in batches:
        processor.process(batch)
    assert sink.lines <= sum(len(batch) for batch in batches)
    for record in sink.records:
        assert record.kind in ("decode", "prefill")


# --- round trip ------------------------------------------------------------------------------

hundredths = st.integers(min_value=0, max_value=10**7).map(lambda c: c / 100)
ratios = st.integers(min_value=0, max_value=100).map(lambda c: c / 100)
counts = st.integers(min_value=0, max_value=10**6)

# record attribute -> (SGLang field name, value strategy)
_DECODE_FIELDS: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "running_requests": ("#running-req", counts),
    "queued_requests": ("#queue-req", counts),
    "token_usage": ("token usage", ratios),
    "accept_length": ("accept len", hundredths),
    "accept_rate": ("accept rate", ratios),
    "gen_throughput": ("gen throughput (token/s)", hundredths),
}
_PREFILL_FIELDS: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "running_requests": ("#running-req", counts),
    "queued_requests": ("#queue-req", counts),
    "token_usage": ("token usage", ratios),
    "new_tokens": ("#new-token", counts),
    "cached_tokens": ("#cached-token", counts),
    "input_throughput": ("input throughput (token/s)", hundredths),
}
_SWA = "swa token usage: 0.03"  # a pool's usage, part of the token usage when no plain one
_NOISE = [
    "#token: 6460",
    "#swa token: 8192",
    _SWA,
    "#prealloc-req: 2",
    "waiting-image-req: 0",
    "est. decode TFLOPS/s (per GPU): 12.50",
    "#new-seq: 3",
    "some future field: 1.5",
]
_RANKS = ["DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP"]


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


@st.composite
def stats_lines(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """(line, expected record attributes) for a random valid SGLang stats line."""
    kind = draw(st.sampled_from(["decode", "prefill"]))
    table = _DECODE_FIELDS if kind == "decode" else _PREFILL_FIELDS
    chosen = draw(st.lists(st.sampled_from(sorted(table)), min_size=1, unique=True))
    expected: dict[str, Any] = {"kind": kind}
    parts: list[str] = []
    for attr in chosen:
        name, values = table[attr]
        value = draw(values)
        if attr == "token_usage" and draw(st.booleans()):
            name = "full token usage"  # hybrid SWA/SSM pools
        expected[attr] = value
        parts.append(f"{name}: {_render(value)}")
    if draw(st.booleans()):
        graph = draw(st.booleans())
        device = draw(st.sampled_from(["cuda", "cpu", "npu", "musa"]))
        expected["cuda_graph"] = graph
        parts.append(f"{device} graph: {graph}")
    noises = draw(st.lists(st.sampled_from(_NOISE), max_size=3))
    for noise in noises:
        parts.insert(draw(st.integers(0, len(parts))), noise)
    if _SWA in noises and not any(part.startswith("token usage:") for part in parts):
        # hybrid pools without a plain token usage: the fullest pool's
        expected["token_usage"] = max(expected.get("token_usage", 0.0), 0.03)
    word = "Decode" if kind == "decode" else "Prefill"
    header = draw(st.sampled_from([f"{word} batch. ", f"{word} batch, ", f"{word} batch [42], "]))
    ending = draw(st.sampled_from(["", ", ", ", timestamp: 2026-02-23T00:14:33.123456"]))

    ranks = draw(st.lists(st.sampled_from(_RANKS), unique=True, max_size=6))
    numbers = [draw(st.integers(0, 63)) for _ in ranks]
    expected["dp_rank"] = numbers[ranks.index("DP")] if "DP" in ranks else None
    expected["tp_rank"] = numbers[ranks.index("TP")] if "TP" in ranks else None
    rank_text = "".join(f" {r}{n}" for r, n in zip(ranks, numbers, strict=True))
    millis = draw(st.one_of(st.none(), st.integers(0, 999)))
    clock = f"{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}:07"
    expected["time"] = f"2026-02-23T{clock}" + (f".{millis:03d}" if millis is not None else "")
    stamp = f"2026-02-23 {clock}" + (f".{millis:03d}" if millis is not None else "")
    ray = draw(st.sampled_from(["", "(SGLangEngine pid=41820) ", "(Actor pid=7, ip=10.0.0.2) "]))
    line = f"{ray}[{stamp}{rank_text}] {header}{', '.join(parts)}{ending}"
    return line, expected


def _check(record: StatsRecord, expected: dict[str, Any]) -> None:
    for attr, value in expected.items():
        assert getattr(record, attr) == value, (attr, record)


@given(stats_lines())
def test_generated_valid_lines_round_trip_to_the_intended_values(
    case: tuple[str, dict[str, Any]],
) -> None:
    line, expected = case
    result = classify(line)
    assert isinstance(result, StatsRecord), (line, result)
    _check(result, expected)


@given(stats_lines(), st.sampled_from(["plain", "crlf", "cri", "ansi"]))
def test_generated_lines_round_trip_through_the_pipeline_in_any_envelope(
    case: tuple[str, dict[str, Any]], wrapping: str
) -> None:
    line, expected = case
    raw = line.encode()
    if wrapping == "crlf":
        raw += b"\r"
    elif wrapping == "cri":
        raw = b"2026-02-23T00:14:33.5Z stderr F " + raw
    elif wrapping == "ansi":
        raw = b"\x1b[0m" + raw + b"\x1b[0m"
    sink = CountingSink()
    LineProcessor(sink).process([raw])
    assert len(sink.records) == 1
    _check(sink.records[0], expected)


# --- layout fast path ------------------------------------------------------------------------

# Names and values chosen to break a naive pattern: separators, commas and colons inside
# names and values, device graph flags, unknown fields, empty pieces, garbage numbers.
_LAYOUT_NAMES = [
    "#running-req", "accept len", "cuda graph", "npu graph", "#new-seq", "cache hit rate",
    "timestamp", "#token", "a,b", "x:", " lead", "", "accept len:", "graph",
]  # fmt: skip
_LAYOUT_VALUES = [
    "7", "2.50", "True", "False", "5.00%", "", "1,234", "True: x", "3, 4", " 9 ",
    "2026-02-23T00:14:33.1", "nan", "1_0", ": ", ",",
]  # fmt: skip


def _read_outcome(read: Any, body: str) -> Any:
    """(record values, extras in order) of one read, "drift" for ValueError, None for no match."""
    extra: dict[str, Any] = {}
    try:
        values = read(body, extra)
    except ValueError:
        return "drift"
    return None if values is None else (values, list(extra.items()))


@given(
    st.lists(st.sampled_from(_LAYOUT_NAMES), min_size=1, max_size=8),
    st.data(),
    st.sampled_from(["", ", ", ","]),
)
def test_a_learnt_layout_reads_any_body_exactly_as_the_field_by_field_read(
    names: list[str], data: st.DataObject, ending: str
) -> None:
    def body(values: list[str]) -> str:
        return ", ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True)) + ending

    draw_values = st.lists(
        st.sampled_from(_LAYOUT_VALUES), min_size=len(names), max_size=len(names)
    )
    layout = _learn(body(data.draw(draw_values)))
    if layout is None:
        return
    for _ in range(3):
        other = body(data.draw(draw_values))
        fast = _read_outcome(layout.read, other)
        if fast is not None:
            # repr: nan equals itself, and 1 / 1.0 / True stay apart.
            assert repr(fast) == repr(_read_outcome(_read_each, other)), other


def test_lines_of_one_layout_take_the_pattern_and_another_layout_is_relearnt() -> None:
    decode = (
        "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: {}, #token: 6460, "
        "token usage: 0.06, accept len: {}, cuda graph: True, #queue-req: 0"
    )
    lines = SGLangLines()
    assert lines.read_stats_line("decode", decode.format(12, "3.25").encode()) is None
    assert isinstance(lines.classify(decode.format(48, "1.00")), StatsRecord)
    learnt = lines.learnt_columns("decode")
    assert learnt is not None
    fast = lines.read_stats_line("decode", decode.format(12, "3.25").encode())
    assert isinstance(fast, StatsRecord)
    assert {k: v for k, v in fast._asdict().items() if k in _VALUE_FIELDS and v is not None} == {
        "running_requests": 12,
        "token_usage": 0.06,
        "accept_length": 3.25,
        "cuda_graph": True,
        "queued_requests": 0,
    }
    hybrid = "[2026-02-23 00:17:45] Decode batch, full token usage: 0.05, npu graph: False"
    record = lines.classify(hybrid)
    assert isinstance(record, StatsRecord)
    assert (record.token_usage, record.cuda_graph) == (0.05, False)
    assert record.extra == {"full_token_usage": 0.05, "graph_device": "npu"}
    assert lines.learnt_columns("decode") != learnt
    again = lines.classify(hybrid.replace("0.05", "0.07"))
    assert isinstance(again, StatsRecord) and again.token_usage == 0.07
    for garbage in ("garbage", "1,5"):  # the pattern's miss and its match both end as drift
        drift = lines.classify(decode.format(12, garbage))
        assert isinstance(drift, Unrecognized) and drift.reason == "bad_value"


def test_each_source_keeps_its_own_layouts() -> None:
    """Two sources of two SGLang versions: one's lines never make the other relearn."""
    old = "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 3, accept len: 2.50, "
    new = "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 3, #token: 9, accept len: 2.50"
    first, second = SGLangLines(), SGLangLines()
    first.classify(old + "gen throughput (token/s): 9.00")
    second.classify(new)
    assert first.learnt_columns("decode") != second.learnt_columns("decode")
    again = first.read_stats_line("decode", (old + "gen throughput (token/s): 7.00").encode())
    assert isinstance(again, StatsRecord) and again.gen_throughput == 7.0
