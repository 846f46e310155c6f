"""Copy a server's console output to stdout and to a size-rotated log file.

SGLang logs only to the console (its own lines to stderr, uvicorn's access lines to stdout).
A specwatch sidecar needs those lines in a file on a volume both containers share, while
``kubectl logs`` / ``docker logs`` should keep working. Plain ``tee -a`` does both but grows
the file until the volume fills (an ``emptyDir`` over its ``sizeLimit`` evicts the pod), so
this keeps the file under ``--max-bytes`` by rotating it the way specwatch follows best:
rename to ``<file>.1`` and create a fresh file, never truncating in place.

Only the standard library is used: it runs with the SGLang image's own Python.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import BinaryIO


class RotatingFile:
    """An append-only file that is renamed to ``<path>.1`` once it would exceed ``max_bytes``."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._file = open(path, "ab")  # noqa: SIM115 - held open for the life of the process
        self._size = self._file.tell()

    def write(self, line: bytes) -> None:
        """Append one line, rotating first when it would push the file past the limit."""
        if self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        self._file.write(line)
        self._file.flush()
        self._size += len(line)

    def _rotate(self) -> None:
        self._file.close()
        for index in range(self.backups - 1, 0, -1):
            older = f"{self.path}.{index}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{index + 1}")
        if self.backups:
            os.replace(self.path, f"{self.path}.1")
        else:
            os.unlink(self.path)
        self._file = open(self.path, "ab")  # noqa: SIM115
        self._size = 0

    def close(self) -> None:
        self._file.close()


def copy_lines(source: BinaryIO, console: BinaryIO, log: RotatingFile) -> None:
    """Forward every line to both sinks; a closed console must not stop the log file."""
    for line in source:
        log.write(line)
        try:
            console.write(line)
            console.flush()
        except (BrokenPipeError, ValueError):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="log file to append to, e.g. /var/log/sglang/server.log")
    parser.add_argument("--max-bytes", type=int, default=50 << 20, help="rotate above this size")
    parser.add_argument("--backups", type=int, default=1, help="rotated files kept: <path>.1..N")
    args = parser.parse_args(argv)
    if args.max_bytes < 1 or args.backups < 0:
        parser.error("--max-bytes must be positive and --backups not negative")
    log = RotatingFile(args.path, args.max_bytes, args.backups)
    try:
        copy_lines(sys.stdin.buffer, sys.stdout.buffer, log)
    finally:
        log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
