"""Typed events from SGLang's startup and scheduler event lines.

The stats lines tell how speculation performs; these lines tell how it was *configured*, which
is what names a cause (a finding). They arrive once, early, before any request: reading
them is the only way to diagnose a wrong flag before the first window is logged.

Input is the message part of a line, after SGLang's ``[time RANKS]`` prefix was split off.
SGLang logs its arguments as the ``ServerArgs(...)`` repr up to its 0.5 releases and as the
resolved fields' dict (``server_args={'model_path': ..., ...}``) from 0.5.23 on; both are read.
Nothing here evaluates log text: either form is split by a small scanner and only single
values are handed to ``ast.literal_eval``, so a hostile or truncated line can at worst yield
a raw string.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from exporter.engines.events import (
    AdaptiveSteps,
    Event,
    MaxRunningReset,
    MemoryPlan,
    ServerArgsEvent,
    ServerReady,
    WeightsLoaded,
)
from exporter.engines.sglang_config import start_config
from exporter.redact import is_secret_name

SERVER_ARGS_OPEN = "server_args=ServerArgs("
SERVER_ARGS_DICT_OPEN = "server_args={"
# Each form's opening text and the character that closes it.
SERVER_ARGS_FORMS = ((SERVER_ARGS_OPEN, ")"), (SERVER_ARGS_DICT_OPEN, "}"))


_WEIGHTS = re.compile(r"Load weight end\..*?\btype=([A-Za-z_][A-Za-z0-9_]*)")
# Class-name fragments of the MTP (NextN) drafts it loads under EAGLE, which is all its server
# arguments say of a NEXTN run.
MTP_CLASSES = ("NextN", "MTP")
# Class-name fragments of its draft models (the EntryClass names of its EAGLE and MTP drafts):
# a load of one of these is the draft's, whatever the rank logged before it.
DRAFT_CLASSES = ("Eagle", *MTP_CLASSES)
_INT_FIELD = r"\b{}=(\d+)"
_RESET = re.compile(r"Max running requests is reset to (\d+)")
# Step counts are small; a longer digit run is hostile input, not a setup.
_ADAPTIVE_INIT = re.compile(r"steps=(\d{1,3}), candidate_steps=\[([\d, ]{0,200})\]")
_ADAPTIVE_UPDATE = re.compile(r"steps \d{1,3} -> (\d{1,3}) \(ema_accept_len=(-?\d{1,6}\.\d+)\)")
_ADAPTIVE_SWITCH = re.compile(r"steps \d{1,3} -> (\d{1,3}), draft_tokens")
ADAPTIVE_MARKERS = (
    "AdaptiveSpeculativeParams initialized",
    "Adaptive spec params updated",
    "Switch adaptive runtime state",
)


def parse_event(message: str) -> Event | None:
    """The typed event an SGLang message carries, or ``None`` for any other line (another
    engine's start-up lines are that engine's to read)."""
    if opens_server_args(message):
        return ServerArgsEvent(start_config(parse_server_args(message)))
    if "Load weight end." in message:
        match = _WEIGHTS.search(message)
        return _weights(match.group(1)) if match else None
    if "max_total_num_tokens=" in message:
        return MemoryPlan(_int_field(message, "max_running_requests"))
    if "fired up and ready" in message:
        return ServerReady()
    if "Max running requests is reset" in message:
        match = _RESET.search(message)
        return MaxRunningReset(int(match.group(1))) if match else None
    if message.startswith(ADAPTIVE_MARKERS):
        return _adaptive(message)
    return None


def _weights(model_class: str) -> WeightsLoaded:
    return WeightsLoaded(model_class, any(part in model_class for part in DRAFT_CLASSES))


def _adaptive(message: str) -> AdaptiveSteps | None:
    if message.startswith(ADAPTIVE_MARKERS[0]):
        init = _ADAPTIVE_INIT.search(message)
        if init is None:
            return None
        candidates = tuple(int(c) for c in init.group(2).split(",") if c.strip().isdigit())
        return AdaptiveSteps(int(init.group(1)), candidates or None)
    update = _ADAPTIVE_UPDATE.search(message)
    if update is not None:
        return AdaptiveSteps(int(update.group(1)), ema_accept=float(update.group(2)))
    switch = _ADAPTIVE_SWITCH.search(message)
    return AdaptiveSteps(int(switch.group(1))) if switch is not None else None


def _int_field(message: str, name: str) -> int | None:
    match = re.search(_INT_FIELD.format(re.escape(name)), message)
    return int(match.group(1)) if match else None


def opens_server_args(text: str) -> bool:
    """Whether ``text`` holds the server-arguments line in either form."""
    return any(opening in text for opening, _ in SERVER_ARGS_FORMS)


def parse_server_args(message: str) -> dict[str, Any]:
    """Fields of a ``ServerArgs(...)`` repr or a ``{'name': value, ...}`` dict as Python
    values, secrets dropped.

    A value that is not a plain literal (an enum repr, an object address, a cut-off tail) is
    kept as its raw text rather than guessed at; a segment without its ``=`` or ``:`` (a
    truncated line, an elided ``...``) is skipped.
    """
    for opening, closer in SERVER_ARGS_FORMS:
        start = message.find(opening)
        if start >= 0:
            body = message[start + len(opening) :]
            return _fields(_split_top_level(body, closer), keyed=closer == "}")
    return {}


def _fields(segments: list[str], *, keyed: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for segment in segments:
        name, sep, raw = segment.partition(":" if keyed else "=")
        name = name.strip()
        if keyed:
            name = name[1:-1] if len(name) > 1 and name[0] == name[-1] == "'" else ""
        if not sep or not name.isidentifier() or is_secret_name(name):
            continue
        fields[name] = _literal(raw.strip())
    return fields


def _literal(raw: str) -> Any:
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def _split_top_level(body: str, closer: str) -> list[str]:
    """Split ``a=1, b='x, y', c=[1, 2])`` at depth-0 commas, up to ``closer`` at depth 0.

    Tracks quotes (with backslash escapes) and bracket nesting so commas inside strings, lists
    and dicts stay inside their value.
    """
    segments: list[str] = []
    stack: list[str] = []
    quote: str | None = None
    current: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if quote:
            current.append(char)
            if char == "\\" and index + 1 < len(body):
                current.append(body[index + 1])
                index += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
            current.append(char)
        elif stack and char == stack[-1]:
            stack.pop()
            current.append(char)
        elif char == closer and not stack:
            return [*segments, "".join(current)]
        elif char == "," and not stack:
            segments.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    return segments  # no closer: the line was cut, its last value is incomplete
