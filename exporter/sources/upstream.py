"""Scrape a server's own ``/metrics`` and ``/server_info`` for one target, off the request path.

The log is the primary source; this fills what it lacks (no log mounted, log level hiding the
stats, a quiet log after rotation). A scrape runs in its own thread and publishes an immutable
:class:`UpstreamSnapshot` by swapping one reference, so specwatch's own ``/metrics`` reads the
latest snapshot without ever waiting on a slow or dead server.

Failures never raise out of a scrape: each one is classified into a fixed ``reason`` and
counted (``timeout|refused|http|garbage|too_large|other``), and the endpoint reports down with
no values, following the exporter rule that stale upstream values are not re-exported.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import json
import logging
import math
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from email.message import Message
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from prometheus_client.openmetrics.parser import (
    text_fd_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_fd_to_metric_families

from exporter import clock
from exporter.engines import registry
from exporter.engines.draft_config import DraftLookups, with_local_draft
from exporter.engines.engine import Engine
from exporter.engines.record import UpstreamValues
from exporter.engines.server_config import ServerConfig
from exporter.redact import drop_secrets, url_without_secrets
from exporter.smallfile import read_small_file
from exporter.sources import resolve, upstream_checks
from exporter.sources.deadlines import DEADLINES
from exporter.sources.endpoints import find_endpoints
from exporter.sources.upstream_snapshot import EndpointStatus, UpstreamSnapshot

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 10 * 1024 * 1024
MAX_TOKEN_BYTES = 64 << 10  # an API key is some dozen bytes; a JWT a few kB
MAX_SAMPLES = 20_000  # a server with 64 DP ranks exports a few thousand
MAX_LINES = 3 * MAX_SAMPLES  # each sample's line, and a HELP and a TYPE line at most
# prometheus-client parses labels at about 3 us each, and a line's labels in time quadratic in
# their number: one 3 MB line of labels took minutes, 10 MB of short labels 4 s. A server's
# samples carry a few labels each, its longest line (a LoRA adapter list) some kB.
MAX_LINE_BYTES = 64 << 10
MAX_LABELS = 10 * MAX_SAMPLES
DISAGREEMENT_NOTE_SECONDS = 600.0
_CHUNK = 64 * 1024
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class ScrapeError(Exception):
    """A failed fetch or parse, with its counted ``reason`` and an optional HTTP status."""

    def __init__(self, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.status = status
        # A 404 at a path ending in /metrics, where SGLang serves it when metrics are on.
        self.at_metrics = False


def bearer_token(token_file: str | None = None, token_env: str | None = None) -> str | None:
    """The bearer token, read fresh on each call so a rotated secret file is picked up."""
    if token_file:
        try:
            raw = read_small_file(Path(token_file), MAX_TOKEN_BYTES)
            return raw.decode("utf-8", errors="replace").strip() or None
        except OSError as exc:
            raise ScrapeError(
                "other", f"bearer token file unreadable: {exc.strerror or exc}"
            ) from exc
    if token_env:
        return os.environ.get(token_env) or None
    return None


def fetch(url: str, timeout: float, token: str | None = None) -> tuple[bytes, str]:
    """GET ``url``: body (at most ``MAX_BODY_BYTES``) and content type, or :class:`ScrapeError`.

    ``timeout`` bounds the whole exchange (connect, response headers, body, redirects), not
    each socket read, so a server that trickles bytes cannot hold the scraper beyond its
    deadline. Redirects are followed only to the same scheme, host and port: another
    host's numbers are not this server's.
    """
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        try:
            status, headers, body = _get(url, deadline, token)
        except ScrapeError:
            raise
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise ScrapeError("timeout", "no complete answer within the deadline") from None
            raise _classify(exc) from None
        if status in _REDIRECTS:
            url = _same_origin(url, headers.get("Location") or "", status)
            continue
        if not 200 <= status < 300:
            raise ScrapeError("http", f"HTTP {status}", status)
        return body, headers.get("Content-Type", "")
    raise ScrapeError("http", f"more than {MAX_REDIRECTS} redirects", status)


MAX_REDIRECTS = 3
_REDIRECTS = (301, 302, 303, 307, 308)


def _get(url: str, deadline: float, token: str | None) -> tuple[int, Message, bytes]:
    """One GET without redirects; its socket is shut down at ``deadline``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError("other", f"not an http(s) URL: {url}"[:200])
    connection = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    remaining = max(deadline - time.monotonic(), 0.001)
    conn = connection(parts.hostname, parts.port, timeout=remaining)
    conn._create_connection = resolve.connector(deadline)  # type: ignore[attr-defined]
    alarm = DEADLINES.at(deadline, functools.partial(_cut, conn))
    try:
        headers = {"Accept": "text/plain;version=0.0.4"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = _read_capped(response, deadline) if response.status < 300 else b""
        if time.monotonic() >= deadline:  # cut off: what was read may end anywhere
            raise ScrapeError("timeout", "no complete answer within the deadline")
        return response.status, response.headers, body
    finally:
        DEADLINES.cancel(alarm)
        conn.close()


def _cut(conn: http.client.HTTPConnection) -> None:
    """The deadline passed: whatever read the scraper is blocked in fails at once."""
    if conn.sock is not None:
        with contextlib.suppress(OSError):
            socket.socket.shutdown(conn.sock, socket.SHUT_RDWR)


def _same_origin(url: str, location: str, status: int) -> str:
    target = urljoin(url, location)
    before, after = urlsplit(url), urlsplit(target)
    if (before.scheme, before.netloc) != (after.scheme, after.netloc):
        raise ScrapeError("http", f"HTTP {status}: redirect to another host not followed", status)
    return target


def _read_capped(response: http.client.HTTPResponse, deadline: float) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ScrapeError("too_large", f"body of {declared} bytes exceeds {MAX_BODY_BYTES}")
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read1(_CHUNK):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ScrapeError("too_large", f"body exceeds {MAX_BODY_BYTES} bytes")
        if time.monotonic() > deadline:
            raise ScrapeError("timeout", "deadline passed while reading the body")
        chunks.append(chunk)
    return b"".join(chunks)


def _classify(cause: object) -> ScrapeError:
    if isinstance(cause, TimeoutError | socket.timeout):
        return ScrapeError("timeout", "timed out")
    if isinstance(cause, ConnectionRefusedError):
        return ScrapeError("refused", "connection refused")
    text = str(cause) or type(cause).__name__
    return ScrapeError("other", text.splitlines()[0][:200])


def parse_metrics(
    body: bytes,
    content_type: str,
    reads: Callable[[str], bool] | None = None,
    deadline: float = math.inf,
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name with ``sglang:`` normalised to ``sglang_`` (SGLang serves both spellings).

    Read to the samples prometheus-client's own parsers give (OpenMetrics when the server
    says so): plain text lines by :func:`_plain_samples`, a body with any other line by
    prometheus-client's parser; any parse failure is ``garbage``. More than ``MAX_SAMPLES``
    sample lines, ``MAX_LINES`` lines or ``MAX_LABELS`` labels, or one line over
    ``MAX_LINE_BYTES``, are ``too_large``, counted
    before parsing: a body within the byte cap may still hold enough tiny series to cost
    hundreds of MB once parsed, or enough labels to cost minutes of CPU. With ``reads``,
    only the lines of the families it names are parsed (prometheus-client's parser costs
    about 20 times a line filter on a vLLM exposition of 175 KiB). Parsing stops at
    ``deadline`` (monotonic seconds), a ``timeout``: values that late are not shown, so a
    body that takes seconds to parse costs no more CPU than the scrape's timeout.
    """
    lines = body.count(b"\n") + 1
    comments = body.count(b"\n#") + body.startswith(b"#")
    if lines - comments > MAX_SAMPLES or lines > MAX_LINES:
        raise ScrapeError("too_large", f"more than {MAX_SAMPLES} samples or {MAX_LINES} lines")
    longest = max(map(len, body.split(b"\n")))
    if longest > MAX_LINE_BYTES:
        raise ScrapeError("too_large", f"a line of {longest} bytes (at most {MAX_LINE_BYTES})")
    if body.count(b'="') > MAX_LABELS:
        raise ScrapeError("too_large", f"more than {MAX_LABELS} labels")
    try:
        text = body.decode("utf-8")
        if reads is not None:
            text = _lines_read(text, reads)
        openmetrics = "application/openmetrics-text" in content_type
        plain = None if openmetrics else _plain_samples(text, deadline)
        read: Iterable[tuple[str, dict[str, str], float]] = plain or ()
        if plain is None:
            parser = openmetrics_families if openmetrics else text_fd_to_metric_families
            read = (
                (sample.name, sample.labels, sample.value)
                for family in parser(_LinesUntil(text, deadline))
                for sample in family.samples
            )
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, labels, value in read:
            for old, new in registry.NAME_FOLDS:  # an engine's other spellings
                name = name.replace(old, new, 1)
            samples.setdefault(name, []).append((dict(labels), float(value)))
        return samples
    # OverflowError: a value of more digits than a float holds (``float`` of a huge int).
    except (
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        UnicodeDecodeError,
        OverflowError,
    ) as exc:
        raise ScrapeError("garbage", f"unparsable exposition: {exc}"[:200]) from None


class _LinesUntil(io.StringIO):
    """The text's lines, as the parsers iterate them, until ``deadline`` passes."""

    # Lines between looks at the clock: a look costs about as much as parsing a short line.
    EVERY = 256

    def __init__(self, text: str, deadline: float) -> None:
        super().__init__(text)
        self._deadline = deadline
        self._lines = 0

    def __next__(self) -> str:  # type: ignore[override]  # typeshed: IOBase yields bytes
        self._lines += 1
        if self._lines % self.EVERY == 0 and time.monotonic() > self._deadline:
            raise ScrapeError("timeout", "deadline passed while parsing the body")
        return super().__next__()


# The plain form of a text exposition line that most servers write: a name, labels whose values
# hold no quote or backslash, a number and perhaps a timestamp, one space apart. A label name
# starting "__" is reserved: prometheus-client refuses it, or takes it for the metric's name.
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_PLAIN_SAMPLE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_LABEL},)*(?:{_LABEL})?)\}})?"
    r" ([-+.0-9a-zA-Z]+)(?: ([-+.0-9a-zA-Z]+))?"
)
_PLAIN_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
# prometheus-client splits a comment into words at these (string.whitespace), not at str.split's.
_COMMENT_SPACE = re.compile(r"[ \t\n\r\x0b\x0c]+")
# The types a family may have; prometheus-client refuses a family of any other.
_TYPES = frozenset(
    ("counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info", "stateset")
) | {"untyped"}
_HISTOGRAM_SUFFIXES = {
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}


