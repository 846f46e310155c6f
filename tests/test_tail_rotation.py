"""Rotation, truncation, recreation and glob following, done with real file operations."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exporter.sources.tail import FileTailer, TailLoop
from tests.support.files import append
from tests.support.loglines import joined, numbered
from tests.support.tailing import Recorder, following, stepped, turned
from tests.support.waiting import wait_for


@contextmanager
def following_empty(log: Path, **options: Any) -> Iterator[Recorder]:
    """``log`` created empty and followed, with the tailer past its start-up bootstrap."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    with following(log, **options) as (_, rec):
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        yield rec


def test_rename_and_create_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with following_empty(log) as rec:
        with open(log, "ab", buffering=0) as old_writer:
            old_writer.write(joined(numbered("old", 100)))
            wait_for(lambda: len(rec.lines) == 100, what="the old lines")
            old_writer.write(b"unread before rename\n")
            os.rename(log, tmp_path / "server.log.1")
            old_writer.write(b"late, before create\n")
            append(log, raw=joined(numbered("new", 3)))
            wait_for(lambda: rec.count("rotation") == 1, what="the rotation")
            old_writer.write(b"late, after create\n")
            wait_for(lambda: len(rec.lines) == 106, what="every line")
        append(log, raw=b"new 3\n")
        wait_for(lambda: len(rec.lines) == 107, what="the last line")
    lines = rec.lines
    assert lines[:102] == [
        *numbered("old", 100),
        b"unread before rename",
        b"late, before create",
    ]
    assert sorted(lines[102:]) == sorted([*numbered("new", 4), b"late, after create"])
    assert lines[-1] == b"new 3"
    assert (rec.count("rotation"), rec.count("new_file"), rec.count("truncation")) == (1, 1, 0)


def test_path_missing_for_a_while_keeps_the_old_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec), open(log, "ab", buffering=0) as old_writer:
        tailer.poll()
        os.rename(log, tmp_path / "server.log.1")
        tailer.poll()
        old_writer.write(b"written while the path was missing\n")
        tailer.poll()
        assert rec.lines == [b"written while the path was missing"]
        append(log, "first of the new file")
        tailer.poll()
    assert rec.lines == [b"written while the path was missing", b"first of the new file"]
    assert rec.count("rotation") == 1
    assert rec.count("read_error") == 0


def test_copytruncate_restarts_at_zero_and_drops_the_unfinished_fragment(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec), open(log, "ab", buffering=0) as writer:
        tailer.poll()
        writer.write(joined(numbered("before", 10)) + b"unfinished")
        tailer.poll()
        assert rec.lines == numbered("before", 10)
        shutil.copy(log, tmp_path / "server.log.1")
        os.truncate(log, 0)
        tailer.poll()
        assert rec.count("truncation") == 1
        writer.write(joined(numbered("after", 2)))
        tailer.poll()
    assert rec.lines[10:] == numbered("after", 2)
    assert rec.reasons("skipped") == {"partial_discarded": 1}
    assert (rec.count("truncation"), rec.count("new_file"), rec.count("rotation")) == (1, 1, 0)


