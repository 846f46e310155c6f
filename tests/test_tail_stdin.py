"""Standard input as a line source: the same splitting and cap as files, over real pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from exporter.sources import StdinSource
from tests.test_tail_support import FailingOnce, Recorder, let_tailer_run, wait_until


@contextmanager
def piped(
    rec: Recorder | None = None, **options: int
) -> Iterator[tuple[BinaryIO, StdinSource, Recorder]]:
    """A started ``StdinSource`` reading a real pipe; yields the pipe's unbuffered write end."""
    read_fd, write_fd = os.pipe()
    rec = rec if rec is not None else Recorder()
    with os.fdopen(read_fd, "rb") as stream, os.fdopen(write_fd, "wb", buffering=0) as writer:
        source = StdinSource(rec, stream, **options)
        source.start()
        try:
            yield writer, source, rec
        finally:
            source.stop()


def test_pipe_lines_arrive_in_order_across_partial_writes() -> None:
    with piped() as (writer, source, rec):
        writer.write(b"Decode batch, accept len: 2.")
        let_tailer_run()
        assert rec.lines == []
        writer.write(b"50\r\nnext\n")
        wait_until(lambda: len(rec.lines) == 2, "both lines")
        assert rec.lines == [b"Decode batch, accept len: 2.50\r", b"next"]
        writer.close()
        assert source.wait(2.0)


def test_unterminated_last_line_is_delivered_at_end_of_input() -> None:
    with piped() as (writer, source, rec):
        writer.write(b"one\nlast without newline")
        writer.close()
        assert source.wait(2.0)
    assert rec.lines == [b"one", b"last without newline"]


def test_too_long_line_on_stdin_is_skipped_and_counted_once() -> None:
    with piped(max_line_bytes=100) as (writer, source, rec):
        writer.write(b"before\n" + b"z" * 150)
        let_tailer_run(0.05)
        writer.write(b"z" * 150 + b"\nafter\n" + b"w" * 101)
        writer.close()
        assert source.wait(2.0)
    assert rec.lines == [b"before", b"after"]
    assert rec.reasons("skipped") == {"too_long": 2}


def test_stop_returns_promptly_while_no_input_arrives() -> None:
    with piped() as (_, source, _rec):
        let_tailer_run(0.05)
        started = time.monotonic()
        source.stop()
        assert time.monotonic() - started < 1.0
        assert source.wait(0.5)


def test_output_of_a_real_process_is_read_through_its_pipe() -> None:
    script = "import sys\nfor i in range(20000): sys.stdout.write(f'line {i}\\n')"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    stream: BinaryIO | None = child.stdout
    assert stream is not None
    rec = Recorder()
    source = StdinSource(rec, stream)
    source.start()
    try:
        assert source.wait(5.0)
    finally:
        source.stop()
        child.wait()
        stream.close()
    assert rec.lines == [f"line {i}".encode() for i in range(20000)]


def test_a_raising_consumer_costs_one_chunk_of_stdin_not_the_rest() -> None:
    with piped(FailingOnce()) as (writer, source, rec):
        writer.write(b"lost to the bug\n")
        wait_until(lambda: rec.reasons("read_error")["internal"] == 1, "the counted failure")
        writer.write(b"after the bug\n")
        writer.close()
        assert source.wait(2.0)
    assert rec.lines == [b"after the bug"]
