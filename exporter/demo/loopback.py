"""Ports for the demo's services on loopback, and reading from them while they come up.

Each service takes its well-known port where it can bind it, else one the kernel picks (port
0), and the demo reads back the port it got: from the server it made, or from the line the
service writes once it listens. No port is probed and let go before the service binds it, so
two demos started together cannot both be handed one port and then fight over it.
"""

from __future__ import annotations

import re
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


# The well-known ports, taken where they are free.
PREFERRED = Ports(exporter=9477, prometheus=9090, alertmanager=9093, webhook=9099)

# What each service writes once it listens, with the port it got: specwatch's start line, and
# the "Listening on" line Prometheus and Alertmanager write in both their log formats.
EXPORTER_LISTENING = re.compile(r"listening on \S+ \(port (\d+)\)")
TOOL_LISTENING = re.compile(r'msg="?Listening on"?.*?\baddress=\S*:(\d+)')


def bound(start: Callable[[int], int | None], preferred: int) -> int | None:
    """The port a service listens on: ``start(port)`` starts it on ``port`` and gives the port
    it then listens on, or None where it could not bind; tried on ``preferred``, then on one
    the kernel picks. None when neither came up."""
    for port in (preferred, 0):
        listening = start(port)
        if listening is not None:
            return listening
    return None


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
