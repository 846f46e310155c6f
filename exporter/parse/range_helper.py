"""The helper process of :mod:`.ranges`: ``python -m exporter.parse.range_helper FD START END
MAX_LINE_BYTES PARENT ENGINE`` reads bytes ``[START, END)`` of the log of ``ENGINE`` open as
descriptor ``FD`` and spools the sink calls it makes to stdout, a frame per chunk, for the
reader to replay.

A module of its own because it reads with :mod:`.reader`, which cuts logs with :mod:`.ranges`:
kept inside ``ranges`` it made the two import each other.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

from exporter.parse.ranges import SpoolSink
from exporter.parse.reader import read_range
from exporter.runtime import tune_gc


def main(argv: list[str]) -> int:
    """The helper: read descriptor ``FD`` from ``START`` to ``END``, spool the calls to stdout."""
    tune_gc()
    fd, start, end, max_line_bytes, parent = (int(arg) for arg in argv[:5])
    _die_with(parent)
    sink = SpoolSink(sys.stdout.buffer)
    read_range(fd, start, end, sink, max_line_bytes, on_line_start=sink.flush, engine=argv[5])
    return 0


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent: int) -> None:
    """Be killed when the reader goes, however it goes (SIGKILL, the OOM killer): a helper
    left behind would read on for minutes, holding a core and its spool. Linux only; the
    ``getppid`` check covers a parent gone before the request took effect."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
