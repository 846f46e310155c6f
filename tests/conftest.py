"""Fixtures and checks for every test; the helpers behind them live in ``tests/support``."""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from exporter.cpus import usable_cpus
from exporter.runtime import tune_gc
from tests.support.durations import recorded
from tests.support.tools import TOOLS_BIN, free_port

# The test run keeps bytecode (``__pycache__``, ignored by git) even where the environment says
# not to (PYTHONDONTWRITEBYTECODE): without it each pytest worker rewrites and compiles every
# test module again (5 CPU-s a worker) and every ``specwatch`` a test starts compiles the
# exporter again (0.3 CPU-s a start, hundreds of starts). Set here, before any test module is
# imported, and for the processes tests start in ``pytest_configure``.
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    """Put the pinned Prometheus tools first on the PATH, for every process a test starts
    (``promtool`` by name, the demo's Prometheus): the versions tests prove are those. Their
    garbage collection is tuned for the tests' short runs."""
    os.environ["PATH"] = os.pathsep.join([str(TOOLS_BIN), os.environ.get("PATH", "")])
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    # The Go tools (promtool, Prometheus, Alertmanager) collect garbage four times less often:
    # promtool's unit scenarios took a quarter less CPU, at twice its 86 MB, for short runs.
    os.environ.setdefault("GOGC", "400")
    if not hasattr(config, "workerinput"):  # once, before xdist starts its workers
        _list_fonts()


def _list_fonts() -> None:
    """Have matplotlib list the machine's fonts now, before any test. The first time it is
    imported under a user it runs ``fc-list`` and caches the list: on a new machine the first
    unit test that draws a chart started a process, and the guard below failed it. Once the
    list is cached, importing matplotlib here only cost each run about half a CPU-second
    before the workers started."""
    if _fonts_listed():
        return
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:  # the report extra is not installed: no test draws a chart
        return


def _fonts_listed() -> bool:
    """Whether the installed matplotlib's font list is cached where it keeps it on Linux
    (``MPLCONFIGDIR``, else ``$XDG_CACHE_HOME/matplotlib``), found without importing it.
    Anything else (another system, a version not found) says no, and the fonts are listed."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations or sys.platform != "linux":
        return False
    source = Path(spec.submodule_search_locations[0], "font_manager.py").read_text("utf-8")
    version = re.search(r"^    __version__ = '([^']+)'$", source, re.MULTILINE)
    cache = os.environ.get("MPLCONFIGDIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "matplotlib"
    )
    return version is not None and Path(cache, f"fontlist-v{version[1]}.json").is_file()


# Property tests' effort, set here and nowhere else (a test's own ``@settings`` names no
# ``max_examples``). ``dev`` keeps ``make unit`` quick with 10 cases a test (30 were a ninth of
# its CPU, for cases CI tries anyway; a failing case once found is replayed from
# ``.hypothesis`` first). ``ci`` (chosen by ``CI=true``, as ``.ci/run`` sets it) tries
# hypothesis' default of 100 cases: 300 made the property tests a sixth of the whole suite's
# CPU (175 CPU-s, a third of them the state's batch shortcuts) for cases that shrink to the
# same few shapes. Neither has a wall-clock deadline nor a too-slow check: on a loaded machine
# those fail for the machine, not for the code. ``HYPOTHESIS_PROFILE=ci`` chooses the thorough
# one by hand.
_UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", _UNTIMED, max_examples=10)
settings.register_profile("ci", _UNTIMED, max_examples=100, print_blob=True)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (``make test``, ``make unit``): two workers per CPU this process may use, as
    the daemon counts them (affinity, then the cgroup's quota), not the host's cores.

    Two, because a third of the files spend most of their wall waiting on real time (a
    Prometheus evaluating rules, a daemon following a paced log) at little CPU: with a worker
    per CPU one sat waiting while the other had the rest of the run. On 2 CPUs the whole
    suite took 6 min 17 s with two workers and 3 min 27 s with four, at the same CPU."""
    return 2 * usable_cpus()


# A module whose every test is end-to-end says so in one line (44 of them).
_ALL_E2E = re.compile(r"^pytestmark = pytest\.mark\.e2e\b", re.MULTILINE)
# The unit layer (``-m "not e2e"``) and ``make unit`` (its sweeps' representative cases only).
_UNIT = ("not e2e", "not e2e and not sweep")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m "not e2e"`` (the unit layer) or ``make unit``'s ``-m "not e2e and not
    sweep"`` a module whose every test is end-to-end is not collected: every worker imported
    it and made each of its tests only to deselect them all, a third of the modules and about
    a fifth of each worker's start. The tests that run are the same; the run no longer counts
    those modules' tests as deselected."""
    if " ".join(config.option.markexpr.split()) not in _UNIT:
        return None
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return True if _ALL_E2E.search(collection_path.read_text("utf-8")) else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what collection made out of every later garbage collection (``gc.freeze``), and
    run the cycle collector as rarely as every specwatch process does (``tune_gc``).

    The modules, the items and the parameters live until the run ends: each full collection
    walked them all again for nothing, several times a worker, and pytest's own two at the end
    of the run (about 1.5 CPU-s of ``make unit`` in all). Whatever the tests make is collected
    as before. ``in_process`` keeps the freeze unless the command froze objects itself."""
    gc.freeze()
    tune_gc()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first (``tests/support/durations.py``: why), so no long file starts
    last and runs alone. A file with no recorded time goes first: it may be a long one.
    The sort is stable, so a file's tests keep their order; the Makefile tells xdist to keep
    this order (``--no-loadscope-reorder``)."""
    seconds = recorded()
    unknown = max(seconds.values(), default=0.0) + 1
    items.sort(key=lambda item: -seconds.get(item.path.name, unknown))


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