def test_a_copy_opening_the_log_reads_it_before_the_truncation(tmp_path: Path) -> None:
    """A written log waits for the loop's next tick; logrotate's copytruncate opens the log,
    copies it and truncates it, and the lines written since the last pass were gone with the
    truncation (up to a second of them). The copier's open now reads them at once."""
    log, copy = tmp_path / "server.log", tmp_path / "server.log.1"
    log.touch()
    loop = TailLoop(coalesce=3600.0)  # no tick comes: only the open can bring the read
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, poll_interval=30.0, loop=loop)
    with open(log, "ab", buffering=0) as server:  # a server holds its log open
        try:
            tailer.start()
            # The first pass over, not just begun: a write made while it still read was
            # read by it (under load), not held for the tick.
            wait_for(tailer.ready.is_set, what="the first pass")
            assert loop.active
            server.write(joined(numbered("before", 20)))
            turned(loop)  # the write's notification taken
            assert rec.lines == []  # held for the tick
            with open(log, "r+b") as source, open(copy, "wb") as target:  # copytruncate's steps
                deadline = time.monotonic() + 2.0  # a copy of a large log takes this long
                while len(rec.lines) < 20 and time.monotonic() < deadline:
                    time.sleep(0.01)
                shutil.copyfileobj(source, target)
                source.truncate(0)
            server.write(joined(numbered("after", 3)))
            assert loop.sync(timeout=5.0)
            wait_for(lambda: len(rec.lines) >= 23, timeout=3.0, what="the lines after the copy")
        finally:
            tailer.stop()
            loop.stop()
    assert rec.lines == numbered("before", 20) + numbered("after", 3)
    assert rec.count("truncation") == 1


def test_a_steady_log_is_not_read_more_often_for_its_own_reads(tmp_path: Path) -> None:
    """Opens wake the loop at once: the tailer's own reads and a glob's listing must not, or
    a log written steadily would be read at every write again."""
    log = tmp_path / "server.log"
    log.touch()
    loop = TailLoop(coalesce=3600.0)
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(tmp_path / "*.log"), rec, poll_interval=30.0, loop=loop)
    with open(log, "ab", buffering=0) as server:
        try:
            tailer.start()
            # The first pass over, not just begun: a write made while it still read was
            # read by it (under load), not held for the tick.
            wait_for(tailer.ready.is_set, what="the first pass")
            for n in range(10):
                server.write(f"line {n}\n".encode())
                time.sleep(0.05)
            os.listdir(tmp_path)  # a directory listed, as a glob does
            turned(loop)  # every write and open taken, and what they made due read
            assert rec.lines == []  # all held for the tick, an hour away
        finally:
            tailer.stop()
            loop.stop()


def test_delete_and_recreate_reads_the_new_file_from_its_first_byte(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"at start\n")
    with stepped(log) as (tailer, rec):
        tailer.poll()
        append(log, "before delete")
        tailer.poll()
        os.remove(log)
        tailer.poll()
        log.write_bytes(joined(numbered("recreated", 3)))
        tailer.poll()
    assert rec.lines == [b"before delete", *numbered("recreated", 3)]
    assert (rec.count("rotation"), rec.count("new_file")) == (1, 1)


def test_retired_file_is_released_after_rotate_wait_dropping_its_fragment(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log, rotate_wait=0.0) as (tailer, rec):
        tailer.poll()
        append(log, "complete", raw=b"never finished")
        tailer.poll()
        os.rename(log, tmp_path / "server.log.1")
        append(log, "new")
        tailer.poll()  # switches to the new file; the old one is retired, at once past its wait
        tailer.poll()  # releases it
        assert rec.reasons("skipped") == {"partial_discarded": 1}
        append(tmp_path / "server.log.1", raw=b" after release\n")
        append(log, "newer")
        tailer.poll()
        tailer.poll()
    assert rec.lines == [b"complete", b"new", b"newer"]


def test_glob_follows_the_newest_match_and_switches_to_a_newer_one(tmp_path: Path) -> None:
    older, newest = tmp_path / "0.log", tmp_path / "1.log"
    older.write_bytes(b"older file\n")
    os.utime(older, (1_600_000_000, 1_600_000_000))
    newest.write_bytes(b"newest file\n")
    (tmp_path / "1.log.20250101-000000").write_bytes(b"not a match\n")
    with stepped(tmp_path / "*.log") as (tailer, rec):
        tailer.poll()
        append(newest, "followed")
        tailer.poll()
        assert rec.lines == [b"followed"]
        appeared = tmp_path / "2.log"
        appeared.write_bytes(b"from the first byte\n")
        tailer.poll()
        append(older, "older file touched")
        append(newest, "late write to the replaced file")
        tailer.poll()
        tailer.poll()
        append(appeared, "still followed")
        tailer.poll()
    assert rec.bootstraps[0][0] == [b"newest file"]
    assert rec.lines == [
        b"followed",
        b"from the first byte",
        b"late write to the replaced file",
        b"still followed",
    ]
    assert rec.count("rotation") == 1


