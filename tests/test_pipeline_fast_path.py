"""The pipeline's byte-level fast path reads every line exactly as the plain text reader does.

The plain reader is the pipeline with no layout learnt: each line is decoded, cleaned, split
and read field by field. Lines share layouts (so the fast path fires) and carry the values
and bytes that could make the two disagree: commas and colons inside values, garbage numbers,
underscores, non-ASCII text, terminal debris, other prefixes and headers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.engines import sglang, sglang_chunk, sglang_engine
from exporter.engines.record import LogLine, RequestRecord, StatsRecord
from exporter.parse.pipeline import LineProcessor, RecordSink
from exporter.sources.tail.lines import LineSplitter
from tests.support.requests import finish_line

LOGS = Path(__file__).parent / "data" / "logs"


# The fixture below only sets a module constant: the same for every example.
FIXTURE_PER_TEST = HealthCheck.function_scoped_fixture


@pytest.fixture(autouse=True)
def chunk_reader_for_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batches here are short; the chunk reader must read them too, and convert their
    columns through its caches of repeated values, to be held equal."""
    monkeypatch.setattr(sglang_engine, "CHUNK_MIN_LINES", 1)
    monkeypatch.setattr(sglang_chunk, "_CACHED_ROWS", 1)


class RecordingSink(RecordSink):
    """Everything a sink is told, in order, as comparable text."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.requests: list[str] = []  # a batch's requests follow its records: kept apart

    def on_lines(self, count: int) -> None:
        self.events.append(f"lines {count}")

    def on_record(self, record: StatsRecord) -> None:
        # repr: nan equals itself, and 1 / 1.0 / True stay apart.
        self.events.append(repr(record))

    def on_unrecognized(self, reason: str) -> None:
        self.events.append(f"unrecognized {reason}")

    def on_skipped(self, reason: str) -> None:
        self.events.append(f"skipped {reason}")

    def on_event(self, prefix: LogLine) -> None:
        self.events.append(repr(prefix))

    def on_request(self, record: RequestRecord) -> None:
        self.requests.append(repr(record))


def plain_read(lines: list[bytes]) -> list[str]:
    """Each line on its own, with no learnt layout: the field-by-field reader defines results."""
    sink = RecordingSink()
    for line in lines:
        LineProcessor(sink, "sglang").process([line])
    return [event for event in sink.events if not event.startswith("lines ")] + sink.requests


def fast_read(batches: list[list[bytes]], framed: bool = False) -> tuple[list[str], int]:
    """Batches as lines (a live tailer's) or ``framed``, each line between two newlines (the
    bulk reader's, which may read a batch without ever splitting it)."""
    sink = RecordingSink()
    processor = LineProcessor(sink, "sglang")
    for batch in batches:
        if framed:
            processor.process_framed(b"\n".join([b"", *batch, b""]))
        else:
            processor.process(batch)
    lines = sum(int(e.split()[1]) for e in sink.events if e.startswith("lines "))
    return [event for event in sink.events if not event.startswith("lines ")] + sink.requests, lines


_NAMES = [
    "#running-req", "#queue-req", "token usage", "accept len", "accept rate",
    "gen throughput (token/s)", "#new-token", "#cached-token", "input throughput (token/s)",
    "cuda graph", "npu graph", "full token usage", "cache hit rate", "timestamp", "#token",
    "#new-seq", "some future field", "a,b", "x:", "accept len:", "graph", "é field",
]  # fmt: skip
_VALUES = [
    "7", "48", "2.50", "0.06", "True", "False", "5.00%", "", "1,234", "True: x", "3, 4",
    " 9 ", "nan", "inf", "1_0", "1e3", "-0", "+5", "0x10", ": ", ",", "3.5é", "\t7", "١٢",
    "2026-02-23T00:14:33.1", "9" * 5000,
]  # fmt: skip
_PREFIXES = [
    "[2026-02-23 00:14:33 TP0] ",
    "[2026-02-23 00:14:34 DP3 TP3 EP3] ",
    "[2026-02-23 00:14:34] ",
    "[2026-02-23 00:14:35.250 DP1 TP1] ",
    "(SGLangEngine pid=41820) [2026-02-23 00:14:36 TP0] ",
    "[2026-02-23 00:14:37 TP0]  ",
    "[2026-02-23 00:14:38 tp0] ",
    "[2026-02-23 00:14:39 DP" + "9" * 5000 + " TP0] ",  # a rank no int() can read
]
_HEADERS = ["Decode batch, ", "Prefill batch, ", "Decode batch. ", "Decode batch [7], "]
_ENDINGS = ["", ", ", ",", "\r", "\x1b[0m", " [repeated 3x across cluster]"]


@st.composite
def layout_lines(draw: st.DrawFn) -> list[bytes]:
    """Several lines of one field layout (so the fast path fires), with varied values."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=8))
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        values = draw(st.lists(st.sampled_from(_VALUES), min_size=len(names), max_size=len(names)))
        body = ", ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))
        prefix = draw(st.sampled_from(_PREFIXES))
        header = draw(st.sampled_from(_HEADERS))
        ending = draw(st.sampled_from(_ENDINGS))
        lines.append(f"{prefix}{header}{body}{ending}".encode())
    return lines


@settings(
    suppress_health_check=[
        *settings().suppress_health_check,
        HealthCheck.function_scoped_fixture,
    ]
)
@given(st.lists(layout_lines(), min_size=1, max_size=4), st.integers(1, 7))
def test_every_line_reads_as_the_plain_field_by_field_reader_reads_it(
    groups: list[list[bytes]], batch_size: int
) -> None:
    lines = [line for group in groups for line in group]
    batches = [lines[i : i + batch_size] for i in range(0, len(lines), batch_size)]
    events, counted = fast_read(batches)
    assert counted == len(lines)
    assert events == plain_read(lines)


def _batches(data: bytes, chunk_bytes: int) -> list[list[bytes]]:
    """The lines of ``data`` in the batches the log reader hands the pipeline, chunk by chunk."""
    splitter = LineSplitter(max_line_bytes=1 << 20)
    batches = [
        splitter.feed(data[i : i + chunk_bytes]).lines for i in range(0, len(data), chunk_bytes)
    ]
    last = splitter.flush()
    return [batch for batch in batches if batch] + ([[last]] if last else [])


def test_every_line_of_the_held_logs_reads_as_the_plain_reader_reads_it() -> None:
    logs = sorted(LOGS.glob("*.log"))
    assert logs
    for log in logs:
        batches = _batches(log.read_bytes(), 4096)
        lines = [line for batch in batches for line in batch]
        events, counted = fast_read(batches)
        assert counted == len(lines), log.name
        assert events == plain_read(lines), log.name


def test_a_run_of_one_layout_is_read_from_bytes_after_its_first_line(monkeypatch: Any) -> None:
    """The fast path does fire on today's lines (else the tests above prove nothing)."""
    line = (
        "[2026-02-23 00:14:33 DP{} TP{}] Decode batch, #running-req: 48, #token: 6460, "
        "token usage: 0.06, accept len: 3.10, accept rate: 0.78, cuda graph: True, "
        "gen throughput (token/s): 637.19, #queue-req: 32"
    )
    texts: list[str] = []
    classify = sglang.SGLangLines.classify

    def counting_classify(lines: sglang.SGLangLines, text: str) -> Any:
        texts.append(text)
        return classify(lines, text)

    monkeypatch.setattr(sglang.SGLangLines, "classify", counting_classify)
    sink = RecordingSink()
    LineProcessor(sink, "sglang").process([line.format(r, r).encode() for r in range(8)])
    assert len(texts) == 1
    assert sum("accept_length=3.1," in event for event in sink.events) == 8


def test_text_only_numbers_and_debris_are_left_to_the_text_reader() -> None:
    """Arabic-Indic digits are a number to ``float`` as text, never as bytes; CR is cleaned."""
    line = "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 4{}, accept len: {}"
    lines = [
        line.format("", "3.10").encode(),
        line.format("", "١٢").encode(),
        line.format("", "2.00\r").encode(),
        line.format("\x1b[0m", "2.50").encode(),
    ]
    events, _ = fast_read([lines])
    assert events == plain_read(lines)
    assert "accept_length=12.0" in events[1] and "accept_length=2.0," in events[2]


_TODAY = {
    "decode": (
        "Decode batch, #running-req: {0}, #token: {1}, token usage: {2}, accept len: {3}, "
        "accept rate: {2}, cuda graph: {4}, gen throughput (token/s): {3}, #queue-req: {0}"
    ),
    "prefill": (
        "Prefill batch, #new-seq: {0}, #new-token: {1}, #cached-token: {0}, token usage: {2}, "
        "#running-req: {1}, #queue-req: {0}, input throughput (token/s): {3}, cuda graph: {4}"
    ),
}
_NUMBERS = ["7", "48", "0", "2.50", "0.06", "1469.87", "nan", "inf", "1e3", " 9", "-1", "x", ""]
_OTHER_LINES = [
    '[2026-02-23 00:14:33] INFO:     10.0.0.2:5000 - "GET /metrics HTTP/1.1" 200 OK',
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='quote Decode batch, accept len: 9')",
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='] Decode batch, #running-req: 1')",
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='é Prefill batch, ü')",
    "[2026-02-23 00:14:33 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB",
    "[2026-02-23 00:14:33 TP0] The server is fired up and ready to roll!",
    "plain text without a prefix",
    "",
    # A startup event names its subject within its message's first 20 characters: the
    # chunk reader looks no further into other lines when every line has the plain prefix.
    "[2026-02-23 00:14:33 TP0] " + "x" * 20 + "Max running requests is reset to 48",
    "[2026-02-23 00:14:33 TP0] " + "x" * 21 + "Max running requests is reset to 48",
    "[2026-02-23 00:14:33] " + "y" * 20 + "server_args=ServerArgs(model_path='m')",
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='Load weight end.')",
    # Another engine's stats and start-up text quoted in a line of SGLang's own prefix: no
    # other engine's line starts so, and the batch is read whole all the same.
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='SpecDecoding metrics: x')",
    "[2026-02-23 00:14:33 TP0] Avg generation throughput: 9.0 tokens/s, speculative_config=x",
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='non-default args: {}')",
    # Finished requests in both forms, and one quoted where no record starts.
    finish_line(2.5, 40),
    finish_line(1.0, 30, json_format=True),
    "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='] Finish: obj=x')",
    # A server's end opens with its message; a cause's words elsewhere open nothing.
    "[2026-02-23 00:14:33] SIGQUIT received. signum=3, frame=None. It usually means one child "
    "failed.",
    "[2026-02-23 00:14:33 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '[2026-02-23 00:14:33] INFO:     10.0.0.2:5000 - "GET /out of memory Error: x" 404 Not Found',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]
