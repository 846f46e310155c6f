"""Writing a log line the way a container runtime stores it (CRI or Docker json-file).

Both runtimes cut a long line into 16 KiB pieces: CRI marks all but the last piece ``P`` and
the last ``F``; Docker's json-file driver ends only the last piece's ``log`` with ``\\n``.
Generating those envelopes lets the tests and benchmarks feed the tailer what a node really
has on disk.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

ENVELOPES = ("plain", "cri", "docker")
RUNTIME_CHUNK = 16 * 1024  # bytes per record in containerd's and Docker's log writers


def rfc3339nano(moment: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: nanoseconds with trailing zeros trimmed."""
    utc = moment.astimezone(timezone.utc)
    fraction = f"{utc.microsecond * 1000:09d}".rstrip("0")
    dot = f".{fraction}" if fraction else ""
    return f"{utc:%Y-%m-%dT%H:%M:%S}{dot}Z"


def _chunks(line: str) -> list[str]:
    data = line.encode()
    if len(data) <= RUNTIME_CHUNK:
        return [line]
    return [
        data[i : i + RUNTIME_CHUNK].decode(errors="replace")
        for i in range(0, len(data), RUNTIME_CHUNK)
    ]


def _docker_json(log: str, stream: str, time: str) -> str:
    """Docker encodes with Go's json: compact, and ``<``, ``>``, ``&`` escaped for HTML."""
    text = json.dumps({"log": log, "stream": stream, "time": time}, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def wrap(line: str, stream: str, moment: datetime, envelope: str) -> list[str]:
    """The physical records (without newline) that carry one log line."""
    if envelope == "plain":
        return [line]
    time = rfc3339nano(moment)
    pieces = _chunks(line)
    last = len(pieces) - 1
    if envelope == "cri":
        return [
            f"{time} {stream} {'F' if i == last else 'P'} {piece}" for i, piece in enumerate(pieces)
        ]
    return [
        _docker_json(piece + ("\n" if i == last else ""), stream, time)
        for i, piece in enumerate(pieces)
    ]
