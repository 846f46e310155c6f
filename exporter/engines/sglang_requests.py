"""SGLang's per-request ``Finish`` records (``--log-requests``): one accept length per request.

SGLang's request logger writes each finished request as one line, in its own format
(``[date time] message``, no rank list), either as text::

    [2026-02-23 00:14:33] Finish: obj=GenerateReqInput(...), headers={...}, out={..., 'meta_info': {
        'id': ..., 'completion_tokens': 120, ..., 'spec_accept_rate': 0.45, 'spec_accept_length':
        2.35, 'spec_num_correct_drafts': 69, 'spec_num_proposed_drafts': 153, 'spec_verify_ct':
        51, ...}}

or, with ``--log-requests-format json``, as a ``request.finished`` JSON object with the same
``out.meta_info`` keys. Whatever ``--log-requests-level`` keeps (prompt and output text, token
ids, at level 3 without a length cap), the speculation figures come after all of it: the
engine adds them to ``meta_info`` once the request has finished, behind the output and behind
``completion_tokens``.

That order is what this reader rests on, because the rest of the record is the user's text:
only the last ``TAIL_BYTES`` of a whole line are searched, each key by its last occurrence,
and the speculation keys count only after the last ``meta_info`` and its
``completion_tokens``. A prompt, an output or a stop string that quotes these keys always
comes before the real ``completion_tokens``, so it can never be read as the figures.

Nothing of the text or ids is kept; of the logged headers, only values with the shape of a
label, until the state has picked the one it is configured to count by (docs/metrics.md,
"Per-request acceptance").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from math import isfinite

from exporter.engines.counters import MAX_ACCEPT_LENGTH
from exporter.engines.record import RequestRecord
from exporter.engines.sglang import iso_time

# Markers the pipeline's byte filter looks for: the text and the JSON form.
REQUEST_MARKERS: tuple[bytes, ...] = (b"] Finish: obj=", b'"event": "request.finished"')
# The speculation figures and the time stats after them fill about 2 KB; what may follow
# (``prompt_token_ids``, only when a client asks for them) is not searched.
TAIL_BYTES = 64 << 10
# How a record's message starts, in either form (the head below), in the markers' order: a
# batch none of whose messages starts so holds no record of that form.
REQUEST_HEADS: tuple[bytes, ...] = (b"Finish: obj=", b'{"timestamp": "')
# The request logger's own prefix, then either record head. Matched at the line start, so the
# work is bounded whatever the line's length.
_HEAD = re.compile(
    rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] "
    rb'(?:(Finish: obj=)|\{"timestamp": "[0-9T:.+-]{1,40}", "event": "request\.finished", )'
)
_NUMBER = re.compile(rb"-?[0-9][0-9.eE+-]{0,31}")
_INTEGER = re.compile(rb"[0-9]{1,18}")
# Headers are logged between the request and its output, only the whitelisted ones
# (``SGLANG_LOG_REQUEST_HEADERS``), as a dict (text) or an object (JSON). Their values are
# kept only when they look like a label, and only until the state has picked the configured one.
_HEADERS = {
    b"'": re.compile(rb", headers=\{((?:'[a-z0-9_-]{1,64}': '[^'\\\n]{0,200}'(?:, )?){1,16})\}"),
    b'"': re.compile(rb', "headers": \{((?:"[a-z0-9_-]{1,64}": "[^"\\\n]{0,200}"(?:, )?){1,16})\}'),
}
_HEADER_PAIR = {
    b"'": re.compile(rb"'([a-z0-9_-]{1,64})': '([^']{0,200})'"),
    b'"': re.compile(rb'"([a-z0-9_-]{1,64})": "([^"]{0,200})"'),
}
LABEL_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,62}")
MAX_HEADERS = 4


def request_lines(blob: bytes, markers: tuple[bytes, ...] = REQUEST_MARKERS) -> list[bytes]:
    """The lines of ``blob`` (each between two newlines) that carry one of ``markers`` (of
    ``REQUEST_MARKERS``), in order: found by the markers' C scans, so the batch's other lines
    cost nothing."""
    if len(markers) == 1:  # one form: its lines are found in order, each once
        return _marked_lines(blob, markers[0])
    starts: dict[int, bytes] = {}
    for marker in markers:
        at = blob.find(marker)
        while at >= 0:
            start = blob.rfind(b"\n", 0, at) + 1
            end = blob.find(b"\n", at)
            end = len(blob) if end < 0 else end
            starts[start] = blob[start:end]
            at = blob.find(marker, end)
    return [starts[start] for start in sorted(starts)]


def _marked_lines(blob: bytes, marker: bytes) -> list[bytes]:
    """:func:`request_lines` of one marker: no line is found twice, none out of order."""
    lines = []
    find, rfind = blob.find, blob.rfind
    at = find(marker)
    while at >= 0:
        start = rfind(b"\n", 0, at) + 1
        end = find(b"\n", at)
        if end < 0:
            lines.append(blob[start:])
            break
        lines.append(blob[start:end])
        at = find(marker, end)
    return lines


def is_request_record(line: bytes) -> bool:
    """Whether ``line`` starts as SGLang's request logger writes a finished request."""
    return _HEAD.match(line) is not None