# Lines every one of which the chunk reader's pattern sees: whole seconds, a plain rank list.
_PLAIN_PREFIXES = [p for p in _PREFIXES if re.fullmatch(r"\[[-\d :]{19}( [A-Z]+\d)*\]  ?", p)]
_PLAIN_OTHER_LINES = [line for line in _OTHER_LINES if line.startswith("[")]


# Mostly stats lines, so that many batches are read whole and the rest line by line.
_CHOICES = ["decode"] * 4 + ["prefill"] * 4 + ["other", "bad_bytes"]


@st.composite
def busy_batch(draw: st.DrawFn, plain: bool = False) -> list[bytes]:
    """A batch of a busy node: today's stats lines of both kinds among other lines; with
    ``plain``, every line in the plain prefix."""
    prefixes = _PLAIN_PREFIXES if plain else _PREFIXES
    others = _PLAIN_OTHER_LINES if plain else _OTHER_LINES
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 12))):
        choice = draw(st.sampled_from(_CHOICES))
        if choice == "other":
            lines.append(draw(st.sampled_from(others)).encode())
        elif choice == "bad_bytes":
            lines.append(b"[2026-02-23 00:14:33] text='Decode batch, \xff\xfe'")
        else:
            numbers = draw(st.lists(st.sampled_from(_NUMBERS), min_size=4, max_size=4))
            flag = draw(st.sampled_from(["True", "False", "Maybe"]))
            body = _TODAY[choice].format(*numbers, flag)
            prefix = draw(st.sampled_from(prefixes))
            lines.append(f"{prefix}{body}".encode())
    return lines