_INTEGER = re.compile(r"[-+]?[0-9]+")


def _number(text: str) -> float | int:
    """A value or timestamp of the plain form as prometheus-client's text parser reads it: an
    int where ``int`` takes it, else a float."""
    if _INTEGER.fullmatch(text):
        with contextlib.suppress(ValueError):  # past int's 4300 digits
            return int(text)
    return float(text)


def _plain_samples(text: str, deadline: float) -> list[tuple[str, dict[str, str], float]] | None:
    """Every sample of a text exposition, ``(name, labels, value)`` in order, exactly as
    prometheus-client's text parser gives them, or ``None`` when a line is not of the plain
    form (escapes, quotes or spaces in labels, a quoted name, an odd comment): that body is
    prometheus-client's to read, or refuse, whole.

    prometheus-client's parser walks a line's labels a character at a time, several times: a
    recorded vLLM or SGLang exposition (about 50 KiB) took it 6 to 7 ms of CPU, and this
    reading 1.2 to 1.3 ms (``parse_metrics`` whole: 1.5 ms). The families are followed as
    it follows them: a ``# HELP`` or ``# TYPE`` starts one, a sample of another name is a
    family of its own, and a counter's samples are named ``_total`` when its family is not.
    ``tests/test_upstream_parse.py`` holds the two to the same samples on every recording and
    on generated expositions, plain or not.
    """
    found: list[tuple[str, dict[str, str], float]] = []
    family: list[tuple[str, dict[str, str], float]] = []  # the open family's samples
    name, kind = "", "untyped"  # the open family's
    allowed: tuple[str, ...] = ()  # the names of the samples it takes

    def close() -> None:
        if kind == "counter" and not name.endswith("_total"):
            found.extend((f"{sample}_total", labels, value) for sample, labels, value in family)
        else:
            found.extend(family)

    for number, line in enumerate(text.split("\n"), 1):
        if number % _LinesUntil.EVERY == 0 and time.monotonic() > deadline:
            raise ScrapeError("timeout", "deadline passed while parsing the body")
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            words = _COMMENT_SPACE.split(line, maxsplit=3)
            if '"' in "".join(words[:3]) or "\\" in "".join(words[:3]):
                return None
            if len(words) < 3 or words[1] not in ("HELP", "TYPE"):
                if len(words) == 2 and words[1] in ("HELP", "TYPE"):
                    return None
                continue  # any other comment
            if not _METRIC_NAME.fullmatch(words[2]):
                return None
            if words[1] == "HELP":
                if words[2] != name:
                    if name:
                        close()
                    name, kind, allowed, family = words[2], "untyped", (words[2],), []
                continue
            if len(words) < 4 or words[3] not in _TYPES or words[2:4] == ["_total", "counter"]:
                return None  # a family prometheus-client refuses (the last one has no name)
            if words[2] != name:
                if name:
                    close()
                name, family = words[2], []
            kind = words[3]
            allowed = tuple(name + suffix for suffix in _HISTOGRAM_SUFFIXES.get(kind, ("",)))
            continue
        plain = _PLAIN_SAMPLE.fullmatch(line)
        if plain is None:
            return None
        sample, inside, value, timestamp = plain.groups()
        labels = dict(_PLAIN_LABEL.findall(inside)) if inside else {}
        if inside and len(labels) != inside.count('="'):
            return None  # a label named twice: prometheus-client's to refuse
        try:
            read = (sample, labels, _number(value))
            if timestamp is not None:
                _number(timestamp)
        except ValueError:
            return None
        if sample in allowed:
            family.append(read)
            continue
        if name:
            close()
        name, kind, allowed, family = "", "untyped", (), []
        found.append(read)
    if name:
        close()
    return found


