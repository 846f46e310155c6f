"""``specwatch run`` says when a log path cannot be followed: a warning, a series, the page.

A real daemon over loopback with real directories, FIFOs and device links at the paths.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import urllib.request
from functools import partial
from operator import eq
from pathlib import Path

import pytest

from tests.support.daemon import run_daemon, simulated_log, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.tools import unprivileged
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


def landing(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def test_paths_that_cannot_be_followed_are_named_in_the_log_the_metrics_and_the_page(
    tmp_path: Path, port: int
) -> None:
    folder, fifo, device = tmp_path / "dir.log", tmp_path / "fifo.log", tmp_path / "zero.log"
    folder.mkdir()
    os.mkfifo(fifo)
    device.symlink_to("/dev/zero")
    late = tmp_path / "late.log"
    args = [f"--log-file={p}" for p in (folder, fifo, device, late)]
    with run_daemon([*args, "--log-missing-grace", "1"], port) as d:
        up = "specwatch_log_source_up"
        d.wait_metric(up, lambda v: v == 0, path=str(late), reason="missing")
        s = d.scrape()
        assert s.value(up, path=str(folder), reason="directory") == 0
        assert s.value(up, path=str(fifo), reason="not_regular") == 0
        assert s.value(up, path=str(device), reason="not_regular") == 0
        page = landing(d.port)
        assert f"<code>{folder}</code>: NOT FOLLOWED: is a directory" in page
        assert f"<code>{late}</code>: NOT FOLLOWED: no such file" in page
        # A file that appears after the grace is still followed.
        late.write_text(decode_line(2.5) + "\n")
        d.wait_metric(up, lambda v: v == 1, path=str(late), reason="ok")
        d.wait_metric("specwatch_accept_length", lambda v: v == 2.5)
        assert s.value("specwatch_log_lines_total") == 0  # nothing read from the others
    stderr = d.logged
    warnings = [line for line in stderr.splitlines() if "level=WARNING" in line]
    for path, words in (
        (folder, "is a directory"),
        (fifo, "is not a regular file"),
        (device, "is not a regular file"),
        (late, "no such file for 1 s"),
    ):
        named = [w for w in warnings if f"log {path}: " in w]
        assert len(named) == 1, (path, warnings)
        assert words in named[0]


def test_a_followed_log_is_up_and_the_page_shows_its_newest_window(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        d.wait_metric("specwatch_log_source_up", lambda v: v == 1, path=str(log), reason="ok")
        assert "no decode window seen yet" in landing(d.port)
        # Nothing is known about the server's speculation yet: no series of blank labels.
        assert d.scrape().value("specwatch_speculative_info") is None
        append(log, decode_line(1.0))
        d.wait_metric("specwatch_accept_length", lambda v: v == 1.0)
        page = landing(d.port)
    assert f"<code>{log}</code>: followed" in page
    assert "newest decode window 0 s ago" in page or "newest decode window 1 s ago" in page


def test_the_page_lists_active_findings(tmp_path: Path, port: int) -> None:
    log = simulated_log(tmp_path, "eagle-flag")
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as d:
        code = "eagle3_draft_with_eagle_algorithm"
        s = d.wait_metric("specwatch_finding", lambda v: v == 1, code=code)
        assert s.value("specwatch_speculative_info", algorithm="EAGLE") == 1
        page = landing(d.port)
    assert f"critical <code>{code}</code>" in page


def test_standard_input_ending_stops_the_daemon_with_status_1(port: int) -> None:
    """Under a service manager the pipe's end means the server is gone: exit, be restarted."""
    cmd = specwatch_cmd("run", "--log-file", "-", "--listen", f"127.0.0.1:{port}")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None
        proc.stdin.write(decode_line(2.0) + "\n")
        proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):  # a deadline, not a budget
            proc.wait(timeout=60)
    finally:
        proc.kill()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.wait() == 1, stderr
    assert "standard input ended" in stderr


def test_a_log_that_stays_followed_logs_no_warning(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        d.wait_metric("specwatch_log_source_up", lambda v: v == 1, path=str(log), reason="ok")
        for i in range(3):
            append(log, decode_line(2.0 + i))
            d.wait_metric("specwatch_accept_length", partial(eq, 2.0 + i))
    wait_for(lambda: d.proc.poll() is not None)
    stderr = d.logged
    assert "level=WARNING" not in stderr


def test_a_followed_log_whose_folder_becomes_unsearchable_stays_up_while_it_is_read(
    tmp_path: Path, port: int
) -> None:
    """It showed ``unreadable`` (and fired the not-followed alert) while every line was read."""
    folder = tmp_path / "logs"
    folder.mkdir()
    log = folder / "server.log"
    append(log, decode_line(2.5))
    with run_daemon(["--log-file", str(log)], port, prefix=unprivileged()) as daemon:
        try:
            folder.chmod(0)
            append(log, *[decode_line(2.5)] * 10)  # root may still write through the path
            scrape = daemon.wait_metric("specwatch_log_lines_total", lambda v: v == 10)
            for _ in range(3):  # several passes of the tailer, each seeing the folder shut
                scrape = daemon.wait_metric("specwatch_log_lines_total", lambda v: v == 10)
            assert scrape.value("specwatch_log_source_up", path=str(log), reason="ok") == 1
            assert scrape.values("specwatch_log_source_up") == [1]
        finally:
            folder.chmod(0o755)
    assert "reading on from the open file" in daemon.logged
