"""The file tailer while it runs: start policy, bootstrap, partial and long lines, wake-ups."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from exporter.sources.tail import FileTailer, WakeupObserver
from tests.test_tail_support import (
    Recorder,
    append,
    following,
    joined,
    let_tailer_run,
    numbered,
    wait_until,
)


def expected_bootstrap(data: bytes, head: int, tail: int) -> list[bytes]:
    """Complete lines lying wholly in the first ``head`` or last ``tail`` bytes, once each."""
    picked: list[bytes] = []
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        if end < head or start >= len(data) - tail:
            picked.append(data[start:end])
        start = end + 1
    return picked


def test_file_present_at_start_is_followed_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    old = numbered("before start", 5)
    log.write_bytes(joined(old))
    with following(log) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        new = numbered("after start", 3)
        append(log, joined(new))
        wait_until(lambda: rec.lines == new, "the appended lines")
    assert rec.bootstraps[0][0] == old
    assert rec.snapshot()[0][0] == "bootstrap"


def test_bootstrap_gives_whole_head_and_tail_lines_once_with_the_file_mtime(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    data = joined([f"line {i:03d} {'x' * (i % 7)}".encode() for i in range(200)])
    log.write_bytes(data)
    os.utime(log, (1_700_000_000.5, 1_700_000_000.5))
    with following(log, bootstrap_head_bytes=100, bootstrap_tail_bytes=150) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
    lines, mtime = rec.bootstraps[0]
    assert lines == expected_bootstrap(data, 100, 150)
    assert lines[0] == b"line 000 " and lines[-1].startswith(b"line 199")
    assert mtime == 1_700_000_000.5
    assert rec.lines == []


def test_bootstrap_of_a_file_smaller_than_both_windows_lists_each_line_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(joined(numbered("small", 4)))
    with following(log) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
    assert rec.bootstraps[0][0] == numbered("small", 4)


def test_line_unfinished_at_start_is_completed_through_on_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"one\ntwo\npart")
    with following(log) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        append(log, b"ial\nthree\n")
        wait_until(lambda: len(rec.lines) == 2, "two lines")
    assert rec.bootstraps[0][0] == [b"one", b"two"]
    assert rec.lines == [b"partial", b"three"]


def test_last_line_longer_than_the_tail_window_is_skipped_not_split(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"head\n" + b"y" * 500)
    with following(log, bootstrap_head_bytes=8, bootstrap_tail_bytes=50) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        append(log, b"yyy\nnext\n")
        wait_until(lambda: rec.lines, "the next line")
    assert rec.bootstraps[0][0] == [b"head"]
    assert rec.lines == [b"next"]


def test_from_beginning_reads_everything_through_on_lines_without_bootstrap(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    old = numbered("old", 50)
    log.write_bytes(joined(old))
    with following(log, from_beginning=True) as (_, rec):
        wait_until(lambda: len(rec.lines) == 50, "the existing lines")
        append(log, b"new\n")
        wait_until(lambda: len(rec.lines) == 51, "the new line")
    assert rec.lines == [*old, b"new"]
    assert rec.count("bootstrap") == 0


def test_file_absent_at_start_is_read_from_its_first_byte(tmp_path: Path) -> None:
    log = tmp_path / "later" / "server.log"
    with following(log) as (_, rec):
        let_tailer_run()
        log.parent.mkdir()
        lines = numbered("first", 3)
        log.write_bytes(joined(lines))
        wait_until(lambda: rec.lines == lines, "the lines of the new file")
        append(log, b"more\n")
        wait_until(lambda: len(rec.lines) == 4, "the appended line")
    assert rec.count("bootstrap") == 0
    assert rec.count("read_error") == 0


def test_partial_write_is_held_until_its_newline_arrives(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with following(log) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        with open(log, "ab", buffering=0) as writer:
            writer.write(b"Decode batch, #running-req: ")
            let_tailer_run()
            writer.write(b"4\r")
            let_tailer_run()
            writer.write(b"\nnext\n")
        wait_until(lambda: len(rec.lines) >= 2, "the completed lines")
    assert rec.lines == [b"Decode batch, #running-req: 4\r", b"next"]


def test_lines_over_the_cap_are_skipped_and_counted_once_each(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with following(log, max_line_bytes=1000) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        with open(log, "ab", buffering=0) as writer:
            writer.write(b"before\n" + b"p" * 600)
            let_tailer_run(0.05)
            writer.write(b"p" * 600)
            let_tailer_run(0.05)
            writer.write(b"p" * 5000 + b"\n" + b"q" * 1001 + b"\nafter\n" + b"r" * 1000 + b"\n")
        wait_until(lambda: len(rec.lines) == 3, "the lines around the long ones")
    assert rec.lines == [b"before", b"after", b"r" * 1000]
    assert rec.reasons("skipped") == {"too_long": 2}


def test_garbage_bytes_are_passed_through_untouched(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    raw = [
        b"\xff\xfe\xfd invalid utf-8",
        b"nul \x00 inside",
        b"\x1b[33m[2025-01-01 00:00:00] coloured\x1b[0m",
        b"progress 10%\rprogress 50%\rprogress 100%",
        b"windows line\r",
    ]
    with following(log) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        append(log, joined(raw))
        wait_until(lambda: len(rec.lines) == len(raw), "all lines")
    assert rec.lines == raw


def test_directory_notification_wakes_a_slow_poller(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    observer = WakeupObserver()
    observer.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, poll_interval=30.0, observer=observer)
    try:
        tailer.start()
        wait_until(lambda: rec.bootstraps, "bootstrap")
        assert observer.active
        append(log, b"wake up\n")
        wait_until(lambda: rec.lines == [b"wake up"], "a woken pass", timeout=1.5)
    finally:
        tailer.stop()
        observer.stop()


def test_polling_alone_follows_when_notifications_are_unavailable(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    never_started = WakeupObserver()
    with following(log, observer=never_started) as (_, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        append(log, b"polled\n")
        wait_until(lambda: rec.lines == [b"polled"], "a polled line")
    assert not never_started.active


def test_stop_is_idempotent_and_releases_files_and_threads(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x\n")
    fds_before = set(os.listdir("/proc/self/fd"))
    threads_before = threading.active_count()
    with following(log) as (tailer, rec):
        wait_until(lambda: rec.bootstraps, "bootstrap")
        assert set(os.listdir("/proc/self/fd")) - fds_before
    tailer.stop()
    deadline = time.monotonic() + 2.0
    while threading.active_count() > threads_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == threads_before
    assert set(os.listdir("/proc/self/fd")) <= fds_before
