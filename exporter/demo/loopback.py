"""Ports for the demo's services on loopback, and reading from them while they come up."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Ports:
    exporter: int
    prometheus: int
    alertmanager: int
    webhook: int

    @classmethod
    def choose(cls) -> Ports:
        return cls(*pick_ports((9477, 9090, 9093, 9099)))


def pick_ports(preferred: tuple[int, ...]) -> list[int]:
    """The well-known ports where free, else free ones: never collide with another run.

    All sockets stay bound until every port is chosen, so no two choices can coincide.
    """
    held: list[socket.socket] = []
    try:
        for port in preferred:
            held.append(_bind(port))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _bind(preferred: int) -> socket.socket:
    for port in (preferred, 0):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        return sock
    raise OSError("no free loopback port")


def fetch(url: str, timeout: float = 2.0) -> str | None:
    """The body, or None while the service is not (or no longer) answering."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body: bytes = resp.read()
            return body.decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False