def _lines_read(text: str, reads: Callable[[str], bool]) -> str:
    """The exposition's lines of the families ``reads`` names, with their HELP, TYPE and UNIT
    lines; other comments (``# EOF``), blank lines and lines that name no metric (an HTML page)
    are kept for the parser to take or refuse."""
    kept = []
    # Whether a sample line of each name is kept: a family's lines share their name, so each
    # name is looked at once (the look was a third of a plain exposition's reading).
    keeps: dict[str, bool] = {}
    for line in text.split("\n"):
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE", "UNIT") or reads(parts[2]):
                kept.append(line)
            continue
        name = line.partition("{")[0].partition(" ")[0]
        keep = keeps.get(name)
        if keep is None:  # garbage stays, to be refused
            keep = keeps[name] = not _METRIC_NAME.fullmatch(name) or reads(name)
        if keep:
            kept.append(line)
    return "\n".join(kept)


def parse_server_info(body: bytes) -> dict[str, Any]:
    """The ``/server_info`` object with every secret-named field removed at once.

    More than ``MAX_JSON_VALUES`` values (counted by their commas, before decoding) are
    ``too_large``: walking and cleaning 6 MB of small lists took 3.7 s of CPU per scrape.
    """
    if body.count(b",") >= MAX_JSON_VALUES:
        raise ScrapeError("too_large", f"more than {MAX_JSON_VALUES} JSON values")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScrapeError("garbage", f"not JSON: {exc}"[:200]) from None
    except RecursionError:  # nested deeper than the decoder's stack allows
        raise ScrapeError("garbage", "JSON nested too deep") from None
    if not isinstance(data, dict):
        raise ScrapeError("garbage", "not a JSON object")
    if _deeper_than(data, MAX_JSON_DEPTH):
        raise ScrapeError("garbage", f"JSON nested deeper than {MAX_JSON_DEPTH}")
    cleaned: dict[str, Any] = drop_secrets(data)
    return cleaned