def read_request(
    line: bytes, clipped: bool = False, times: Callable[[bytes], str] = iso_time
) -> RequestRecord | None:
    """The figures of one finished-request line (``clipped``: only its head and tail were
    kept, see ``sources.tail.lines``), or None when ``line`` is not one.

    A record without figures (a server without speculation, a request that never reached a
    verify round, figures pushed out of the tail by opt-in outputs) is still a finished
    request: its ``accept_length`` is None. The line is searched in place, never copied: it
    may be a megabyte long. ``times`` reads the logged stamp as :func:`iso_time` does (a
    reader's cache of it: a busy node logs many requests a second).
    """
    head = _HEAD.match(line)
    if head is None:
        return None
    time = times(head[1])
    keys = _TEXT_KEYS if head[2] else _JSON_KEYS
    headers = _headers(line, keys.quote) if keys.headers in line else ()
    start = max(head.end(0), len(line) - TAIL_BYTES)
    # A whole record ends its output's dict; a line cut short (a writer killed) may end
    # inside the output, whose text must not be read as the figures.
    info_at = line.rfind(keys.meta_info, start) if line.endswith(_WHOLE) else -1
    completion_at = line.rfind(keys.completion, info_at + 1) if info_at >= 0 else -1
    if completion_at < 0:
        return _request((time, None, None, None, None, clipped, headers))
    completion = _value(line, completion_at + len(keys.completion), _INTEGER)
    verify_at = line.rfind(keys.verify, completion_at)
    length_at = line.rfind(keys.length, completion_at)
    rounds = _value(line, verify_at + len(keys.verify), _INTEGER) if verify_at > 0 else None
    length = _value(line, length_at + len(keys.length), _NUMBER) if length_at > 0 else None
    if rounds is None or length is None or rounds <= 0 or not 1 <= length <= MAX_ACCEPT_LENGTH:
        # No figures, as a request that never drafted: an accept length of 1e308 left the
        # histogram's sum at +Inf for good, and 0 or 500 are no verify round's.
        return _request((time, None, None, None, _int(completion), clipped, headers))
    rate_at = line.rfind(keys.rate, completion_at)
    rate = _value(line, rate_at + len(keys.rate), _NUMBER) if rate_at > 0 else None
    if rate is not None and not 0 <= rate <= 1:
        rate = None
    return _request((time, length, rate, int(rounds), _int(completion), clipped, headers))


# RequestRecord of its fields in order, built in C (``tuple.__new__``), not by the named
# tuple's ``__new__`` in Python: every field is given.
_request = partial(tuple.__new__, RequestRecord)


class _Keys:
    """The keys of one form as they appear in its lines (quoted, with their separator)."""

    def __init__(self, quote: bytes, headers: bytes) -> None:
        self.quote = quote
        self.headers = headers
        self.meta_info = quote + b"meta_info" + quote + b": {"
        self.completion = _key(quote, b"completion_tokens")
        self.verify = _key(quote, b"spec_verify_ct")
        self.length = _key(quote, b"spec_accept_length")
        self.rate = _key(quote, b"spec_accept_rate")


def _key(quote: bytes, name: bytes) -> bytes:
    return quote + name + quote + b": "


_TEXT_KEYS = _Keys(b"'", b", headers={")
_JSON_KEYS = _Keys(b'"', b', "headers": {')
_WHOLE = (b"}", b"}\r", b"} ")


def _headers(line: bytes, quote: bytes) -> tuple[tuple[str, str], ...]:
    """The label-shaped values of the first logged ``headers``. A client who quotes such a
    dict in its prompt can only choose its own label, as sending the header itself could."""
    found = _HEADERS[quote].search(line)
    if found is None:
        return ()
    pairs = []
    for name, raw in _HEADER_PAIR[quote].findall(found[1])[:MAX_HEADERS]:
        value = raw.decode("utf-8", "replace")
        if LABEL_VALUE.fullmatch(value):
            pairs.append((name.decode("ascii"), value))
    return tuple(pairs)


def _value(line: bytes, at: int, pattern: re.Pattern[bytes]) -> float | None:
    """The finite number ``pattern`` finds at ``at`` (just after its key), or None."""
    found = pattern.match(line, at)
    if found is None:
        return None
    try:
        number = float(found[0])
    except ValueError:
        return None
    return number if isfinite(number) else None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
