"""Finished-request lines read from real files among the stats lines, whatever their length."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.parse.reader import read_logs
from exporter.sources.tail.lines import LineSplitter
from tests.support.files import write_log
from tests.support.loglines import cri, decode_line
from tests.support.requests import finish_line
from tests.support.sinks import ListSink


@pytest.mark.parametrize("json_format", [False, True], ids=["text", "json"])
def test_requests_between_stats_lines_are_read_by_the_batch_reader_too(
    tmp_path: Path, json_format: bool
) -> None:
    """Batches of 32 lines and more go through the column reader; the requests among them
    are still read, and the stats records are the same."""
    lines = []
    for i in range(200):
        lines.append(decode_line(2.4, time_text=f"2026-02-23 00:{10 + i // 60:02d}:{i % 60:02d}"))
        if i % 4 == 0:
            lines.append(finish_line(1.0 if i % 8 == 0 else 2.5, 40, json_format=json_format))

    sink = ListSink()
    read_logs([write_log(tmp_path, lines)], sink)

    assert len(sink.records) == 200
    lengths = sorted(r.accept_length for r in sink.requests if r.accept_length is not None)
    assert lengths == [1.0] * 25 + [2.5] * 25
    assert sink.lines == 250


def test_a_line_over_the_cap_is_counted_as_skipped_and_its_request_still_read(
    tmp_path: Path,
) -> None:
    huge = finish_line(1.0, 64, level=3, prompt="p" * (3 << 20), output="o" * (2 << 20))
    lines = [decode_line(2.4), huge, decode_line(2.5), finish_line(2.0, 10, level=3)]

    sink = ListSink()
    read_logs([write_log(tmp_path, lines)], sink, max_line_bytes=1 << 20)

    assert sink.skipped == ["too_long"]
    assert [(r.accept_length, r.clipped) for r in sink.requests] == [(1.0, True), (2.0, False)]
    assert len(sink.records) == 2


def test_a_clipped_line_arriving_in_many_chunks_keeps_only_its_head_and_tail() -> None:
    line = finish_line(1.25, 16, level=3, output="x" * 1_000_000).encode() + b"\n"
    splitter = LineSplitter(64 << 10)
    clipped: list[bytes] = []
    too_long = 0
    for start in range(0, len(line), 7000):
        split = splitter.feed(line[start : start + 7000])
        clipped += split.clipped
        too_long += split.too_long
        assert splitter.pending <= 64 << 10

    assert too_long == 1 and len(clipped) == 1
    assert clipped[0] == line[:512] + line[-(64 << 10) - 1 : -1]


def test_a_line_whose_start_was_never_read_gives_no_clipped_line() -> None:
    splitter = LineSplitter(1024)
    splitter.skip_line()

    split = splitter.feed(b"x" * 5000 + b"'completion_tokens': 3}\nnext\n")

    assert split.clipped == [] and split.lines == [b"next"]


@pytest.mark.e2e
def test_helper_processes_hand_on_the_requests_they_read(tmp_path: Path) -> None:
    """A big plain log is read by helper processes: their requests arrive as the reader's."""
    lines = []
    for i in range(4000):
        lines.append(
            decode_line(2.4, time_text=f"2026-02-23 0{i // 3600}:{i // 60 % 60:02d}:{i % 60:02d}")
        )
        if i % 10 == 0:
            lines.append(
                finish_line(1.0 + i / 4000, 40, json_format=i % 20 == 0, headers={"x-t": "a"})
            )
    path = write_log(tmp_path, lines)

    by_ranges, alone = ListSink(), ListSink()
    read_logs([path], by_ranges, split_above=0)
    read_logs([path], alone, split_above=1 << 40)

    assert len(alone.requests) == 400
    assert by_ranges.requests == alone.requests


def test_a_huge_request_split_by_the_container_runtime_is_read_from_its_tail(
    tmp_path: Path,
) -> None:
    """CRI writes a long line as 16 KiB partial records; joined past the cap, the line is
    skipped as too long, and its head and tail still give the request's figures."""
    huge = finish_line(1.0, 64, level=3, output="o" * (3 << 20))
    pieces = [huge[i : i + (16 << 10)] for i in range(0, len(huge), 16 << 10)]
    lines = [cri("stderr", "F", decode_line(2.4))]
    lines += [cri("stdout", "P", piece) for piece in pieces[:-1]]
    lines += [cri("stderr", "F", decode_line(2.5)), cri("stdout", "F", pieces[-1])]
    lines.append(cri("stdout", "F", finish_line(2.0, 10)))

    sink = ListSink()
    read_logs([write_log(tmp_path, lines)], sink)

    assert sink.skipped == ["too_long"]
    # Requests are not windows: one read from a clipped line may come after the batch's others.
    assert sorted((r.accept_length, r.clipped) for r in sink.requests) == [
        (1.0, True),
        (2.0, False),
    ]
    assert [r.accept_length for r in sink.records] == [2.4, 2.5]