@settings(
    suppress_health_check=[
        *settings().suppress_health_check,
        HealthCheck.function_scoped_fixture,
    ]
)
@given(st.lists(st.booleans().flatmap(busy_batch), min_size=1, max_size=6), st.booleans())
def test_whole_batches_read_in_one_pass_equal_the_plain_reader(
    batches: list[list[bytes]], framed: bool
) -> None:
    """Batches as the chunk reader sees them: both kinds interleaved, quoted stats text,
    invalid UTF-8, startup events, and values no column conversion may accept; handed over
    as lines or framed."""
    lines = [line for batch in batches for line in batch]
    events, counted = fast_read(batches, framed)
    assert counted == len(lines)
    assert events == plain_read(lines)


@pytest.mark.parametrize("garbage", ["nan", "x", " 9", "1e3", "-1", "1_0"])
def test_long_batches_of_repeated_values_read_as_the_plain_reader_does(
    monkeypatch: Any, garbage: str
) -> None:
    """Batches as long as a busy node's, with real thresholds: a column whose values repeat
    is converted through the chunk reader's cache, one whose values do not goes value by
    value, and a value either would refuse (or reads otherwise) among cached ones still
    reads as the line reader reads it."""
    monkeypatch.setattr(sglang_chunk, "_CACHED_ROWS", 64)

    def line(second: int, rank: int, running: object, tokens: int, length: str) -> bytes:
        body = _TODAY["decode"].format(running, tokens, "0.5", length, True)
        return f"[2026-02-23 00:14:{second:02d} DP{rank} TP{rank} EP{rank}] {body}".encode()

    batches = [
        [line(second, i % 8, 7 + i % 3, 40000 + 97 * i, f"{1 + i / 100:.2f}") for i in range(120)]
        for second in range(3)
    ]
    batches[2][70] = line(2, 6, garbage, 1, "3.10")
    events, counted = fast_read(batches, framed=True)
    lines = [text for batch in batches for text in batch]
    assert counted == len(lines)
    assert events == plain_read(lines)


