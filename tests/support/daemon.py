"""Running the real ``specwatch run`` as a subprocess, the way users and CI run it."""

from __future__ import annotations

import collections
import contextlib
import gc
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import IO, TypeVar

import pytest

from exporter.cli import main
from tests.support.metrics import Scrape, scrape
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

T = TypeVar("T")
# Processes ``entered_together`` starts at a time.
STARTING_TOGETHER = 4


def healthz(port: int) -> tuple[int, str] | None:
    """Status and body of ``/healthz``, or None while nothing answers on ``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def healthy(port: int) -> bool:
    """Whether plain HTTP ``/healthz`` answers 200: every log source follows."""
    answer = healthz(port)
    return answer is not None and answer[0] == 200


class Output:
    """What a process writes, read on a thread as it comes: a pipe nobody reads fills at 64 KiB
    and then blocks the writer (a daemon logging for sixty targets stalled so).

    Bounded: the first ``HEAD`` characters and the last ``TAIL`` are kept, the middle of a
    longer output is dropped (and said so), so a test reads a start-up line and a late one
    alike and a chatty process costs no more memory than that.
    """

    HEAD = 256 << 10
    TAIL = 768 << 10

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Condition(threading.RLock())
        self._head: list[str] = []
        self._head_size = 0
        self._tail: collections.deque[str] = collections.deque()
        self._tail_size = 0
        self._dropped = 0
        self._ended = False
        self._thread = threading.Thread(target=self._drain, name="daemon-output", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        for line in self._stream:
            with self._lock:
                self._keep(line)
                self._lock.notify_all()
        self._stream.close()
        with self._lock:  # the end: a waiter stops waiting
            self._ended = True
            self._lock.notify_all()

    def _keep(self, line: str) -> None:
        if self._head_size + len(line) <= self.HEAD and not self._tail:
            self._head.append(line)
            self._head_size += len(line)
            return
        self._tail.append(line)
        self._tail_size += len(line)
        while self._tail_size > self.TAIL:
            dropped = self._tail.popleft()
            self._tail_size -= len(dropped)
            self._dropped += len(dropped)

    @property
    def text(self) -> str:
        """All that was kept so far, the dropped middle marked."""
        with self._lock:
            middle = [f"[... {self._dropped} characters dropped ...]\n"] if self._dropped else []
            return "".join([*self._head, *middle, *self._tail])

    def wait_line(self, needle: str, timeout: float = 10) -> str:
        """The first line kept that contains ``needle``, waiting (on the writes, not on a
        clock) until one is written; fails at the deadline or at the end of the output."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = next((x for x in self.text.splitlines() if needle in x), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0 or self._ended:
                    break
                self._lock.wait(left)
        assert found is not None, f"no line with {needle!r} within {timeout} s: {self.text}"
        return found

    def close(self, timeout: float = PROCESS_TIMEOUT) -> None:
        """Wait for the end of the output (the process has exited, or closed its end)."""
        self._thread.join(timeout)


class RunningDaemon:
    """A started ``specwatch run``; what it writes to a piped stdout (its log, where stderr
    goes there too) is drained into ``output`` as it comes."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port
        self._output = Output(proc.stdout) if proc.stdout is not None else None

    @property
    def output(self) -> Output:
        assert self._output is not None, "started without its output piped"
        return self._output

    @property
    def logged(self) -> str:
        """Its log (stderr, and stdout should it write any) so far; whole once it stopped."""
        return self.output.text

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum`` (once), wait for the exit, read the rest of the log; the status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=PROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"daemon did not stop within {PROCESS_TIMEOUT} s of {signal.Signals(signum).name}"
            ) from None
        if self._output is not None:
            self._output.close()
        return code

    def scrape(self) -> Scrape:
        return scrape(self.port)

    def wait_metric(
        self,
        name: str,
        predicate: Callable[[float | None], bool],
        timeout: float = 10,
        /,
        **labels: str,
    ) -> Scrape:
        """Scrape until ``predicate(value)`` holds for the named series. ``timeout`` is
        positional only: every keyword names a label."""

        def check() -> Scrape | None:
            s = self.scrape()
            return s if predicate(s.value(name, **labels)) else None

        return wait_for(check, timeout)


def config_file(tmp_path: Path, url: str, *, server_info: bool = True, interval: int = 1) -> Path:
    """A config scraping the server at ``url`` every ``interval`` seconds (and giving up on a
    scrape after as long, up to 10 s) as target ``sglang-0``: its ``/metrics``, and its
    ``/server_info`` unless ``server_info`` is false."""
    info = f"    server_info_url: {url}/server_info\n" if server_info else ""
    path = tmp_path / "specwatch.yaml"
    path.write_text(
        f"targets:\n  - name: sglang-0\n    metrics_url: {url}/metrics\n{info}"
        f"    scrape_interval: {interval}\n"
    )
    return path


def specwatch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "exporter", *args]


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    """``specwatch doctor ARGS`` run to its end, in this process (``in_process``)."""
    return in_process("doctor", *args)


def in_process(*argv: str) -> subprocess.CompletedProcess[str]:
    """A one-shot ``specwatch`` command run to its end through the CLI's own entry point, in
    this process: its exit status, stdout and stderr (the log records it writes there
    included) as a child would give them. A child process added nothing a test reads but the
    interpreter's start, about a CPU-second a call."""
    out, err = io.StringIO(), io.StringIO()
    # What an unconfigured process logs reaches its stderr as the bare message (logging's
    # last resort); here the test run's own handlers would take it instead.
    said = logging.StreamHandler(err)
    said.setLevel(logging.WARNING)
    root, threshold = logging.getLogger(), gc.get_threshold()
    frozen = gc.get_freeze_count()
    root.addHandler(said)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _exit_status(lambda: main(list(argv)))
    finally:
        root.removeHandler(said)
        # main tunes the collector for a process of its own, and `run` freezes what its
        # set-up made (``starting``): here the test's objects, which must stay collectable.
        # Unfreezing them unfreezes what the test run froze after collecting too
        # (tests/conftest.py), so only a command that froze anything does.
        gc.set_threshold(*threshold)
        if gc.get_freeze_count() != frozen:
            gc.unfreeze()
    return subprocess.CompletedProcess(["specwatch", *argv], code, out.getvalue(), err.getvalue())


