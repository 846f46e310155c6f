"""Line splitting shared by the file and stdin sources: newline-complete lines, capped length."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.tail.lines import LineSplitter


def feed_all(
    splitter: LineSplitter, chunks: list[bytes], max_pending: int | None = None
) -> tuple[list[bytes], int]:
    """(lines, too-long count) of feeding ``chunks``; checks the held bytes stay bounded."""
    lines: list[bytes] = []
    too_long = 0
    for chunk in chunks:
        split = splitter.feed(chunk)
        if split.framed is not None:  # what a bulk reader takes unsplit: each line between two
            assert split.framed[:1] == split.framed[-1:] == b"\n" and len(split.framed) > 1
            assert not split.listed
        lines += split.lines
        too_long += split.too_long
        if max_pending is not None:
            assert splitter.pending <= max_pending
    return lines, too_long


def test_line_split_across_chunks_is_joined_and_fragment_waits_for_its_newline() -> None:
    splitter = LineSplitter(100)
    assert feed_all(splitter, [b"alp", b"ha\nbe"]) == ([b"alpha"], 0)
    assert splitter.pending == 2
    assert feed_all(splitter, [b"ta\n\ngamma\n"]) == ([b"beta", b"", b"gamma"], 0)
    assert splitter.pending == 0


def test_bytes_pass_through_untouched_except_the_newline() -> None:
    raw = [
        b"crlf line\r",
        b"\x00nul\x00",
        b"\xff\xfe not utf-8",
        b"\x1b[32mINFO\x1b[0m",
        b"a\rb\rc",
    ]
    assert feed_all(LineSplitter(100), [b"\n".join(raw) + b"\n"]) == (raw, 0)


def test_too_long_line_is_skipped_once_without_buffering_it() -> None:
    splitter = LineSplitter(10)
    chunks = [b"short\n0123456789"] + [b"x" * 7] * 50 + [b"tail\nafter\n"]
    assert feed_all(splitter, chunks, max_pending=10) == ([b"short", b"after"], 1)


def test_line_of_exactly_the_cap_is_kept_and_one_byte_more_is_not() -> None:
    assert feed_all(LineSplitter(4), [b"abcd\nabcde\n"]) == ([b"abcd"], 1)
    assert feed_all(LineSplitter(4), [b"ab", b"cd", b"\n", b"abc", b"de\n"]) == ([b"abcd"], 1)


def test_discard_reports_a_dropped_fragment_but_not_a_line_already_counted_too_long() -> None:
    splitter = LineSplitter(4)
    splitter.feed(b"frag")
    assert splitter.discard() is True
    assert splitter.discard() is False
    assert splitter.feed(b"waytoolong").too_long == 1
    assert splitter.discard() is False
    assert feed_all(splitter, [b"next\n"]) == ([b"next"], 0)


def test_flush_gives_the_unterminated_last_line_at_end_of_input() -> None:
    splitter = LineSplitter(10)
    splitter.feed(b"one\ntwo")
    assert splitter.flush() == b"two"
    assert splitter.flush() is None


def test_skip_line_drops_up_to_the_next_newline_uncounted() -> None:
    splitter = LineSplitter(10)
    splitter.skip_line()
    assert feed_all(splitter, [b"rest of a line", b"\nwhole\n"]) == ([b"whole"], 0)


@given(
    data=st.binary(max_size=400).map(lambda b: b.replace(b"\x01", b"\n")),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    cap=st.integers(min_value=1, max_value=40),
)
def test_any_chunking_yields_the_newline_split_of_the_whole_stream(
    data: bytes, cuts: list[int], cap: int
) -> None:
    """Oracle: ``bytes.split`` of the whole stream, lines over the cap removed and counted."""
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [data[a:b] for a, b in pairwise(bounds)]
    *complete, rest = data.split(b"\n")
    splitter = LineSplitter(cap)
    lines, too_long = feed_all(splitter, chunks)
    assert lines == [line for line in complete if len(line) <= cap]
    assert too_long == sum(len(line) > cap for line in complete) + (len(rest) > cap)
    assert splitter.pending == (len(rest) if len(rest) <= cap else 0)
