"""Fixtures and checks for every test; the helpers behind them live in ``tests/support``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.tools import free_port


@pytest.fixture
def port() -> int:
    return free_port()


@contextmanager
def _processes_only_in_e2e(item: pytest.Item) -> Iterator[None]:
    """The fast layer starts no process: a test that does must carry the ``e2e`` marker.

    Keeps ``make unit`` quick and free of tools and ports, and the marker true as tests are
    added: an unmarked test (or a fixture it sets up) that starts a process fails, naming the
    marker it lacks.
    """
    if item.get_closest_marker("e2e") is not None:
        yield
        return

    def refuse(self: subprocess.Popen[Any], args: object, *rest: object, **kw: object) -> None:
        raise AssertionError(f"{args!r}: a test that starts a process needs @pytest.mark.e2e")

    allowed = subprocess.Popen.__init__
    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = allowed  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _processes_only_in_e2e(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _processes_only_in_e2e(item):
        yield