def test_glob_without_a_match_waits_for_the_first_file(tmp_path: Path) -> None:
    pod_dir = tmp_path / "ns_pod_uid" / "sglang"
    with stepped(pod_dir / "*.log") as (tailer, rec):
        tailer.poll()
        assert tailer.ready.is_set()
        pod_dir.mkdir(parents=True)
        (pod_dir / "0.log").write_bytes(b"container started\n")
        tailer.poll()
    assert rec.lines == [b"container started"]
    assert rec.count("bootstrap") == 0
    assert rec.count("rotation") == 0


def test_rewrite_to_the_same_size_is_read_again_as_a_truncation(tmp_path: Path) -> None:
    """Truncated and rewritten between two passes: the size says nothing, the first bytes do."""
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec):
        tailer.poll()
        log.write_bytes(b"first run line\n")
        tailer.poll()
        assert rec.lines == [b"first run line"]
        with open(log, "r+b") as handle:  # truncate and rewrite, same length, no pass in between
            handle.truncate(0)
            handle.write(b"second run ln!\n")
        tailer.poll()
        assert rec.lines == [b"first run line", b"second run ln!"]
        assert rec.count("truncation") == 1


def test_a_rewrite_keeping_the_first_line_is_read_again_too(tmp_path: Path) -> None:
    """A banner first line defeated the first-bytes check: 1,200 of 2,400 lines were read."""
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec):
        tailer.poll()
        banner = "=" * 80
        first = [banner, *(f"run 1 line {i:04d}" for i in range(1200))]
        append(log, *first)
        tailer.poll()
        second = [banner, *(f"run 2 line {i:04d}" for i in range(1200))]
        with open(log, "r+b") as handle:  # same length, same first line, no pass in between
            handle.truncate(0)
            handle.write("".join(f"{line}\n" for line in second).encode())
        tailer.poll()
        assert rec.lines == [line.encode() for line in first + second]
        assert rec.count("truncation") == 1


def test_appending_is_never_taken_for_a_rewrite(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec):
        tailer.poll()  # past the start-up bootstrap
        for i in range(100):  # the fingerprint is complete after 64 bytes; keep going past it
            append(log, f"line {i}")
            tailer.poll()
        assert rec.lines == [f"line {i}".encode() for i in range(100)]
        assert rec.count("truncation") == 0


def test_a_rewrite_keeping_the_first_and_last_bytes_is_read_again_too(tmp_path: Path) -> None:
    """Truncated and rewritten to the same size with the first line and the 64 bytes before
    the read offset unchanged: 600 of 2,400 lines were read, the old accept length shown."""
    log = tmp_path / "server.log"
    log.touch()
    banner, closing = "=" * 80, "-" * 80
    with stepped(log) as (tailer, rec):
        tailer.poll()
        first = [banner, *(f"run 1 line {i:04d}" for i in range(1198)), closing]
        append(log, *first)
        tailer.poll()
        second = [banner, *(f"run 2 line {i:04d}" for i in range(1198)), closing]
        with open(log, "r+b") as handle:  # same length, same ends, no pass in between
            handle.truncate(0)
            handle.write("".join(f"{line}\n" for line in second).encode())
        tailer.poll()
        assert rec.lines == [line.encode() for line in first + second]
        assert rec.count("truncation") == 1


def test_a_file_touched_without_change_is_not_read_again(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec):
        tailer.poll()
        append(log, "one", "two")
        tailer.poll()
        os.utime(log, (1_700_000_000, 1_700_000_000))
        tailer.poll()
        tailer.poll()
        assert rec.lines == [b"one", b"two"]
        assert rec.count("truncation") == 0