def test_a_tidy_batch_after_the_first_is_read_without_a_line_by_line_pass(
    monkeypatch: Any,
) -> None:
    """The chunk reader does fire on a busy node's batches (else the test above proves little)."""
    line = "[2026-02-23 00:14:3{} DP{} TP{} EP{}] " + _TODAY["decode"].format(
        9, 70, "0.5", "3.1", True
    )
    other = b'[2026-02-23 00:14:33] INFO:     10.0.0.2:5000 - "GET /metrics HTTP/1.1" 200 OK'
    first = [line.format(0, r, r, r).encode() for r in range(4)]
    second = [line.format(1, r, r, r).encode() for r in range(4)] + [other]
    calls: list[bytes] = []
    read_stats_line = sglang.SGLangLines.read_stats_line

    def counting(lines: sglang.SGLangLines, kind: str, raw: bytes) -> Any:
        calls.append(raw)
        return read_stats_line(lines, kind, raw)

    monkeypatch.setattr(sglang.SGLangLines, "read_stats_line", counting)
    sink = RecordingSink()
    processor = LineProcessor(sink, "sglang")  # detection would learn the layout first
    processor.process(first)
    assert len(calls) == 4  # line by line: the first is read as text, and its layout learnt
    processor.process(second)
    assert len(calls) == 4
    records = [event for event in sink.events if event.startswith("StatsRecord")]
    assert len(records) == 8
    assert "time='2026-02-23T00:14:31', engine='sglang', dp_rank=2, tp_rank=2" in records[6]
    assert "accept_length=3.1, accept_rate=0.5, cuda_graph=True" in records[6]


@pytest.mark.parametrize("other", _PLAIN_OTHER_LINES)
@pytest.mark.parametrize("framed", [False, True])
def test_a_batch_of_plain_lines_finds_an_event_as_the_plain_reader_does(
    other: str, framed: bool
) -> None:
    """When every line has the plain prefix, the chunk reader looks for startup events only
    in the other lines' message heads: an event at the edge of where the line reader looks
    must still be found, and one just past it must not."""
    decode = "[2026-02-23 00:14:3{} DP{} TP{} EP{}] " + _TODAY["decode"].format(
        9, 70, "0.5", "3.1", True
    )
    prefill = "[2026-02-23 00:14:35 TP0] " + _TODAY["prefill"].format(4, 700, "0.5", "99.5", False)
    learn = [decode.format(0, 0, 0, 0).encode(), prefill.encode()]
    batch = [decode.format(1, r, r, r).encode() for r in range(3)] + [other.encode()]
    batch += [prefill.encode(), decode.format(2, 0, 0, 0).encode()]
    events, _ = fast_read([learn, batch], framed)
    assert events == plain_read(learn + batch)


def test_a_long_batch_of_few_lines_is_counted_and_read_as_the_plain_reader_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk batch long enough to be read whole however few lines it holds (its lines are
    counted by the chunk reader, not by a pass of their own): a line without the prefix and
    an empty one among them, and a long request line."""
    monkeypatch.setattr(sglang_engine, "CHUNK_MIN_LINES", 32)
    decode = "[2026-02-23 00:14:3{} DP{} TP{} EP{}] " + _TODAY["decode"].format(
        9, 70, "0.5", "3.1", True
    )
    learn = [decode.format(0, r, r, r).encode() for r in range(40)]
    prompt = "[2026-02-23 00:14:33] Receive: obj=GenerateReqInput(text='" + "word " * 4000 + "')"
    batch = [decode.format(1, 0, 0, 0).encode(), prompt.encode(), finish_line(2.5, 40).encode()]
    batch += [b"", b"plain text without a prefix", decode.format(2, 1, 1, 1).encode()]
    assert len(b"\n".join(batch)) >= sglang_engine.CHUNK_MIN_BYTES
    split: list[int] = []
    process = LineProcessor.process

    def splitting(processor: LineProcessor, lines: list[bytes]) -> None:
        split.append(len(lines))
        process(processor, lines)

    monkeypatch.setattr(LineProcessor, "process", splitting)
    events, counted = fast_read([learn, batch], framed=True)
    assert split == [len(learn)]  # the first batch teaches the layout; the second is whole
    assert counted == len(learn) + len(batch)
    assert events == plain_read(learn + batch)
    assert sum(event.startswith("StatsRecord") for event in events) == 42
