"""The lines a server writes as it dies, in SGLang's and vLLM's own words.

A crashed server writes no more stats lines, so every alert that rests on them goes quiet
exactly when the node is down. These lines are the only word the log gives: SGLang's scheduler
logs ``Scheduler hit an exception: <traceback>`` and signals its parent, which logs ``SIGQUIT
received. ... It usually means one child failed.`` (``Received sigquit from a child process``
while still launching); vLLM's engine core logs ``EngineCore encountered a fatal error.`` or
``EngineCore failed to start.`` and its traceback. The traceback's last line names the cause
(``torch.OutOfMemoryError: CUDA out of memory``, ``NCCL error``, a CUDA-graph capture that
ran out of memory at start-up).

A scheduler exception, a SIGQUIT or a fatal engine error ends the run for good (``final``);
a traceback or an exception line alone may be one request's failure, and ends nothing if
decode windows follow it. Only the start of a message counts, as for every other event: a
request log quoting these words never kills a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Raw-byte markers of the lines below, for the pipeline's cheap filter.
MARKERS: tuple[bytes, ...] = (
    b"Scheduler hit an exception",
    b"SIGQUIT received",
    b"Received sigquit from a child process",
    b"EngineCore encountered a fatal error",
    b"EngineCore failed to start",
    b"Traceback (most recent call last)",
    b"out of memory",
    b"NCCL error",
    b"Capture cuda graph failed",
    b"Error: ",
    b"Exception: ",
)
# A cause is quoted in a finding's text, never in a label; a hostile line stays short there.
MAX_CAUSE = 160

# (message start, kind): the lines that end a run for good.
_FINAL = (
    ("Scheduler hit an exception", "scheduler exception"),
    ("SIGQUIT received", "SIGQUIT received: a server process failed"),
    ("Received sigquit from a child process", "SIGQUIT received while starting"),
    ("EngineCore encountered a fatal error", "engine core fatal error"),
    ("EngineCore failed to start", "engine core failed to start"),
)
_TRACEBACK = "Traceback (most recent call last):"
# The starts of messages that open a server's end (:func:`opens`): a line with the engine's
# prefix matters only when its message starts so, whatever other marker it quotes.
OPENERS: tuple[str, ...] = (*(start for start, _ in _FINAL), _TRACEBACK)
# The last line of a Python traceback: the exception's (dotted) class, then its message. A
# vLLM child process tags its lines with ``(EngineCore_DP0 pid=N) ``.
_EXCEPTION = re.compile(
    r"(?:\([^()\s]+ pid=\d+\) )?((?:[A-Za-z_][\w.]{0,80})?(?:Error|Exception)): "
)
_TAG = re.compile(r"\([^()\s]+ pid=\d+\) ")
# Causes an on-call acts on differently, by the words the engines use; first match wins.
_CAUSES = (
    ("Capture cuda graph failed", "CUDA graph capture failed: out of GPU memory at start-up"),
    ("out of memory", "CUDA out of memory"),
    ("NCCL error", "NCCL error (GPU communication)"),
)


@dataclass(frozen=True, slots=True)
class Ending:
    """How a server run ended, as far as its log says: what was logged, and the cause.

    ``time`` is the logged time of the first line that said so (None when only unprefixed
    traceback lines told).
    """

    kind: str
    cause: str | None
    final: bool
    time: str | None = None

    def merged(self, later: Ending) -> Ending:
        """One ending from two lines of the same death: the first final line's kind and time,
        the most telling cause."""
        first = self if self.final or not later.final else later
        return Ending(
            kind=first.kind,
            cause=_better_cause(self.cause, later.cause),
            final=self.final or later.final,
            time=first.time or self.time or later.time,
        )


def opens(message: str) -> bool:
    """Whether the message of a line with the engine's prefix begins a server's end.

    Only its own words at the start count; an engine's prefixed line that merely names an
    exception (a request's error) is no ending, unlike a traceback's unprefixed last line.
    """
    return message.startswith(OPENERS)


def parse(message: str, time: str | None = None) -> Ending | None:
    """The ending a message (after the engine's prefix) or an unprefixed line tells, if any."""
    for start, kind in _FINAL:
        if message.startswith(start):
            return Ending(kind, _cause(message), True, time)
    body = _TAG.sub("", message, count=1) if message.startswith("(") else message
    if body.startswith(_TRACEBACK):
        return Ending("traceback", None, False, time)
    exception = _EXCEPTION.match(message)
    if exception is not None:
        cause = _cause(message) or message[exception.start(1) :][:MAX_CAUSE]
        return Ending("traceback", cause, False, time)
    return None


def _cause(text: str) -> str | None:
    return next((cause for words, cause in _CAUSES if words in text), None)


def _better_cause(first: str | None, later: str | None) -> str | None:
    """The more telling of two causes: a named one over a quoted exception line, the named
    one listed first in ``_CAUSES`` over the others; on a tie, the first found."""
    return min((first, later), key=_rank) if first is not None else later


def _rank(cause: str | None) -> int:
    named = [named for _, named in _CAUSES]
    if cause is None:
        return len(named) + 1
    return named.index(cause) if cause in named else len(named)
