"""Standard input as a line source: the same splitting and cap as files, over real pipes."""

from __future__ import annotations

import array
import fcntl
import os
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import pytest

from exporter.sources import StdinSource
from tests.support.tailing import FailingOnce, Recorder
from tests.support.waiting import PROCESS_TIMEOUT, wait_for


@contextmanager
def piped(
    rec: Recorder | None = None, *, max_line_bytes: int = 1 << 20
) -> Iterator[tuple[BinaryIO, StdinSource, Recorder]]:
    """A started ``StdinSource`` reading a real pipe; yields the pipe's unbuffered write end."""
    read_fd, write_fd = os.pipe()
    rec = rec if rec is not None else Recorder()
    with os.fdopen(read_fd, "rb") as stream, os.fdopen(write_fd, "wb", buffering=0) as writer:
        source = StdinSource(rec, stream, max_line_bytes=max_line_bytes)
        source.start()
        try:
            yield writer, source, rec
        finally:
            source.stop()


def unread_bytes(pipe: BinaryIO) -> int:
    """Bytes written to ``pipe`` that its reader has not taken yet."""
    count = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def test_pipe_lines_arrive_in_order_across_partial_writes() -> None:
    with piped() as (writer, source, rec):
        writer.write(b"Decode batch, accept len: 2.")
        wait_for(lambda: unread_bytes(writer) == 0, what="the partial write read on its own")
        writer.write(b"50\r\nnext\n")
        wait_for(lambda: len(rec.lines) == 2, what="both lines")
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
        wait_for(lambda: unread_bytes(writer) == 0, what="the first part read on its own")
        writer.write(b"z" * 150 + b"\nafter\n" + b"w" * 101)
        writer.close()
        assert source.wait(2.0)
    assert rec.lines == [b"before", b"after"]
    assert rec.reasons("skipped") == {"too_long": 2}


def test_stop_returns_promptly_while_no_input_arrives() -> None:
    """The pipe stays open and silent: stop returns, and the reading thread ends, without a
    line or the pipe's end (the test's own deadline only keeps a stop that waits for input
    from hanging the run)."""
    with piped() as (writer, source, _rec):
        wait_for(source.ready.is_set, what="the reading thread")
        stopping = threading.Thread(target=source.stop)
        stopping.start()
        stopping.join(PROCESS_TIMEOUT)
        assert not stopping.is_alive()
        assert source.wait(PROCESS_TIMEOUT)
        assert not writer.closed and unread_bytes(writer) == 0  # nothing written meanwhile


@pytest.mark.e2e
def test_output_of_a_real_process_is_read_through_its_pipe() -> None:
    script = "import sys\nfor i in range(20000): sys.stdout.write(f'line {i}\\n')"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    stream = child.stdout
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
        wait_for(lambda: rec.reasons("read_error")["internal"] == 1, what="the counted failure")
        writer.write(b"after the bug\n")
        writer.close()
        assert source.wait(2.0)
    assert rec.lines == [b"after the bug"]
