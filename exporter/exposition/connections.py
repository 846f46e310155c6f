"""Admission of HTTP connections: no single client can hold a thread, the accept loop or memory.

A connection waits in a selector, without a thread, until its whole request head is in: the
accept loop does the TLS handshake and reads the head itself, a step at a time as bytes
arrive, so clients trickling theirs hold no worker, only a place among ``max_waiting`` (the
oldest makes room when too many wait) for ``head_timeout`` from their first byte. Only a
connection with a whole head gets one of ``max_workers`` threads. Each read and write has a
timeout, and the answer a deadline, after which the socket is shut down under the worker.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

Serve = Callable[[socket.socket, Any], None]


class TLSPolicy(Protocol):
    """TLS as it stands for the next connection (a web config can change under a server)."""

    def context(self) -> ssl.SSLContext: ...

    def refusal(self, conn: ssl.SSLSocket) -> str | None:
        """Why a handshaken connection may not go on (its certificate's names), or None."""


@dataclass(frozen=True)
class FixedTLS:
    """One context for every connection, refusing none."""

    tls: ssl.SSLContext

    def context(self) -> ssl.SSLContext:
        return self.tls

    def refusal(self, conn: ssl.SSLSocket) -> str | None:
        return None


@dataclass(frozen=True)
class Limits:
    """The bounds every connection is held to; docs/reliability.md states them."""

    io_timeout: float = 10.0  # one read, write or TLS handshake step
    idle_timeout: float = 10.0  # connected without sending a byte
    head_timeout: float = 5.0  # from the first byte to the end of the request head
    deadline: float = 30.0  # from the request head to the last byte of the answer
    max_workers: int = 64  # connections served at once, one thread each
    max_waiting: int = 512  # connected, not yet served


DEFAULT_LIMITS = Limits()

MAX_HEAD_BYTES = 64 << 10
"""A request head longer than this is not a scraper's: the connection is closed unanswered."""
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


class _HeadFirst(io.RawIOBase):
    """A socket's input with the head the accept loop already read put back in front."""

    def __init__(self, head: bytes, sock: socket.socket) -> None:
        self._head = memoryview(head)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        return self._sock.recv_into(buffer)


class _Prefixed:
    """The socket a worker's request handler sees: reads start with the head read so far."""

    def __init__(self, sock: socket.socket, head: bytes) -> None:
        self._sock = sock
        self._head = head

    def makefile(self, mode: str = "rb", buffering: int = -1) -> Any:
        """Binary files, as the request handler asks for them: ``rb`` and ``wb``."""
        if "r" not in mode:
            return self._sock.makefile("wb", buffering)
        return io.BufferedReader(_HeadFirst(self._head, self._sock), max(buffering, 8192))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@dataclass
class _Busy:
    sock: socket.socket
    deadline: float


class Lobby:
    """Accepts on ``listener`` and hands connections with something to read to ``serve``."""

    def __init__(
        self,
        listener: socket.socket,
        serve: Serve,
        tls: TLSPolicy | ssl.SSLContext | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._listener = listener
        self._serve = serve
        self._tls = FixedTLS(tls) if isinstance(tls, ssl.SSLContext) else tls
        self.limits = limits
        self._selector = selectors.DefaultSelector()
        self._waiting: dict[socket.socket, tuple[Any, float]] = {}  # oldest first
        # Plain connections whose head has begun: address, deadline, bytes so far; oldest first.
        self._heads: dict[socket.socket, tuple[Any, float, bytearray]] = {}
        self._ready: deque[tuple[socket.socket, Any, bytes]] = deque()
        self._secured: set[socket.socket] = set()  # TLS handshakes done, heads still coming
        self._busy: dict[int, _Busy] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()  # guards _busy, shared with the workers
        self._worker = threading.local()  # which connection the calling worker serves
        self._finished = threading.Condition(self._lock)  # notified as each worker ends
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._stopping = False
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)

    def run(self) -> None:
        """The accept loop; returns after :meth:`stop`."""
        try:
            while not self._stopping:
                for key, _ in self._selector.select(self._next_timeout()):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._wake_r.recv(4096)
                    else:
                        self._step(key.data)
                self._expire()
                self._dispatch()
        finally:
            self._close_all()

    def stop(self) -> None:
        self._stopping = True
        self._wake()

    def drain(self, timeout: float) -> bool:
        """Wait until no worker is left, at most ``timeout`` seconds; whether none is.

        After :meth:`stop` their sockets are shut down, so they end at once, but a worker in
        native code (a bcrypt check) must not be cut off by the interpreter's exit.
        """
        with self._finished:
            return self._finished.wait_for(lambda: not self._busy, timeout)

    def answering(self) -> None:
        """Called by a worker once its request head is read: the answer gets the long deadline.

        A client trickling its request so holds a worker for ``head_timeout`` at most.
        """
        with self._lock:
            busy = self._busy.get(getattr(self._worker, "ident", -1))
            if busy is not None:
                busy.deadline = time.monotonic() + self.limits.deadline

    def _next_timeout(self) -> float:
        now = time.monotonic()
        soonest = now + 1.0
        if self._waiting:
            soonest = min(soonest, next(iter(self._waiting.values()))[1])
        if self._heads:
            soonest = min(soonest, next(iter(self._heads.values()))[1])
        with self._lock:
            for busy in self._busy.values():
                soonest = min(soonest, busy.deadline)
        return max(0.0, soonest - now)

    def _accept(self) -> None:
        for _ in range(64):  # then let the other sockets have their turn
            try:
                conn, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._make_room():
                    continue  # out of descriptors: the oldest waiting one made room
                log.debug("accept failed: %s", exc)
                return
            if len(self._waiting) + len(self._heads) >= self.limits.max_waiting:
                self._make_room()
            conn.setblocking(False)
            self._waiting[conn] = (address, time.monotonic() + self.limits.idle_timeout)
            self._selector.register(conn, selectors.EVENT_READ, conn)

    def _make_room(self) -> bool:
        """Close the oldest connection that sent nothing, else the oldest head in progress."""
        oldest = next(iter(self._waiting or self._heads), None)
        if oldest is None:
            return False
        self._drop(oldest)
        return True

    def _step(self, conn: socket.socket) -> None:
        """:meth:`_readable`, where a fault ends that connection alone, never the loop: a
        dead accept loop left /metrics and /healthz unanswered while the process lived on."""
        try:
            self._readable(conn)
        except Exception:
            log.exception("unexpected error reading a connection's request; closed it")
            with contextlib.suppress(Exception):
                self._drop(conn)

    def _readable(self, conn: socket.socket) -> None:
        """One step of a connection's start, without blocking: its TLS handshake, then as
        much of its request head as has arrived."""
        if conn not in self._waiting and conn not in self._heads:
            return  # closed earlier in the same select batch (to make room for a newer one)
        if conn in self._waiting:
            begun = self._begin(conn)
            if begun is None:
                return
            conn = begun
        if not self._handshake(conn):
            return
        head = self._heads[conn][2]
        while True:
            try:
                chunk = conn.recv(MAX_HEAD_BYTES)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                return
            except ssl.SSLWantWriteError:
                self._selector.modify(conn, selectors.EVENT_WRITE, conn)
                return
            except OSError:
                chunk = b""
            if not chunk:  # closed (or reset) before its head was whole
                self._drop(conn)
                return
            head += chunk
            if any(end in head for end in _HEAD_ENDS):
                address = self._heads.pop(conn)[0]
                self._secured.discard(conn)
                self._selector.unregister(conn)
                self._ready.append((conn, address, bytes(head)))
                return
            if len(head) > MAX_HEAD_BYTES:
                self._drop(conn)
                return
            if not (isinstance(conn, ssl.SSLSocket) and conn.pending()):
                return  # a TLS record may hold more than one recv took

    def _begin(self, conn: socket.socket) -> socket.socket | None:
        """Its first byte is in: from now on the head deadline applies. With TLS, the
        socket that speaks it (None if it cannot be made)."""
        address, _ = self._waiting.pop(conn)
        if self._tls is not None:
            self._selector.unregister(conn)
            try:
                conn = self._tls.context().wrap_socket(
                    conn, server_side=True, do_handshake_on_connect=False
                )
            except (OSError, ValueError) as exc:
                log.debug("TLS connection from %s not started: %s", address, exc)
                conn.close()
                return None
            self._selector.register(conn, selectors.EVENT_READ, conn)
        deadline = time.monotonic() + self.limits.head_timeout
        self._heads[conn] = (address, deadline, bytearray())
        return conn

    def _handshake(self, conn: socket.socket) -> bool:
        """Advance a TLS handshake; whether it is done (and the connection allowed), as it
        always is for plain HTTP."""
        if not isinstance(conn, ssl.SSLSocket) or conn in self._secured:
            return True
        try:
            conn.do_handshake()
        except ssl.SSLWantReadError:
            self._selector.modify(conn, selectors.EVENT_READ, conn)
            return False
        except ssl.SSLWantWriteError:
            self._selector.modify(conn, selectors.EVENT_WRITE, conn)
            return False
        except (OSError, ValueError) as exc:
            log.debug("TLS handshake from %s failed: %s", self._heads[conn][0], exc)
            self._drop(conn)
            return False
        assert self._tls is not None  # only TLS sockets get here
        refused = self._tls.refusal(conn)
        if refused is not None:
            log.info("TLS connection from %s refused: %s", self._heads[conn][0], refused)
            self._drop(conn)
            return False
        self._secured.add(conn)
        self._selector.modify(conn, selectors.EVENT_READ, conn)
        return True

    def _drop(self, conn: socket.socket) -> None:
        """Close a connection not yet served, in whatever state it is, registered or not."""
        self._waiting.pop(conn, None)
        self._heads.pop(conn, None)
        self._secured.discard(conn)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        conn.close()

    def _expire(self) -> None:
        now = time.monotonic()
        while self._waiting and next(iter(self._waiting.values()))[1] <= now:
            self._drop(next(iter(self._waiting)))
        while self._heads and next(iter(self._heads.values()))[1] <= now:
            self._drop(next(iter(self._heads)))
        with self._lock:
            late = [busy for busy in self._busy.values() if busy.deadline <= now]
            for busy in late:
                _shut(busy.sock)
                # Shut again in a second should the worker still be there, without spinning
                # on it meanwhile.
                busy.deadline = now + 1.0

    def _dispatch(self) -> None:
        while self._ready:
            with self._lock:
                if len(self._busy) >= self.limits.max_workers:
                    return
                ident = next(self._ids)
                conn, address, head = self._ready.popleft()
                deadline = time.monotonic() + self.limits.head_timeout
                self._busy[ident] = _Busy(conn, deadline)
            worker = threading.Thread(
                target=self._work, args=(ident, conn, address, head), name="http", daemon=True
            )
            try:
                worker.start()
            except RuntimeError:  # no thread to be had: this connection is refused, not all
                log.warning("cannot start a thread for an HTTP connection; closed it")
                conn.close()
                with self._lock:
                    del self._busy[ident]

    def _work(self, ident: int, conn: socket.socket, address: Any, head: bytes) -> None:
        self._worker.ident = ident
        try:
            conn.settimeout(self.limits.io_timeout)  # blocking again, each call bounded
            self._serve(_Prefixed(conn, head), address)  # type: ignore[arg-type]
        except (OSError, ValueError) as exc:  # timeouts, resets
            log.debug("connection from %s ended: %s", address, exc)
        except Exception:  # a fault in answering one request ends that connection only
            log.exception("unexpected error answering %s; closed the connection", address)
        finally:
            _shut(conn)
            conn.close()
            with self._lock:
                del self._busy[ident]
                self._finished.notify_all()
            self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _close_all(self) -> None:
        for conn in [*self._waiting, *self._heads]:
            self._drop(conn)
        for conn, _, _ in self._ready:
            conn.close()
        self._ready.clear()
        with self._lock:
            for busy in self._busy.values():
                _shut(busy.sock)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _shut(sock: socket.socket) -> None:
    """Wake a worker blocked on ``sock``: its read or write fails at once.

    The plain socket call, also for a TLS socket, so another thread's TLS state is not touched.
    """
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
