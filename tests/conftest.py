"""Shared fixtures: real tools, free ports, and a running daemon scraped over HTTP."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def require_tool(name: str) -> str:
    """Path of a real external tool; in CI a missing tool fails the test instead of skipping."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} is not installed (make test installs it: scripts/install-system-deps.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def port() -> int:
    return free_port()
