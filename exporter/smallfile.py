"""Reading a file an operator names, which may be anything: a FIFO, a device, a huge file.

Beneath every layer, and light (no validation library): the one-shot commands read baselines
and draft configs through it, and the settings files, the upstream token and the web config too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class FileRefused(OSError):
    """A path that names no small regular file; ``reason`` is ``not_regular`` or ``too_large``."""

    def __init__(self, problem: str, reason: str) -> None:
        super().__init__(problem)
        self.reason = reason


def read_small_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them, or an OSError.

    Opened without blocking and checked before anything is read: a FIFO would hang the reader
    for good (at start, without a word) and ``/dev/zero`` never ends (3 GB in 3 s as a token
    file). The error says the problem without the path, which callers name their own way.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused("not a regular file", "not_regular")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused(f"larger than {limit} bytes", "too_large")
    return data