def refused_start(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``specwatch run --listen 127.0.0.1:0 ARGS`` for a start the command must refuse, run
    to its end in this process (``in_process``) with ``env`` added to the environment.

    Should the command start the daemon instead, the test fails there (where a child would
    have served for good), with the daemon made but never started.
    """
    import exporter.daemon

    def started(daemon: exporter.daemon.Daemon) -> int:
        raise AssertionError(f"specwatch run {' '.join(args)}: nothing refused, it started")

    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        patch.setattr(exporter.daemon, "serve", started)
        return in_process("run", "--listen", "127.0.0.1:0", *args)


def _exit_status(command: Callable[[], int]) -> int:
    """The status a process running ``command`` exits with (argparse exits by itself)."""
    try:
        return command()
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)


@contextmanager
def run_daemon(
    args: Sequence[str],
    port: int,
    env: dict[str, str] | None = None,
    ready: Callable[[int], bool] = healthy,
    host: str = "127.0.0.1",
    prefix: Sequence[str] = (),
) -> Iterator[RunningDaemon]:
    """Start ``specwatch run`` on ``port`` and wait until it is ready; on exit, SIGTERM it and
    insist on a clean stop. ``prefix`` runs it under another command (``unprivileged()``).

    ``ready(port)`` tells when it answers (plain HTTP ``/healthz`` unless told otherwise). Ready
    means every log source follows: nothing appended from then on is lost.
    """
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    cmd = [*prefix, *specwatch_cmd("run", "--listen", listen, *args)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    daemon = RunningDaemon(proc, port)
    try:
        wait_for(lambda: ready(port) or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
    except AssertionError:  # never ready: not left running behind the failed test
        proc.kill()
        proc.wait()
        raise
    if proc.poll() is not None:
        daemon.output.close()
        raise AssertionError(f"daemon exited {proc.returncode}: {daemon.logged}")
    try:
        yield daemon
    finally:
        code = daemon.stop()
        assert code == 0, f"daemon exited {code}: {daemon.logged}"


@contextmanager
def live_simulation(
    scenario: str,
    log: Path,
    rate: int = 4,
    engine: str = "sglang",
    log_requests: str | None = None,
    seed: int = 0,
) -> Iterator[Path]:
    """``specwatch simulate`` appending ``scenario`` to ``log`` in real time until the block ends.

    Wall-clock stamped lines arriving as they would from a server, for tests that need a
    running exporter (and the Prometheus scraping it) to see an incident unfold.
    ``log_requests`` (``text`` or ``json``): the server logs its finished requests so.
    """
    errors = log.with_suffix(".stderr")
    flags: tuple[str, ...] = ("--scenario", scenario, "--engine", engine, "--rate", str(rate))
    flags += ("--seed", str(seed))
    if log_requests is not None:
        flags += ("--log-requests", log_requests)
    cmd = specwatch_cmd("simulate", *flags, "--out", str(log))
    with errors.open("w") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: log.exists() or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        assert proc.poll() is None, f"simulate exited {proc.returncode}: {errors.read_text()}"
        yield log
    finally:
        proc.terminate()
        proc.wait(timeout=PROCESS_TIMEOUT)


def simulated_log(folder: Path, scenario: str, engine: str = "sglang") -> Path:
    """A minute of ``specwatch simulate`` output for ``scenario``, written at once."""
    log = folder / "server.log"
    flags = ("--scenario", scenario, "--engine", engine, "--duration", "60", "--out", str(log))
    cmd = specwatch_cmd("simulate", *flags)
    subprocess.run(cmd, check=True, timeout=60)
    return log


def entered_together(stack: ExitStack, managers: Sequence[AbstractContextManager[T]]) -> list[T]:
    """Enter ``managers`` at once, each on a thread of its own, their exits left to ``stack``
    (last entered, first left): what each yields, in their order.

    A stack of a dozen daemons and simulators started one after another waited for each to
    come up in turn, mostly on the interpreter's start (a few seconds each on a loaded
    machine, a minute in all). ``STARTING_TOGETHER`` at a time keep two cores busy without
    stretching each start towards its deadline (``PROCESS_TIMEOUT``). If any fails to start,
    the others that did are stopped and the first failure is raised.
    """
    with ThreadPoolExecutor(max_workers=STARTING_TOGETHER) as pool:
        futures = [pool.submit(manager.__enter__) for manager in managers]
    failures = [error for f in futures if (error := f.exception()) is not None]
    for manager, future in zip(managers, futures, strict=True):
        if future.exception() is None:
            stack.push(manager.__exit__)
    if failures:
        raise failures[0]
    return [future.result() for future in futures]
