"""Signals reach a real daemon under load: SIGTERM ends it at once, SIGHUP does not."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.daemon import THREAD_DIED_STATUS
from tests.support.daemon import healthy, run_daemon, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

pytestmark = pytest.mark.e2e


# Well inside any supervisor's grace period, and short of the 10 s for which the idle client
# would hold a stop that waited for it. How long a stop takes is no test's business.
STOPS_WITHIN = 8


def hammer(port: int, stop: threading.Event, answered: threading.Semaphore) -> None:
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                resp.read()
            answered.release()
        except (OSError, http.client.HTTPException):
            pass  # the daemon going away mid-scrape (an answer cut short) is the point


@pytest.mark.parametrize("trial", range(3))
def test_sigterm_under_fifty_scrapers_and_an_idle_client_ends_the_daemon_at_once(
    tmp_path: Path, port: int, trial: int
) -> None:
    log = tmp_path / "server.log"
    append(log, *(decode_line(2.5) for _ in range(10)))
    cmd = specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stop, answered = threading.Event(), threading.Semaphore(0)
    scrapers = [threading.Thread(target=hammer, args=(port, stop, answered)) for _ in range(50)]
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        # A client that connected and has not sent its request yet when the signal comes.
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            for thread in scrapers:
                thread.start()
            for _ in range(50):  # the scrapers are being answered
                assert answered.acquire(timeout=PROCESS_TIMEOUT)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=STOPS_WITHIN)  # the idle client still connected
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        stop.set()
        for thread in scrapers:
            thread.join(timeout=5)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_sighup_is_logged_and_ignored(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as daemon:
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.proc.send_signal(signal.SIGHUP)
        assert "ignored" in daemon.output.wait_line("SIGHUP")
        assert daemon.proc.poll() is None
        assert healthy(port)


def test_a_wait_woken_without_a_signal_does_not_end_the_daemon(tmp_path: Path, port: int) -> None:
    """A profiler attaching by ptrace (py-spy, gdb) wakes ``sigtimedwait`` with a siginfo whose
    number is no signal at all; the daemon used to crash on it. The wake-up is simulated here,
    since attaching needs a debugger: everything else is the real daemon."""
    log = tmp_path / "server.log"
    append(log, decode_line(2.5))
    waiting_again = tmp_path / "waiting-again"
    code = (
        "import pathlib, signal, sys\n"
        "from exporter.cli import main\n"
        "real, woken = signal.sigtimedwait, []\n"
        "def wait(signals, timeout):\n"
        "    woken.append(1)\n"
        "    if len(woken) == 1:\n"
        "        return signal.struct_siginfo((520885952, 0, 0, 0, 0, 0, 0))\n"
        f"    pathlib.Path({str(waiting_again)!r}).touch()\n"
        "    return real(signals, timeout)\n"
        "signal.sigtimedwait = wait\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: waiting_again.exists() or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        assert proc.poll() is None and healthy(port)  # woken, and back to waiting
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=PROCESS_TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


@pytest.mark.parametrize(
    "storm",
    [
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGTERM, signal.SIGHUP),
        (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
    ],
)
def test_signals_arriving_while_it_stops_still_end_it_with_status_zero(
    tmp_path: Path, port: int, storm: tuple[signal.Signals, ...]
) -> None:
    """A supervisor repeating its SIGTERM, or a SIGHUP in the same breath, killed the stopping
    daemon by that signal (status 143 or 129) once it unblocked them."""
    log = tmp_path / "server.log"
    log.touch()
    cmd = specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        for signum in storm:
            proc.send_signal(signum)
        code = proc.wait(timeout=PROCESS_TIMEOUT)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_a_sighup_storm_is_logged_once_a_minute_not_once_a_signal(
    tmp_path: Path, port: int
) -> None:
    """300 SIGHUPs wrote 94 WARNING lines: a loop sending them could fill the journal."""
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as daemon:
        for _ in range(300):
            daemon.proc.send_signal(signal.SIGHUP)
            time.sleep(0.005)  # apart, as a loop of `kill -HUP` sends them: not merged
        # A SIGHUP still pending is taken before the SIGTERM: the lower number comes first.
        assert daemon.proc.poll() is None
        assert healthy(port)
        assert daemon.stop() == 0
    assert daemon.logged.count("SIGHUP ignored") == 1


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM])
def test_signals_with_no_use_are_logged_and_ignored(
    tmp_path: Path, port: int, signum: signal.Signals
) -> None:
    """Each killed the daemon by its default action, with no log line."""
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as daemon:
        daemon.proc.send_signal(signum)
        assert "ignored" in daemon.output.wait_line(signum.name)
        assert daemon.proc.poll() is None
        assert healthy(port)


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGQUIT, 0, "thread http-accept"), (signal.SIGXCPU, 1, "CPU time limit")],
)
def test_sigquit_and_sigxcpu_stop_it_with_a_log_line(
    tmp_path: Path, port: int, signum: signal.Signals, status: int, said: str
) -> None:
    """SIGQUIT logs where each thread is, then stops; SIGXCPU (the CPU-time limit, SIGKILL
    next) stops with status 1 so a supervisor restarts it. Both dumped core, unsaid."""
    log = tmp_path / "server.log"
    log.touch()
    cmd = specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        proc.send_signal(signum)
        assert proc.wait(timeout=PROCESS_TIMEOUT) == status
        stderr = proc.stderr.read() if proc.stderr else ""
        assert signum.name in stderr and said in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_a_thread_that_dies_stops_the_daemon_with_a_failing_status(
    tmp_path: Path, port: int
) -> None:
    """The accept thread died (a KeyError) and the process lived on answering nothing, then
    exited 0 on SIGTERM: no supervisor restarted it. The fault is injected into the real
    daemon's accept loop, a few passes after it answered its first probe."""
    log = tmp_path / "server.log"
    log.touch()
    code = (
        "import sys\n"
        "from exporter.cli import main\n"
        "from exporter.exposition.connections import Lobby\n"
        "real, passes = Lobby._dispatch, []\n"
        "def dispatch(self):\n"
        "    passes.append(1)\n"
        "    if len(passes) == 20:\n"
        "        raise RuntimeError('injected')\n"
        "    real(self)\n"
        "Lobby._dispatch = dispatch\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        wait_for(lambda: proc.poll() is not None or not healthy(port), timeout=PROCESS_TIMEOUT)
        assert proc.wait(timeout=PROCESS_TIMEOUT) == THREAD_DIED_STATUS
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        assert "thread http-accept died" in stderr and "RuntimeError: injected" in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
