"""The HTTP side: ``/metrics``, a cheap unauthenticated ``/healthz`` and a landing page.

prometheus_client's threading WSGI server, so a slow scraper never holds up another, with
connections admitted by a :class:`Lobby` so an idle or slow one never holds up the server;
the collector underneath only copies in-memory snapshots.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import (
    ThreadingWSGIServer,
    _get_best_family,
    choose_encoder,
    gzip_accepted,
)

from exporter.exposition.connections import DEFAULT_LIMITS, Limits, Lobby, TLSPolicy
from exporter.exposition.foresight import scraper
from exporter.exposition.text import EOF, lean_format

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

GZIP_LEVEL = 1
"""zlib's fastest level for ``/metrics``, which Prometheus always asks for gzipped. At
Python's default of 9, compressing 100 live targets' 350 KB took 8.4 ms of CPU, more than
rendering them; at 1, 0.6 ms for a body of 29 KB instead of 23 KB (level 6: 1.9 ms, 25 KB;
a quiet 2-core machine, bench/README.md)."""


class _Server(ThreadingWSGIServer):
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops the SYNs of a burst of concurrent scrapers,
    # which then retry a whole second later.
    request_queue_size = 64

    def __init__(self, host: str, port: int) -> None:
        # IPv6 listen addresses need their own socket family, as in start_http_server.
        self.address_family, host = _get_best_family(host, port)
        super().__init__((host, port), _QuietHandler)


class _QuietHandler(WSGIRequestHandler):
    """No access log: scrapers hit us every few seconds and stderr is for problems.

    The status line, headers and body go out in one buffered send, without Nagle's delay: as
    separate small unbuffered writes they could wait on the scraper's delayed ACK (~40 ms).
    """

    disable_nagle_algorithm = True
    wbufsize = 1 << 16

    def log_message(self, format: str, *args: Any) -> None:
        pass


def make_app(
    registry: CollectorRegistry,
    landing: Callable[[], bytes],
    guard: Callable[[WSGIApp], WSGIApp] | None = None,
    content: Callable[[], object] | None = None,
    not_ready: Callable[[], str | None] | None = None,
    lean: LeanMetrics | None = None,
    page_content: Callable[[], object] | None = None,
    foresee: Callable[[str], None] | None = None,
) -> WSGIApp:
    """Route the three paths; ``guard`` (basic auth) wraps all but ``/healthz``.

    ``landing`` renders the page at ``/``; ``content`` tells whether a body of /metrics or of
    the page may be reused (see CoalescedScrapes), ``page_content`` the page's where it is
    cheaper to tell: both render every target, and clients polling the page must not delay
    the scrapes, so the page's renders also take at most PAGE_DUTY of the time. HEAD is
    answered as GET without its body. ``not_ready`` gives the reason /healthz answers 503
    instead of 200, if there is one. ``lean`` answers the scrapes it can write (see
    LeanMetrics); the others are prometheus_client's, over ``registry``. ``foresee`` hears
    who asks for ``/metrics``, as each request arrives (``foresight.Foresight``).
    """
    metrics: WSGIApp = CoalescedScrapes(make_wsgi_app(registry), content)
    if lean is not None:
        metrics = lean.before(metrics)

    def render_landing(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
        return [landing()]

    page = CoalescedScrapes(render_landing, page_content or content, duty=PAGE_DUTY)

    def pages(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            if foresee is not None:
                foresee(scraper(environ))
            return metrics(environ, start_response)
        if path == "/":
            return page(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics\n"]

    protected = guard(pages) if guard else pages

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            reason = not_ready() if not_ready is not None else None
            status = "503 Service Unavailable" if reason else "200 OK"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{reason or 'ok'}\n".encode()]
        return protected(environ, start_response)

    return _without_body_for_head(app)


def _without_body_for_head(app: WSGIApp) -> WSGIApp:
    """HEAD as GET, with the headers and length of GET's answer and no body (prometheus_client
    refuses HEAD with a 405 and a body)."""

    def answer(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "HEAD":
            return app(environ, start_response)
        status, headers, body = _answer(app, {**environ, "REQUEST_METHOD": "GET"})
        kept = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*kept, ("Content-Length", str(len(body)))])
        return []

    return answer


class LeanMetrics:
    """``/metrics`` written from the collector's per-target text (``exposition.text``): what
    prometheus_client writes for ``process`` (the process's own collectors: CPU, memory, GC),
    then the specwatch families. A request for a format or escaping the lean writer does not
    write, a ``name[]`` filter, or a method other than GET is left to ``fallback``."""

    def __init__(self, specwatch: Callable[[str], bytes], process: CollectorRegistry) -> None:
        self._specwatch = specwatch
        self._process = process
        self._fallback: WSGIApp | None = None

    def before(self, fallback: WSGIApp) -> WSGIApp:
        self._fallback = fallback
        return self.answer

    def answer(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT") or "")
        form = lean_format(content_type)
        query = parse_qs(environ.get("QUERY_STRING") or "")
        if form is None or "name[]" in query or environ.get("REQUEST_METHOD") != "GET":
            assert self._fallback is not None
            return self._fallback(environ, start_response)
        process: bytes = encoder(self._process)
        eof = EOF.encode() if form == "openmetrics" else b""
        # In parts, so the specwatch body is sent as it is shared, not copied per request.
        parts = [process.removesuffix(EOF.encode()), self._specwatch(form), eof]
        body = [part for part in parts if part]
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or ""):
            body = [gzip.compress(b"".join(body), GZIP_LEVEL)]
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(sum(map(len, body)))))
        start_response("200 OK", headers)
        return body


# How old a reused /metrics body may be: only process self-metrics (CPU seconds, memory, GC
# counts) can age that much, every specwatch value is checked on each request.
MAX_REUSE_SECONDS = 1.0
# The largest share of the time the landing page's renders may take: ten clients polling it
# back to back would otherwise render it without pause, and every render of it takes the
# interpreter from the scrapes (a request waits for the next render it may take instead).
PAGE_DUTY = 0.2
# The longest a request waits for that render, whatever the last one took.
MAX_DUTY_WAIT = 5.0


@dataclass(frozen=True)
class _Render:
    number: int  # renders begun before this one, plus one
    request: tuple[str, ...]  # what the body depends on besides the metrics
    content: object  # what ``content()`` returned just before this render began
    at: float  # monotonic time this render began
    status: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class CoalescedScrapes:
    """Scrapes share a render while nothing it shows has changed, and never an outdated one.

    Renders are Python and hold the GIL, so ten scrapers arriving together would queue ten
    identical renders. A request may take the newest body when that render began after the
    request arrived (it waited for it anyway), or when ``content()``, which recomputes every
    specwatch value and is much cheaper than formatting them, still returns what it did for
    that render, within MAX_REUSE_SECONDS. Either way a window that went stale vanishes at
    once, as with a render of its own. With ``duty`` below 1, a render begins no sooner than
    the last one's time divided by ``duty`` after that one began.
    """

    def __init__(
        self, app: WSGIApp, content: Callable[[], object] | None = None, duty: float = 1.0
    ) -> None:
        self._app = app
        self._content = content
        self._duty = duty  # the share of the time renders may take
        self._lock = threading.Lock()  # held while rendering
        self._started = 0  # renders begun so far
        self._last: _Render | None = None
        self._next_at = 0.0  # monotonic time the next render may begin

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        # Format, compression and the name[] filter decide the body besides the metrics.
        request = tuple(
            environ.get(name) or ""
            for name in ("REQUEST_METHOD", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING", "QUERY_STRING")
        )
        begun_before = self._started
        with self._lock:
            last = self._last
            shared = last is not None and last.request == request and last.number > begun_before
            # Only a request that cannot take a render begun after it arrived checks content.
            content = None if shared or self._content is None else self._content()
            if last is None or not (shared or self._unchanged(last, request, content)):
                wait = min(self._next_at - time.monotonic(), MAX_DUTY_WAIT)
                if wait > 0:
                    time.sleep(wait)
                    content = self._content() if self._content is not None else None
                self._started += 1
                at = time.monotonic()
                last = self._last = _Render(
                    self._started, request, content, at, *self._render(environ)
                )
                self._next_at = at + (time.monotonic() - at) / self._duty
        # A list of its own: the server adds to the one it is given (wsgiref appends
        # Content-Length) while other threads answer from the same render.
        start_response(last.status, list(last.headers))
        return [last.body]

    def _unchanged(self, last: _Render, request: tuple[str, ...], content: object) -> bool:
        young = time.monotonic() - last.at < MAX_REUSE_SECONDS
        same = last.request == request and content is not None
        return young and same and content == last.content

    def _render(self, environ: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...], bytes]:
        return _answer(self._app, environ)


def _answer(
    app: WSGIApp, environ: dict[str, Any]
) -> tuple[str, tuple[tuple[str, str], ...], bytes]:
    """Status, headers and whole body of ``app``'s answer, instead of sending them."""
    response: list[Any] = []

    def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        response[:] = [status, headers]

    body = b"".join(app(environ, capture))
    return response[0], tuple(response[1]), body


class WebServer:
    """Owns the listening socket and the thread that admits its connections."""

    def __init__(
        self,
        host: str,
        port: int,
        app: WSGIApp,
        tls: TLSPolicy | ssl.SSLContext | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._server = _Server(host, port)
        self._server.set_app(self._app)
        self._wsgi = app
        self._lobby = Lobby(self._server.socket, self._serve, tls, limits)
        self._thread = threading.Thread(target=self._lobby.run, name="http-accept", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_port

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._lobby.stop()
        self._thread.join(timeout=1)
        self._lobby.drain(timeout=1)
        self._server.server_close()

    def _serve(self, conn: socket.socket, address: Any) -> None:
        self._server.finish_request(conn, address)

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        self._lobby.answering()  # the request head is in
        return self._wsgi(environ, start_response)
