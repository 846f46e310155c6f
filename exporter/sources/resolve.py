"""Connecting to a named host within a scrape's deadline, the name lookup included.

``getaddrinfo`` blocks its caller for as long as the resolver takes (five seconds a try by
default, more with retries) and takes no timeout, so a server name whose DNS never answers
turned a 2 s scrape deadline into 10 s. The lookup runs in a short-lived daemon thread that
is waited for only until the deadline; a lookup left behind ends with the resolver's own
timeout, and at most ``MAX_LOOKUPS`` are under way at once, so a dead resolver cannot pile
threads up. Daemon threads never hold up the process's exit.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable

MAX_LOOKUPS = 8
_lookups = threading.BoundedSemaphore(MAX_LOOKUPS)

Address = tuple[str, int]
Connect = Callable[[Address, float, Address | None], socket.socket]


def connector(deadline: float) -> Connect:
    """A ``socket.create_connection`` whose name lookup ends at ``deadline`` too."""

    def connect(address: Address, timeout: float, source: Address | None = None) -> socket.socket:
        host, port = address
        last: OSError = OSError(f"no address for {host}")
        for ip in _addresses(host, port, deadline):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return socket.create_connection((ip, port), min(timeout, remaining), source)
            except OSError as exc:
                last = exc
        raise last

    return connect


def _addresses(host: str, port: int, deadline: float) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]  # a literal: nothing to look up
    except ValueError:
        pass
    if not _lookups.acquire(timeout=max(deadline - time.monotonic(), 0)):
        raise TimeoutError(f"{MAX_LOOKUPS} name lookups already waiting on the resolver")
    answer: list[list[str] | OSError] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.append([str(info[4][0]) for info in found])
        except OSError as exc:
            answer.append(exc)
        finally:
            _lookups.release()
            done.set()

    threading.Thread(target=look_up, name="specwatch-dns", daemon=True).start()
    if not done.wait(max(deadline - time.monotonic(), 0)):
        raise TimeoutError(f"name lookup of {host} did not answer within the deadline")
    result = answer[0]
    if isinstance(result, OSError):
        raise result
    return result
