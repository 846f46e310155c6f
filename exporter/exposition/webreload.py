"""The web config, read again when it changes, as exporter-toolkit reads it on every request.

A rotated certificate, a new password or a new header takes effect on the next connection or
request without a restart. Each check is a few ``stat`` calls (the file and the certificate
files it names); only a changed signature reads and validates again. A file that is now bad
keeps the previous one in force and says why, once per change: scrapes never stop because of
a half-written file. The read runs on a thread of its own, waited for a second at most, so a
slow one never stalls the accept loop.
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
# How long a connection or request waits for a changed web config to be read before it is
# served with the one in force; the read goes on and applies when done.
RELOAD_WAIT_SECONDS = 1.0


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
        self._reloading: threading.Thread | None = None
        self._active = load_web_config(path)
        self._seen = self._signature()
        self._warn_unenforced()

    @property
    def serves_tls(self) -> bool:
        return self._active.tls is not None

    def current(self) -> ActiveWebConfig:
        """The config in force; a change seen is read on a thread of its own, waited for at
        most RELOAD_WAIT_SECONDS: the accept loop asks for every TLS connection, and a slow
        read (a cost-16 bcrypt stand-in hash took 13.6 s) must not stall it."""
        if self._signature() == self._seen:
            return self._active
        with self._lock:
            seen = self._signature()
            if seen != self._seen and self._reloading is None:
                self._seen = seen
                self._reloading = threading.Thread(
                    target=self._reload, name="web-config-reload", daemon=True
                )
                self._reloading.start()
            reloading = self._reloading
        if reloading is not None:
            reloading.join(RELOAD_WAIT_SECONDS)
        return self._active

    def _signature(self) -> Signature:
        return signature((self.path, *self._active.files()))

    def _reload(self) -> None:
        try:
            self._take(load_web_config(self.path))
        except ConfigError as exc:
            log.warning("%s; keeping the web config read before", exc)
        finally:
            with self._lock:
                self._reloading = None

    def _take(self, fresh: ActiveWebConfig) -> None:
        if (fresh.tls is None) != (self._active.tls is None):
            log.warning(
                "web config %s: TLS cannot be switched %s while running; keeping the web "
                "config read before (restart specwatch to apply it)",
                self.path,
                "on" if fresh.tls is not None else "off",
            )
            return
        with self._lock:
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
