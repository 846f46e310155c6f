"""An old log read by the daemon is counted, but its last windows are not the node's present.

Records are as old as the file's last write at most: a log moved into the watched path (``mv``
keeps its mtime) or read ``--from-beginning`` after its server died is history, not the
current accept length. A real daemon over loopback, real files, mtimes set with ``os.utime``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from functools import partial
from operator import eq
from pathlib import Path

import pytest

from tests.support.daemon import RunningDaemon, healthy, run_daemon, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import collapsed_drafter, crashed, decode, decode_line, prefill, startup
from tests.support.metrics import Scrape
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

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


def test_an_old_log_ending_in_prefills_is_not_missing_its_decode_stats(
    tmp_path: Path, port: int
) -> None:
    """Its last lines are a few prefills after the decode lines, and it was last written 4459 s
    ago: the finding said "no decode stats line in the log for 4459 s" of a log that ended."""
    log = tmp_path / "server.log"
    lines = startup() + [decode(260 + 4 * i, 2.8, 0.6) for i in range(8)]
    lines += [prefill(300 + 2 * i) for i in range(4)]
    log.write_text("\n".join(lines) + "\n")
    date(log, time.time() - 4459)
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as d:
        s = d.wait_metric("specwatch_log_lines_total", partial(eq, len(lines)))
        assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 8
        assert s.value("specwatch_finding", code="decode_stats_not_logged") is None


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


def date(path: Path, mtime: float) -> None:
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("mtime", [0.0, -600.0], ids=["1970", "ten_minutes_behind"])
def test_lines_written_while_followed_are_current_whatever_the_files_date(
    tmp_path: Path, port: int, mtime: float
) -> None:
    """A writer with a skewed clock, a network or VM share, an mtime not updated: 50 of 50
    lines were counted, yet no accept length, running requests or throughput was exported."""
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        for accept in (2.2, 2.9):
            append(log, decode_line(accept, running=12))
            date(log, mtime if mtime >= 0 else time.time() + mtime)
            s = d.wait_metric("specwatch_accept_length", partial(eq, accept))
            assert s.value("specwatch_running_requests") == 12
            assert seconds_since_last_decode(s) < 10


def test_a_file_whose_mtime_goes_backwards_still_shows_its_newest_window(
    tmp_path: Path, port: int
) -> None:
    """The accept length stayed at the first window once the file's mtime went 30 s back."""
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        append(log, decode_line(3.0))
        d.wait_metric("specwatch_accept_length", partial(eq, 3.0))
        append(log, decode_line(1.0))
        date(log, time.time() - 30)
        d.wait_metric("specwatch_accept_length", partial(eq, 1.0))


def test_the_wall_clock_stepped_back_an_hour_does_not_freeze_the_window(
    tmp_path: Path, port: int
) -> None:
    """After the step the accept length stayed at the pre-step 3.0 in 10 of 10 scrapes while
    the log said 1.00, and the landing page called it "0 s ago". The step is the one thing
    simulated: the daemon's ``time.time`` reads an hour back once the flag file exists."""
    log, flag = tmp_path / "server.log", tmp_path / "stepped"
    log.touch()
    code = (
        "import os, sys, time\n"
        "real = time.time\n"
        f"time.time = lambda: real() - (3600 if os.path.exists({str(flag)!r}) else 0)\n"
        "from exporter.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, timeout=PROCESS_TIMEOUT)
        d = RunningDaemon(proc, port)
        append(log, decode_line(3.0))
        d.wait_metric("specwatch_accept_length", partial(eq, 3.0))
        flag.touch()
        append(log, decode_line(1.0))
        d.wait_metric("specwatch_accept_length", partial(eq, 1.0))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
            assert "accept length 1.00" in page.read().decode()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_log_dated_in_the_future_is_not_current_at_start(tmp_path: Path, port: int) -> None:
    """A date after now is unknown, not now: the window of a log dated 2100 was exported as
    the node's present."""
    log = tmp_path / "server.log"
    append(log, *(decode_line(2.0, running=30) for _ in range(5)))
    date(log, 4102444800.0)  # 2100-01-01
    with run_daemon(["--log-file", str(log)], port) as d:
        s = d.scrape()
        for name in CURRENT:
            assert s.values(name) == [], name
        append(log, decode_line(2.7))
        d.wait_metric("specwatch_accept_length", partial(eq, 2.7))


@pytest.mark.parametrize("dead_mtime", [4102444800.0, 0.0], ids=["2100", "newer_at_start"])
def test_a_glob_follows_the_live_log_not_a_dead_one_dated_later(
    tmp_path: Path, port: int, dead_mtime: float
) -> None:
    """A dead log dated 2100, or just written last before the start, was followed for good:
    0 of 20 live lines read and its accept length 2.0 exported as current, unsaid."""
    dead, live = tmp_path / "a-dead.log", tmp_path / "b-live.log"
    append(dead, *(decode_line(2.0) for _ in range(3)))
    append(live, decode_line(2.5))
    date(live, time.time() - 60)
    date(dead, dead_mtime or time.time() - 5)
    with run_daemon(["--log-file", str(tmp_path / "*.log")], port) as d:
        append(live, *(decode_line(1.4, running=9) for _ in range(20)))
        s = d.wait_metric("specwatch_log_stats_lines_total", partial(eq, 20), kind="decode")
        s = d.wait_metric("specwatch_accept_length", partial(eq, 1.4))
        assert s.value("specwatch_running_requests") == 9
