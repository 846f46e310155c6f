"""Writing to a log the way a server does."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def append(path: Path, *lines: str | bytes, raw: bytes = b"") -> None:
    """One write to the end of ``path``: each line newline-terminated, then ``raw`` as is.

    ``raw`` carries what lines cannot: a partial line, ``\\r\\n`` endings, invalid bytes.
    """
    data = b"".join((line.encode() if isinstance(line, str) else line) + b"\n" for line in lines)
    with path.open("ab") as handle:
        handle.write(data + raw)


@contextmanager
def live_lines(log: Path, make: Callable[[], list[str]], every: float) -> Iterator[None]:
    """Append ``make()``'s lines to ``log`` every ``every`` seconds until the block ends: a
    live server, for the tests that watch alerts fire and resolve in a real Prometheus."""
    stop = threading.Event()

    def write() -> None:
        while not stop.wait(every):
            append(log, *make())

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def write_log(tmp_path: Path, lines: list[str]) -> str:
    """A whole log, ``server.log`` in ``tmp_path``; its path, as a command line takes it."""
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def interleaved(first: list[str], second: list[str], alone: int = 0) -> list[str]:
    """Two servers appending to one file: ``first``'s first ``alone`` lines, then the rest of
    both, each line where its share of the file puts it (both write until the end)."""
    rest, merged = first[alone:], list(first[:alone])
    i = j = 0
    while i < len(rest) or j < len(second):
        if j >= len(second) or (i < len(rest) and i * len(second) <= j * len(rest)):
            merged.append(rest[i])
            i += 1
        else:
            merged.append(second[j])
            j += 1
    return merged
