"""Connecting to a named host within a scrape's deadline, the name lookup included.

``getaddrinfo`` blocks its caller for as long as the resolver takes (five seconds a try by
default, more with retries) and takes no timeout, so a server name whose DNS never answers
turned a 2 s scrape deadline into 10 s. The lookup runs in a short-lived daemon thread that
is waited for only until the deadline; a lookup left behind ends with the resolver's own
timeout, and at most ``MAX_LOOKUPS`` are under way at once, so a dead resolver cannot pile
threads up; names whose lookups fail take at most ``FAILING_LOOKUPS`` of them, so the rest stay
for names that answer, and a name whose lookup cannot be made in time keeps its last answer.
Daemon threads never hold up the process's exit.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable

MAX_LOOKUPS = 8
FAILING_LOOKUPS = MAX_LOOKUPS - 2
"""Of those, the most for names whose last lookup failed or ran past its deadline: 20 names
whose DNS never answered kept all 8 busy, and a healthy ``localhost`` target went down for
want of one."""
MAX_REMEMBERED = 1024  # names remembered as failing, and good answers kept
_lookups = threading.BoundedSemaphore(MAX_LOOKUPS)
_failing_lookups = threading.BoundedSemaphore(FAILING_LOOKUPS)
_lock = threading.Lock()
_failing: set[str] = set()
_last_good: dict[tuple[str, int], list[str]] = {}

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
    with _lock:
        known = _last_good.get((host, port))
    # With an answer to fall back on, wait a quarter of what is left: the rest is the scrape's.
    patience = deadline if known is None else (3 * time.monotonic() + deadline) / 4
    try:
        found = _look_up(host, port, patience)
    except TimeoutError:
        if known is None:
            raise
        return known  # the resolver is busy or slow: the last answer it gave for this name
    with _lock:
        if len(_last_good) >= MAX_REMEMBERED:
            _last_good.clear()
        _last_good[(host, port)] = found
    return found


def _look_up(host: str, port: int, deadline: float) -> list[str]:
    """``getaddrinfo`` in a thread of its own, waited for until ``deadline``."""
    with _lock:
        failing = host in _failing
    slots = [_failing_lookups, _lookups] if failing else [_lookups]
    taken: list[threading.BoundedSemaphore] = []
    for slot in slots:
        if not slot.acquire(timeout=max(deadline - time.monotonic(), 0)):
            for held in taken:
                held.release()
            raise TimeoutError(f"{MAX_LOOKUPS} name lookups already waiting on the resolver")
        taken.append(slot)
    answer: list[list[str] | OSError] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.append([str(info[4][0]) for info in found])
        except OSError as exc:
            answer.append(exc)
        finally:
            for held in taken:
                held.release()
            done.set()

    threading.Thread(target=look_up, name="specwatch-dns", daemon=True).start()
    answered = done.wait(max(deadline - time.monotonic(), 0))
    result = answer[0] if answered else None
    _remember(host, failing=not isinstance(result, list))
    if result is None:
        raise TimeoutError(f"name lookup of {host} did not answer within the deadline")
    if isinstance(result, OSError):
        raise result
    return result


def _remember(host: str, failing: bool) -> None:
    with _lock:
        if not failing:
            _failing.discard(host)
            return
        if len(_failing) >= MAX_REMEMBERED:
            _failing.clear()
        _failing.add(host)
