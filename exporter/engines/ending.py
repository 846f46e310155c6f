"""The lines a server writes as it dies, in SGLang's and vLLM's own words.

A crashed server writes no more stats lines, so every alert that rests on them goes quiet
exactly when the node is down. These lines are the only word the log gives: SGLang's scheduler
logs ``Scheduler hit an exception: <traceback>`` and signals its parent, which logs ``SIGQUIT
received. ... It usually means one child failed.`` (``Received sigquit from a child process``
while still launching); vLLM's engine core logs ``EngineCore encountered a fatal error.`` or
``EngineCore failed to start.`` and its traceback. The traceback's last line names the cause
(``torch.OutOfMemoryError: CUDA out of memory``, ``NCCL error``, a CUDA-graph capture that
ran out of memory at start-up). A chained traceback (``The above exception was the direct
cause of the following exception:``) names it last: the final exception of the chain is
quoted, not the first; a traceback that follows without a chain line (vLLM's API server
saying the engine died) is another's, and the first one's cause stays.

A scheduler exception, a SIGQUIT or a fatal engine error ends the run for good (``final``);
a traceback or an exception line alone may be one request's failure, and ends nothing if
decode windows follow it. Only the start of a message counts, as for every other event: a
request log quoting these words never kills a server.

A server stopped on purpose (Ctrl-C, a container stop: SIGINT to the whole process group)
ends in tracebacks too: SGLang's scheduler and detokenizer catch ``Exception`` only, so the
``KeyboardInterrupt`` reaches multiprocessing, which prints ``Process Process-1:`` and the
traceback, ending in a bare ``KeyboardInterrupt`` line. Then uvicorn, the HTTP server of
both engines, shuts down and logs ``Finished server process [pid]``. A run whose every
traceback since its last decode window ended in ``KeyboardInterrupt`` and which logged that
line was ``stopped``: no failure. A traceback of anything else, one whose end was not read,
or interrupted children without the server's own end, is still a failing server.
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
    b"The above exception was the direct cause",
    b"During handling of the above exception",
    b"KeyboardInterrupt",
    b"Finished server process",
)
# A cause is quoted in a finding's text, never in a label; a hostile line stays short there.
# A traceback's last line often names a model path: long enough for one, cut between words.
MAX_CAUSE = 240

# (message start, kind): the lines that end a run for good.
_FINAL = (
    ("Scheduler hit an exception", "scheduler exception"),
    ("SIGQUIT received", "SIGQUIT received: a server process failed"),
    ("Received sigquit from a child process", "SIGQUIT received while starting"),
    ("EngineCore encountered a fatal error", "engine core fatal error"),
    ("EngineCore failed to start", "engine core failed to start"),
)
_TRACEBACK = "Traceback (most recent call last):"
# The lines between two exceptions of one chain: the later one is what was raised in the end.
_CHAINED = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
# uvicorn's last line, once its server has shut down (its level prefix padded to 10 columns).
_STOPPED = "INFO:     Finished server process ["
# The last line of a traceback of a process interrupted by SIGINT (Ctrl-C, a stop).
_INTERRUPTED = re.compile(r"KeyboardInterrupt(?:: |$)")
# The starts of messages that open a server's end (:func:`opens`): a line with the engine's
# prefix matters only when its message starts so, whatever other marker it quotes.
OPENERS: tuple[str, ...] = (*(start for start, _ in _FINAL), _TRACEBACK, _STOPPED)
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
    traceback lines told). ``latest``: the cause is the newest exception line's; ``chained``:
    a chain line followed that exception, so the next exception line supersedes it.
    ``tracebacks`` and ``interrupts``: the tracebacks opened, and those that ended in
    ``KeyboardInterrupt``; ``stop``: the HTTP server logged its own end.
    """

    kind: str
    cause: str | None
    final: bool
    time: str | None = None
    latest: bool = False
    chained: bool = False
    tracebacks: int = 0
    interrupts: int = 0
    stop: bool = False

    @property
    def stopped(self) -> bool:
        """Stopped on purpose: the server's own end logged, and every traceback before it an
        interrupted process's (see the module's text), none of a crash."""
        clean = self.cause is None and self.tracebacks == self.interrupts
        return self.stop and not self.final and clean

    def merged(self, later: Ending) -> Ending:
        """One ending from two lines of the same death: the first final line's kind and time,
        the most telling cause (of a chain, its last exception's)."""
        first = self if self.final or not later.final else later
        # A stop read before a traceback is not what that traceback was.
        kind = later.kind if first.kind == "stopped" else first.kind
        cause = _better_cause(self.cause, later.cause, self.chained)
        if later.cause is not None:
            latest, chained = cause == later.cause, False
        elif later.chained:
            latest, chained = self.latest, self.latest
        else:  # a traceback's first line: of the chain, or of another traceback
            latest, chained = self.latest, self.chained
        return Ending(
            kind=kind,
            cause=cause,
            final=self.final or later.final,
            time=first.time or self.time or later.time,
            latest=latest,
            chained=chained,
            tracebacks=self.tracebacks + later.tracebacks,
            interrupts=self.interrupts + later.interrupts,
            stop=self.stop or later.stop,
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
        return Ending("traceback", None, False, time, tracebacks=1)
    if _INTERRUPTED.match(body):
        return Ending("traceback", None, False, time, interrupts=1)
    if body.startswith(_STOPPED):
        return Ending("stopped", None, False, time, stop=True)
    if body.startswith(_CHAINED):
        return Ending("traceback", None, False, time, chained=True)
    exception = _EXCEPTION.match(message)
    if exception is not None:
        cause = _cause(message) or quoted(message[exception.start(1) :])
        return Ending("traceback", cause, False, time, latest=True)
    return None


def quoted(line: str) -> str:
    """An exception line as a finding quotes it: whole when it fits ``MAX_CAUSE``, else cut
    at the last space before it (never inside a path or a word) and marked as cut."""
    line = line.rstrip()
    if len(line) <= MAX_CAUSE:
        return line
    cut = line.rfind(" ", 0, MAX_CAUSE - 1)
    return f"{line[: cut if cut > 0 else MAX_CAUSE - 1].rstrip()}…"


def _cause(text: str) -> str | None:
    return next((cause for words, cause in _CAUSES if words in text), None)


def _better_cause(first: str | None, later: str | None, chained: bool = False) -> str | None:
    """The more telling of two causes: a named one over a quoted exception line, the named
    one listed first in ``_CAUSES`` over the others; on a tie the first found, or the later
    when it ends the chain the first began."""
    if first is None:
        return later
    return min((later, first) if chained else (first, later), key=_rank)


def _rank(cause: str | None) -> int:
    named = [named for _, named in _CAUSES]
    if cause is None:
        return len(named) + 1
    return named.index(cause) if cause in named else len(named)