# SGLang's /server_info nests about four levels; the readers of it recurse.
MAX_JSON_DEPTH = 32
# It holds a few hundred settings, repeated per internal state: about a thousand values.
MAX_JSON_VALUES = 100_000


def _deeper_than(value: object, limit: int) -> bool:
    """Whether a decoded JSON value nests deeper than ``limit``; a loop, not recursion."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in item)
    return False


class UpstreamScraper:
    """Scrapes one target's endpoints, every ``interval`` seconds when run by a
    :class:`~exporter.sources.scrape_pool.ScrapePool`."""

    def __init__(
        self,
        metrics_url: str | None = None,
        server_info_url: str | None = None,
        *,
        interval: float = 15.0,
        timeout: float = 5.0,
        token_file: str | None = None,
        token_env: str | None = None,
        metrics_prefix: str | None = None,
        target: str | None = None,
        url: str | None = None,
        engine: str | None = None,
        drafts: DraftLookups | None = None,
    ) -> None:
        """``metrics_prefix``: the start of the server's metric names when they are not its
        engine's own (the config's ``metrics_prefix``); only engines that can read names
        under it get a reader. ``target``: the daemon's name for the server, given so that an
        endpoint that stops answering is logged (``doctor`` prints its own problems).
        ``url``: the server's base URL, from which the endpoints not given are found
        (:mod:`exporter.sources.endpoints`). ``engine``: the configured engine, when not
        ``auto``: server info is asked only of an engine that serves it. ``drafts``: the
        target's draft-config answers, shared with its tailer (its own when not given)."""
        self.endpoints = find_endpoints(url, metrics_url, server_info_url)
        # The URL of each endpoint in use: the first candidate until one answers as an engine.
        self.metrics_url = next(iter(self.endpoints.metrics), None)
        self.server_info_url = next(iter(self.endpoints.server_info), None)
        self._found: set[str] = set()
        self._engine = None if engine in (None, "auto") else engine
        self.drafts = drafts or DraftLookups()
        # What a base URL's endpoint answered where the engine has none: shown, not counted.
        self.absent: dict[str, str] = {}
        # Whether the newest /metrics scrape found no server answering (refused, timed out).
        self._unreachable = False
        self.interval = interval
        self.timeout = timeout
        self._token_file = token_file
        self._token_env = token_env
        self._errors: dict[tuple[str, str], int] = {}
        # One reader per engine that exports /metrics, each keeping its own counters.
        self._readers = [
            reader
            for engine in registry.ENGINES
            if (reader := engine.upstream_reader(metrics_prefix))
        ]
        self._snapshot = UpstreamSnapshot()
        self._bugs_logged: set[tuple[str, str]] = set()  # tracebacks once per endpoint
        self._target = target
        self._failing: dict[str, str] = {}  # endpoint -> why its newest scrape failed
        self._dropped: Counter[str] = Counter()
        self._disagreement_said_at: float | None = None  # monotonic

    def snapshot(self) -> UpstreamSnapshot:
        """The newest published snapshot; never blocks."""
        return self._snapshot

    def scrape_once(self) -> UpstreamSnapshot:
        """Scrape every configured endpoint once and publish the result."""
        endpoints: dict[str, EndpointStatus] = {}
        snapshot = UpstreamSnapshot(scraped_at=clock.now())
        if self.endpoints.metrics:
            status, snapshot = self._timed("metrics", self._scrape_metrics, snapshot)
            if status is not None:
                endpoints["metrics"] = status
        if self.endpoints.server_info and self._asks_server_info(snapshot):
            status, snapshot = self._timed("server_info", self._scrape_server_info, snapshot)
            if status is not None:
                endpoints["server_info"] = status
        snapshot = replace(
            snapshot,
            endpoints=MappingProxyType(endpoints),
            errors=MappingProxyType(dict(self._errors)),
            dropped=MappingProxyType(dict(self._dropped)),
            config=self._same_config(snapshot.config),
        )
        self._snapshot = snapshot
        return snapshot

    def _same_config(self, config: ServerConfig | None) -> ServerConfig | None:
        """``config``, or the last published one where equal: the server's setup seldom
        changes, and every scrape of specwatch merges it into the target's configuration,
        which is remembered by the identity of what it merges (``ServerConfig.merged``)."""
        last = self._snapshot.config
        return last if config is not None and config == last else config

    def _timed(
        self,
        endpoint: str,
        scrape: Callable[[UpstreamSnapshot], UpstreamSnapshot],
        snapshot: UpstreamSnapshot,
    ) -> tuple[EndpointStatus | None, UpstreamSnapshot]:
        """The endpoint's status after one scrape; None when it is absent by design."""
        started = time.monotonic()
        try:
            snapshot = scrape(snapshot)
        except Absent as exc:
            self.absent[endpoint] = str(exc)
            self._failing.pop(endpoint, None)
            return None, snapshot
        except ScrapeError as exc:
            # What was tried on a 404 is specwatch's own words, and says what to give.
            self._tell(endpoint, exc.reason if exc.status is None else f"{exc}"[:400])
            key = (endpoint, exc.reason)
            self._errors[key] = self._errors.get(key, 0) + 1
            if endpoint == "metrics":
                self._unreachable = exc.reason in ("refused", "timeout")
                # A 404 where an engine serves /metrics: SGLang's turned off. Anywhere else
                # the URL is wrong, and the server has nothing to fix.
                missing = exc.status == 404 and exc.at_metrics
                snapshot = replace(snapshot, metrics_endpoint="missing" if missing else "down")
                for reader in self._readers:
                    reader.reset()
            return EndpointStatus(False, time.monotonic() - started, str(exc)), snapshot
        except Exception as exc:  # a bug on hostile content: this endpoint down, not the scraper
            self._tell(endpoint, "other")
            key = (endpoint, "other")
            self._errors[key] = self._errors.get(key, 0) + 1
            first = key not in self._bugs_logged
            self._bugs_logged.add(key)
            log.log(
                logging.ERROR if first else logging.DEBUG,
                "scraping %s failed unexpectedly; counted as reason other",
                endpoint,
                exc_info=True,
            )
            error = f"internal error: {type(exc).__name__}"
            return EndpointStatus(False, time.monotonic() - started, error), snapshot
        self._tell(endpoint, None)
        self.absent.pop(endpoint, None)
        if endpoint == "metrics":
            self._unreachable = False
        return EndpointStatus(True, time.monotonic() - started), snapshot

    def _tell(self, endpoint: str, cause: str | None) -> None:
        """Log an endpoint that stops answering, and when it answers again, once per change:
        without it a mistyped URL or a dead server shows only in the exported series. The
        cause is the counted reason or HTTP status, never the server's own words."""
        if cause == self._failing.get(endpoint):
            return
        if cause is None:
            del self._failing[endpoint]
        else:
            self._failing[endpoint] = cause
        if self._target is None:
            return
        url = url_without_secrets(
            (self.metrics_url if endpoint == "metrics" else self.server_info_url) or ""
        )
        if cause is None:
            log.info("target %s: %s %s answers again", self._target, endpoint, url)
        else:
            log.warning(
                "target %s: scraping %s %s failed (%s); what it gives is not exported until it "
                "answers",
                self._target,
                endpoint,
                url,
                cause,
            )

    def _token(self) -> str | None:
        return bearer_token(self._token_file, self._token_env)

    def _scrape_metrics(self, snapshot: UpstreamSnapshot) -> UpstreamSnapshot:
        """The first candidate that answers with an engine's exposition, kept from then on."""
        if "metrics" in self._found or len(self.endpoints.metrics) == 1:
            assert self.metrics_url is not None
            return self._read_metrics(self.metrics_url, snapshot)
        tried: list[tuple[str, ScrapeError]] = []
        empty = None
        for url in self.endpoints.metrics:
            try:
                read = self._read_metrics(url, snapshot)
            except ScrapeError as exc:
                tried.append((url, exc))
                if exc.reason in ("timeout", "refused"):  # no server there to try again
                    break
                continue
            if read.metrics_endpoint == "ok":
                self.metrics_url = url
                self._found.add("metrics")
                return read
            tried.append((url, ScrapeError("garbage", "no engine's metric names")))
            empty = empty or read
        if empty is not None:  # up, but nothing any engine wrote
            return empty
        raise _none_answered("metrics", tried)

    def _read_metrics(self, url: str, snapshot: UpstreamSnapshot) -> UpstreamSnapshot:
        deadline = time.monotonic() + self.timeout  # parsing included: its values are late too
        try:
            body, content_type = fetch(url, self.timeout, self._token())
        except ScrapeError as exc:
            if exc.status == 404 and len(self.endpoints.metrics) == 1:
                raise _none_answered("metrics", [(url, exc)]) from None
            raise
        parsed = parse_metrics(body, content_type, self._reads, deadline)
        if time.monotonic() > deadline:  # the answer came in time, but its parsing did not
            raise ScrapeError("timeout", f"not read within the {self.timeout:g} s scrape timeout")
        samples, dropped = upstream_checks.checked(parsed, self._bounds)
        self._dropped.update(dropped)
        reader = next((reader for reader in self._readers if reader.claims(samples)), None)
        if reader is None:  # up, but no engine's metric names: nothing to read
            return replace(snapshot, values=UpstreamValues(), metrics_endpoint="empty")
        values = reader.read(samples, time.monotonic())
        if values.disagreement is not None:
            self._dropped["inconsistent"] += 1
            self._say_disagreement(values.disagreement)
        # The exposition's word on the server's setup (TensorRT-LLM's config info), which
        # /server_info, scraped next, refines.
        config = None if values.config is None else with_local_draft(values.config, self.drafts)
        return replace(snapshot, values=values, metrics_endpoint="ok", config=config)

    def _say_disagreement(self, disagreement: str) -> None:
        """Which counters disagreed, at most every DISAGREEMENT_NOTE_SECONDS: a server
        counting wrong does so on every scrape."""
        now = time.monotonic()
        said = self._disagreement_said_at
        if self._target is None or (said is not None and now - said < DISAGREEMENT_NOTE_SECONDS):
            return
        self._disagreement_said_at = now
        log.warning(
            "target %s: the server's counters disagree (%s); that window's accept length and "
            "ratio are dropped, counted in specwatch_upstream_dropped_samples_total"
            '{reason="inconsistent"}',
            self._target,
            disagreement,  # counter names the engine checked, and numbers
        )

    def _reads(self, name: str) -> bool:
        return any(reader.reads(name) for reader in self._readers)

    def _bounds(self, name: str) -> str | None:
        """The bounds of a name as the first reader that reads it says."""
        return next((kind for reader in self._readers if (kind := reader.bounds(name))), None)

    def _asks_server_info(self, snapshot: UpstreamSnapshot) -> bool:
        """Whether to ask for server info: always when its URL was given; from a base URL
        only while the engine may serve it (unknown yet, or SGLang): vLLM and TensorRT-LLM
        have none, and asking would only fill their access logs with 404s."""
        if not self.endpoints.server_info_optional:
            return True
        if self._unreachable:  # the same server refused /metrics: one problem, said once
            return False
        engine = self._engine or (snapshot.values.engine if snapshot.values else None)
        return engine is None or bool(registry.engine(engine).server_info_paths)

    def _server_info_engine(self, snapshot: UpstreamSnapshot) -> Engine | None:
        """Whose ``/server_info`` this is: the engine known, where it serves one; else, the
        engine not known yet, the one that does."""
        known = self._engine or (snapshot.values.engine if snapshot.values else None)
        engine = registry.BY_NAME.get(known or "")
        if engine is not None and engine.server_info_paths:
            return engine
        return next((each for each in registry.ENGINES if each.server_info_paths), None)

    def _scrape_server_info(self, snapshot: UpstreamSnapshot) -> UpstreamSnapshot:
        token = self._token()
        candidates = (
            (self.server_info_url,) if "server_info" in self._found else self.endpoints.server_info
        )
        tried: list[tuple[str, ScrapeError]] = []
        for url in candidates:
            assert url is not None
            try:
                body, _ = fetch(url, self.timeout, token)
            except ScrapeError as exc:
                if exc.status != 404:
                    raise
                tried.append((url, exc))
                continue
            self.server_info_url = url
            self._found.add("server_info")
            engine = self._server_info_engine(snapshot)
            told = engine.read_server_info(parse_server_info(body)) if engine else None
            config = with_local_draft(told or ServerConfig(), self.drafts)
            return replace(snapshot, config=(snapshot.config or ServerConfig()).merged(config))
        if self.endpoints.server_info_optional and "server_info" not in self._found:
            raise Absent(
                f"{_tried_text(tried)}: no server info there (only {_INFO_TITLES} has one)"
            )
        raise _none_answered("server_info", tried)


