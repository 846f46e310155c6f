"""The web config, read again when it changes, as exporter-toolkit reads it on every request.

A rotated certificate, a new password or a new header takes effect on the next connection or
request without a restart. Each check is a few ``stat`` calls (the file and the certificate
files it names); only a changed signature reads and validates again. A file that is now bad
keeps the previous one in force and says why, once per change: scrapes never stop because of
a half-written file.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from exporter.exposition.server import StartResponse, WSGIApp
from exporter.exposition.webconfig import ActiveWebConfig, load_web_config
from exporter.settings import ConfigError

log = logging.getLogger(__name__)

Signature = tuple[tuple[int, int, int] | None, ...]


def signature(paths: Iterable[Path]) -> Signature:
    """What tells a file changed: its inode, size and modification time (None: not there)."""
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(stamps)


class LiveWebConfig:
    """The web config in force now; the start's problems are ConfigErrors (exit 2)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._active = load_web_config(path)
        self._seen = self._signature()
        self._warn_unenforced()

    @property
    def serves_tls(self) -> bool:
        return self._active.tls is not None

    def current(self) -> ActiveWebConfig:
        if self._signature() == self._seen:
            return self._active
        with self._lock:
            seen = self._signature()
            if seen != self._seen:
                self._seen = seen
                self._reload()
        return self._active

    def _signature(self) -> Signature:
        return signature((self.path, *self._active.files()))

    def _reload(self) -> None:
        try:
            fresh = load_web_config(self.path)
        except ConfigError as exc:
            log.warning("%s; keeping the web config read before", exc)
            return
        if (fresh.tls is None) != (self._active.tls is None):
            log.warning(
                "web config %s: TLS cannot be switched %s while running; keeping the web "
                "config read before (restart specwatch to apply it)",
                self.path,
                "on" if fresh.tls is not None else "off",
            )
            return
        self._active = fresh
        self._seen = self._signature()
        log.info("web config %s read again", self.path)
        self._warn_unenforced()

    def _warn_unenforced(self) -> None:
        for note in self._active.config.unenforced():
            log.warning("web config %s: %s", self.path, note)

    # What the web server asks of it: the guard per request, TLS per connection.

    def guard(self, app: WSGIApp) -> WSGIApp:
        def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            return self.current().guard(app, environ, start_response)

        return guarded

    def context(self) -> ssl.SSLContext:
        context = self.current().tls
        assert context is not None, "asked for TLS by a server started without it"
        return context

    def refusal(self, conn: ssl.SSLSocket) -> str | None:
        return self.current().refusal(conn)
