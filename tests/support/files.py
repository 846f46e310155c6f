"""Writing to a log the way a server does."""

from __future__ import annotations

from pathlib import Path


def append(path: Path, *lines: str | bytes, raw: bytes = b"") -> None:
    """One write to the end of ``path``: each line newline-terminated, then ``raw`` as is.

    ``raw`` carries what lines cannot: a partial line, ``\\r\\n`` endings, invalid bytes.
    """
    data = b"".join((line.encode() if isinstance(line, str) else line) + b"\n" for line in lines)
    with path.open("ab") as handle:
        handle.write(data + raw)


def write_log(tmp_path: Path, lines: list[str]) -> str:
    """A whole log, ``server.log`` in ``tmp_path``; its path, as a command line takes it."""
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)