class Absent(Exception):
    """An endpoint found from a base URL that this server does not have: its engine's design
    (vLLM and TensorRT-LLM serve no ``/server_info``), not a failure."""


def _tried_text(tried: list[tuple[str, ScrapeError]]) -> str:
    """``HTTP 404 at /metrics, HTTP 404 at /prometheus/metrics``: the paths tried, each with
    its failure (the host is the configured one)."""
    return ", ".join(f"{exc} at {urlsplit(url).path or '/'}" for url, exc in tried)


# The engines whose servers answer /server_info, said where a base URL's has none.
_INFO_TITLES = " or ".join(e.title for e in registry.ENGINES if e.server_info_paths)
# What a 404 at /metrics may also mean: an engine that serves it only when switched on.
_SWITCHES = "".join(
    f"; {engine.title} serves /metrics only when started with {engine.metrics_switch}"
    for engine in registry.ENGINES
    if engine.metrics_switch
)


def _none_answered(endpoint: str, tried: list[tuple[str, ScrapeError]]) -> ScrapeError:
    """The failure of an endpoint none of whose URLs answered: what was tried and, for 404s,
    what to give instead (a wrong URL is the likely cause, not the server)."""
    first = tried[0][1]
    text = _tried_text(tried)
    not_found = [urlsplit(url).path.rstrip("/") for url, exc in tried if exc.status == 404]
    if len(not_found) == len(tried):
        text += (
            ": no metrics there; give the server's base URL (url:, --url) or its metrics URL "
            f"(metrics_url:, --metrics-url){_SWITCHES}"
            if endpoint == "metrics"
            else ": no server info there; give the server's base URL (url:, --url)"
        )
    error = ScrapeError(first.reason, text, first.status)
    error.at_metrics = any(
        p.endswith("/metrics") and not p.endswith("/prometheus/metrics") for p in not_found
    )
    return error
