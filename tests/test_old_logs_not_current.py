"""An old log read by the daemon is counted, but its last windows are not the node's present.

Records are as old as the file's last write at most: a log moved into the watched path (``mv``
keeps its mtime) or read ``--from-beginning`` after its server died is history, not the
current accept length. A real daemon over loopback, real files, mtimes set with ``os.utime``.
"""

from __future__ import annotations

import os
import subprocess
import time
from functools import partial
from operator import eq
from pathlib import Path

import pytest

from tests.support.daemon import RunningDaemon, healthy, run_daemon, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import collapsed_drafter, crashed, decode_line
from tests.support.metrics import Scrape
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

TWO_HOURS = 2 * 3600.0
# The window gauges an on-call reads as the node's present; the first and last are the inputs
# of the collapse alert (target:specwatch_accept_length:avg5m and the throughput sum).
CURRENT = (
    "specwatch_accept_length",
    "specwatch_running_requests",
    "specwatch_queued_requests",
    "specwatch_gen_throughput_tokens_per_second",
)


def died_two_hours_ago(path: Path) -> tuple[list[str], float]:
    """A server log whose drafter collapsed (accept length 1.00 under load) before it died of
    CUDA OOM, last written two hours ago; its lines and that mtime."""
    lines = collapsed_drafter() + crashed()[-5:]  # the scheduler's exception and SIGQUIT
    path.write_text("\n".join(lines) + "\n")
    mtime = time.time() - TWO_HOURS
    os.utime(path, (mtime, mtime))
    return lines, mtime


def read_whole(d: RunningDaemon, lines: int) -> Scrape:
    """The scrape once every line is counted and the server's end taken in (its last line)."""

    def check() -> Scrape | None:
        s = d.scrape()
        whole = s.value("specwatch_log_lines_total") == lines
        return s if whole and s.value("specwatch_server_ended_timestamp_seconds") else None

    return wait_for(check, what="the whole log read")


def seconds_since_last_decode(s: Scrape) -> float:
    last = s.value("specwatch_last_decode_timestamp_seconds")
    assert last is not None
    return time.time() - last


def assert_history(s: Scrape, mtime: float) -> None:
    """Nothing of the old log shown as current; its times are the file's last write."""
    for name in CURRENT:
        assert s.values(name) == [], name
    assert s.value("specwatch_last_decode_timestamp_seconds") == pytest.approx(mtime, abs=1)
    assert s.value("specwatch_server_ended_timestamp_seconds") == pytest.approx(mtime, abs=1)
    assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 8


def test_an_old_log_moved_into_the_watched_path_is_counted_but_not_current(
    tmp_path: Path, port: int
) -> None:
    log, archived = tmp_path / "server.log", tmp_path / "archive.log"
    lines, mtime = died_two_hours_ago(archived)
    with run_daemon(["--log-file", str(log)], port) as d:
        os.rename(archived, log)
        assert_history(read_whole(d, len(lines)), mtime)
        # The server writes to it again: that is the present.
        append(log, decode_line(2.8))
        s = d.wait_metric("specwatch_accept_length", lambda v: v == 2.8)
        assert s.value("specwatch_running_requests") == 48
        assert seconds_since_last_decode(s) < 10


def test_the_daemon_read_from_the_beginning_of_a_dead_servers_log_shows_no_current_values(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    lines, mtime = died_two_hours_ago(log)
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as d:
        assert_history(read_whole(d, len(lines)), mtime)


def test_a_live_log_shows_its_newest_window_as_current(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        for accept in (1.0, 2.6):
            append(log, decode_line(accept, running=12))
            s = d.wait_metric("specwatch_accept_length", partial(eq, accept))
            assert s.value("specwatch_running_requests") == 12
            assert seconds_since_last_decode(s) < 10


def test_lines_from_standard_input_are_current(port: int) -> None:
    """A pipe has no time of last write: its lines are as old as their arrival."""
    cmd = specwatch_cmd("run", "--log-file", "-", "--listen", f"127.0.0.1:{port}")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdin is not None
        wait_for(lambda: healthy(port) or proc.poll() is not None)
        proc.stdin.write(decode_line(2.4, running=7) + "\n")
        proc.stdin.flush()
        s = RunningDaemon(proc, port).wait_metric("specwatch_accept_length", lambda v: v == 2.4)
        assert s.value("specwatch_running_requests") == 7
        assert seconds_since_last_decode(s) < 10
    finally:
        proc.kill()
        proc.wait(timeout=10)
