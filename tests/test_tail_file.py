"""The file tailer while it runs: start policy, bootstrap, partial and long lines, wake-ups."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from pathlib import Path

import pytest

from exporter import clock
from exporter.sources.tail import FileTailer, TailLoop
from exporter.sources.tail.file import BACKLOG_TAIL_BYTES
from exporter.sources.tail.loop import COALESCE
from tests.support.files import append
from tests.support.loglines import joined, numbered
from tests.support.tailing import Recorder, following, stepped, turned
from tests.support.waiting import wait_for


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
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        new = numbered("after start", 3)
        append(log, raw=joined(new))
        wait_for(lambda: rec.lines == new, what="the appended lines")
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
        wait_for(lambda: rec.bootstraps, what="bootstrap")
    lines, mtime = rec.bootstraps[0]
    assert lines == expected_bootstrap(data, 100, 150)
    assert lines[0] == b"line 000 " and lines[-1].startswith(b"line 199")
    assert mtime == pytest.approx(1_700_000_000.5, abs=1)  # on the daemon's clock
    assert rec.lines == []


def test_bootstrap_of_a_file_smaller_than_both_windows_lists_each_line_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(joined(numbered("small", 4)))
    with following(log) as (_, rec):
        wait_for(lambda: rec.bootstraps, what="bootstrap")
    assert rec.bootstraps[0][0] == numbered("small", 4)


def test_line_unfinished_at_start_is_completed_through_on_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"one\ntwo\npart")
    with following(log) as (_, rec):
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        append(log, raw=b"ial\nthree\n")
        wait_for(lambda: len(rec.lines) == 2, what="two lines")
    assert rec.bootstraps[0][0] == [b"one", b"two"]
    assert rec.lines == [b"partial", b"three"]


def test_last_line_longer_than_the_tail_window_is_skipped_not_split(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"head\n" + b"y" * 500)
    with following(log, bootstrap_head_bytes=8, bootstrap_tail_bytes=50) as (_, rec):
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        append(log, raw=b"yyy\nnext\n")
        wait_for(lambda: rec.lines, what="the next line")
    assert rec.bootstraps[0][0] == [b"head"]
    assert rec.lines == [b"next"]


def test_from_beginning_reads_everything_through_on_lines_without_bootstrap(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    old = numbered("old", 50)
    log.write_bytes(joined(old))
    with following(log, from_beginning=True) as (_, rec):
        wait_for(lambda: len(rec.lines) == 50, what="the existing lines")
        append(log, raw=b"new\n")
        wait_for(lambda: len(rec.lines) == 51, what="the new line")
    assert rec.lines == [*old, b"new"]
    assert rec.count("bootstrap") == 0


def test_a_backlog_read_from_its_start_is_first_told_by_its_last_whole_lines(
    tmp_path: Path,
) -> None:
    """Read ``from_beginning``, what a file holds is told first by its last whole lines (at
    most ``BACKLOG_TAIL_BYTES``, a line cut by that window left out) with its mtime, so the
    consumer can date the lines before them; a line still being written is not among them,
    and lines written afterwards are not a backlog."""
    log = tmp_path / "server.log"
    old = [line * 200 for line in numbered("old", 1000)]  # about 1 MiB
    log.write_bytes(joined(old) + b"unfinished")
    mtime = time.time() - 3600
    os.utime(log, (mtime, mtime))
    with stepped(log, from_beginning=True) as (tailer, rec):
        tailer.poll()
        assert rec.snapshot()[0][0] == "backlog"
        [(lines, written_by)] = rec.backlogs
        window = (joined(old) + b"unfinished")[-BACKLOG_TAIL_BYTES:]
        assert lines == window.split(b"\n")[1:-1]  # neither the cut line nor the unfinished
        assert lines == old[-len(lines) :] and 40 < len(lines) < 60
        assert written_by == pytest.approx(clock.since(mtime), abs=1)
        while len(rec.lines) < len(old):  # a pass reads 4 MiB at most
            tailer.poll()
        append(log, raw=b"\nnew\n")
        tailer.poll()
    assert rec.lines == [*old, b"unfinished", b"new"]
    assert len(rec.backlogs) == 1


def test_a_log_followed_from_its_end_has_no_backlog(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(joined(numbered("old", 5)))
    with stepped(log) as (tailer, rec):
        tailer.poll()
        append(log, "new")
        tailer.poll()
    assert rec.count("bootstrap") == 1
    assert rec.backlogs == []


def test_file_absent_at_start_is_read_from_its_first_byte(tmp_path: Path) -> None:
    log = tmp_path / "later" / "server.log"
    with stepped(log) as (tailer, rec):
        tailer.poll()
        assert rec.snapshot() == []
        log.parent.mkdir()
        lines = numbered("first", 3)
        log.write_bytes(joined(lines))
        tailer.poll()
        assert rec.lines == lines
        append(log, "more")
        tailer.poll()
        assert rec.lines == [*lines, b"more"]
    assert rec.count("bootstrap") == 0
    assert rec.count("read_error") == 0


@pytest.mark.parametrize("present", [True, False], ids=["present", "absent"])
@pytest.mark.parametrize("from_beginning", [False, True], ids=["from-end", "from-beginning"])
def test_ready_after_the_first_pass_and_every_later_line_is_read_as_new(
    tmp_path: Path, present: bool, from_beginning: bool
) -> None:
    log = tmp_path / "server.log"
    if present:
        log.write_bytes(b"old\n")
    with stepped(log, from_beginning=from_beginning) as (tailer, rec):
        assert not tailer.ready.is_set()
        tailer.poll()
        assert tailer.ready.is_set()
        append(log, "new")
        tailer.poll()
    old = [b"old"] if present else []
    assert rec.lines == ([*old, b"new"] if from_beginning else [b"new"])
    assert [lines for lines, _ in rec.bootstraps] == (
        [] if from_beginning or not present else [old]
    )


def test_a_running_tailer_is_ready_within_its_first_pass(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(joined(numbered("old", 1000)))
    with following(log) as (tailer, rec):
        wait_for(tailer.ready.is_set, what="readiness")
        append(log, "appended at once")
        wait_for(lambda: rec.lines, what="the appended line")
    assert rec.lines == [b"appended at once"]
    assert rec.bootstraps[0][0] == numbered("old", 1000)


def test_partial_write_is_held_until_its_newline_arrives(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log) as (tailer, rec):
        tailer.poll()
        append(log, raw=b"Decode batch, #running-req: ")
        tailer.poll()
        assert rec.lines == []
        append(log, raw=b"4\r")
        tailer.poll()
        assert rec.lines == []
        append(log, raw=b"\nnext\n")
        tailer.poll()
    assert rec.lines == [b"Decode batch, #running-req: 4\r", b"next"]


def test_lines_over_the_cap_are_skipped_and_counted_once_each(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with stepped(log, max_line_bytes=1000) as (tailer, rec):
        tailer.poll()
        append(log, raw=b"before\n" + b"p" * 600)
        tailer.poll()
        append(log, raw=b"p" * 600)
        tailer.poll()
        assert rec.lines == [b"before"]
        append(log, raw=b"p" * 5000 + b"\n" + b"q" * 1001 + b"\nafter\n" + b"r" * 1000 + b"\n")
        tailer.poll()
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
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        append(log, raw=joined(raw))
        wait_for(lambda: len(rec.lines) == len(raw), what="all lines")
    assert rec.lines == raw


def test_directory_notification_wakes_a_slow_poller(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    loop = TailLoop()
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, poll_interval=30.0, loop=loop)
    try:
        tailer.start()
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        assert loop.active
        append(log, raw=b"wake up\n")
        wait_for(lambda: rec.lines == [b"wake up"], what="a woken pass", timeout=1.5)
    finally:
        tailer.stop()
        loop.stop()


def test_polling_alone_follows_when_notifications_are_unavailable(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    polling = TailLoop(notify=False)
    polling.start()
    with following(log, loop=polling) as (_, rec):
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        append(log, raw=b"polled\n")
        wait_for(lambda: rec.lines == [b"polled"], what="a polled line")
    assert not polling.active
    polling.stop()


def test_stop_is_idempotent_and_releases_files_and_threads(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x\n")
    fds_before = set(os.listdir("/proc/self/fd"))
    threads_before = threading.active_count()
    with following(log) as (tailer, rec):
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        assert set(os.listdir("/proc/self/fd")) - fds_before
    tailer.stop()
    wait_for(lambda: threading.active_count() <= threads_before, 2.0, what="threads ended")
    assert threading.active_count() == threads_before
    assert set(os.listdir("/proc/self/fd")) <= fds_before


def test_a_log_written_a_line_at_a_time_is_read_a_batch_at_a_time(tmp_path: Path) -> None:
    """Each write woke a pass of its own: a live server's lines cost a pass each (1.3 ms of
    CPU per line, against 9 µs read in bulk). Written lines are now read together at the
    loop's tick (``COALESCE``). How long a line waits for its tick is a figure of
    ``bench/tail_latency.py``: a deadline here failed on a loaded machine, not on the code."""
    log = tmp_path / "server.log"
    log.touch()
    loop = TailLoop()
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, poll_interval=30.0, loop=loop)
    written = [f"line {n}".encode() for n in range(40)]
    with open(log, "ab", buffering=0) as server:  # held open, as a server holds its log
        try:
            tailer.start()
            wait_for(lambda: rec.bootstraps, what="bootstrap")
            assert loop.active
            start = time.monotonic()
            for line in written:
                server.write(line + b"\n")
                time.sleep(0.01)
            wait_for(lambda: rec.lines == written, what="every line")
            spent = time.monotonic() - start
        finally:
            tailer.stop()
            loop.stop()
    batches = rec.count("lines")
    assert batches <= spent / COALESCE + 2, (batches, spent)  # one pass a tick at most


def test_a_sync_waits_for_the_pass_under_way() -> None:
    """The loop takes a write's notification at its tick and begins that file's pass: a
    scrape's sync then found nothing woken and rendered before the pass had read the line
    (a scrape right after a write showed the count before it, under load)."""
    loop = TailLoop()
    loop.start()
    began, release, synced = threading.Event(), threading.Event(), threading.Event()

    class SlowPass:
        def step(self) -> float:
            began.set()
            release.wait(10)
            return math.inf

    try:
        loop.add(SlowPass())
        assert began.wait(10)

        def scrape() -> None:
            if loop.sync(10):
                synced.set()

        waiting = threading.Thread(target=scrape)
        waiting.start()
        assert not synced.wait(0.5)  # the pass under way has not ended
        release.set()
        assert synced.wait(10)
        waiting.join(10)
    finally:
        release.set()
        loop.stop()


def test_every_tailer_of_a_loop_is_followed_by_its_one_thread(tmp_path: Path) -> None:
    """A thread per log made 100 logs 105 threads, taking turns at the interpreter lock."""
    logs = [tmp_path / f"server-{n}.log" for n in range(20)]
    for log in logs:
        log.touch()
    threads_before = threading.active_count()
    loop = TailLoop()
    loop.start()
    recorders = [Recorder() for _ in logs]
    tailers = [
        FileTailer(str(log), rec, loop=loop) for log, rec in zip(logs, recorders, strict=True)
    ]
    try:
        for tailer in tailers:
            tailer.start()
        wait_for(lambda: all(r.bootstraps for r in recorders), what="every bootstrap")
        for log in logs:
            append(log, raw=log.name.encode() + b"\n")
        expected = [[log.name.encode()] for log in logs]
        wait_for(lambda: [r.lines for r in recorders] == expected, what="each log's line")
        assert threading.active_count() == threads_before + 1
    finally:
        for tailer in tailers:
            tailer.stop()
        loop.stop()


class CountingTailer(FileTailer):
    """Counts its passes made by the loop."""

    steps = 0

    def step(self) -> float:
        self.steps += 1
        return super().step()


def test_a_write_wakes_the_tailer_of_its_file_not_every_tailer_in_its_directory(
    tmp_path: Path,
) -> None:
    """100 logs in one directory each made a pass for every line any of them was written."""
    busy, quiet = tmp_path / "busy.log", tmp_path / "quiet.log"
    busy.touch()
    quiet.touch()
    loop = TailLoop(coalesce=0.1)
    loop.start()
    busy_rec = Recorder()
    tailers = [
        CountingTailer(str(busy), busy_rec, poll_interval=30.0, loop=loop),
        CountingTailer(str(quiet), Recorder(), poll_interval=30.0, loop=loop),
    ]
    with open(busy, "ab", buffering=0) as server:  # held open, as a server holds its log
        try:
            for tailer in tailers:
                tailer.start()
            wait_for(lambda: all(t.ready.is_set() for t in tailers), what="first passes")
            written = [f"line {n}".encode() for n in range(10)]
            for line in written:
                server.write(line + b"\n")
                time.sleep(0.15)
            wait_for(lambda: busy_rec.lines == written, what="every line")
        finally:
            for tailer in tailers:
                tailer.stop()
            loop.stop()
    assert tailers[0].steps > 3
    assert tailers[1].steps == 1  # its first; its poll is 30 s away


def test_a_write_is_read_at_the_next_tick_or_at_once_when_a_scrape_syncs(tmp_path: Path) -> None:
    """A pass costs as much for one line as for many, so a written file waits for the loop's
    next tick; a scrape must still show every line written before it: ``sync()`` reads them
    now and returns once they were handed on."""
    log = tmp_path / "server.log"
    log.touch()
    loop = TailLoop(coalesce=30.0)
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, poll_interval=30.0, loop=loop)
    with open(log, "ab", buffering=0) as server:  # held open, as a server holds its log
        try:
            tailer.start()
            # The first pass over, not just begun: a write made while it still read was
            # read by it (under load), not held for the tick.
            wait_for(tailer.ready.is_set, what="the first pass")
            assert loop.active
            server.write(b"one\n")
            turned(loop)  # the write's notification taken
            assert rec.lines == []  # held for the tick, 30 s away
            assert loop.sync(timeout=5.0)
            assert rec.lines == [b"one"]
            server.write(b"two\n")
            assert loop.sync(timeout=5.0)
            assert rec.lines == [b"one", b"two"]
            assert loop.sync(timeout=5.0)  # nothing written since: returns at once
        finally:
            tailer.stop()
            loop.stop()


def test_every_sync_reads_the_lines_written_before_it(tmp_path: Path) -> None:
    """A file whose own check fell due before the tick was left for that check: a scrape
    right after a write missed the line, for up to a second."""
    log = tmp_path / "server.log"
    log.touch()
    loop = TailLoop(coalesce=30.0)
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, loop=loop)  # checked every second while quiet
    written: list[bytes] = []
    try:
        tailer.start()
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        for n in range(30):
            time.sleep(0.05)
            written.append(f"line {n}".encode())
            append(log, raw=written[-1] + b"\n")
            assert loop.sync(timeout=5.0)
            assert rec.lines == written
    finally:
        tailer.stop()
        loop.stop()


def test_files_written_within_one_tick_are_read_together(tmp_path: Path) -> None:
    """100 logs of a few lines a second each had a pass (and a wake-up) of their own every
    100 ms; a tick now reads every file written since the last one, one after another."""
    logs = [tmp_path / f"server-{n}.log" for n in range(10)]
    for log in logs:
        log.touch()
    loop = TailLoop(coalesce=0.5)
    loop.start()
    recorders = [Recorder() for _ in logs]
    tailers = [
        CountingTailer(str(log), rec, poll_interval=30.0, loop=loop)
        for log, rec in zip(logs, recorders, strict=True)
    ]
    with contextlib.ExitStack() as held:  # held open, as servers hold their logs
        servers = {log: held.enter_context(open(log, "ab", buffering=0)) for log in logs}
        try:
            for tailer in tailers:
                tailer.start()
            wait_for(lambda: all(t.ready.is_set() for t in tailers), what="first passes")
            start = time.monotonic()
            for round_ in range(6):
                for log in logs:
                    servers[log].write(f"{log.name} {round_}\n".encode())
                    time.sleep(0.02)
            expected = [[f"{log.name} {n}".encode() for n in range(6)] for log in logs]
            wait_for(lambda: [r.lines for r in recorders] == expected, what="every line")
            spent = time.monotonic() - start
        finally:
            for tailer in tailers:
                tailer.stop()
            loop.stop()
    ticks = spent / 0.5 + 1
    assert all(t.steps - 1 <= ticks for t in tailers), ([t.steps for t in tailers], spent)


def _wakeups(thread: threading.Thread) -> int:
    """How often ``thread`` has gone to sleep and been woken (voluntary context switches)."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_a_log_written_steadily_wakes_the_loop_once_a_tick(tmp_path: Path) -> None:
    """The loop woke for the first write after each tick, then again at the tick: two
    wake-ups of a busy node's cold interpreter per pass, where one does."""
    log = tmp_path / "server.log"
    log.touch()
    loop = TailLoop(coalesce=0.25)
    loop.start()
    rec = Recorder()
    tailer = FileTailer(str(log), rec, poll_interval=30.0, loop=loop)
    written = [f"line {n}".encode() for n in range(80)]
    with open(log, "ab", buffering=0) as server:  # held open, as a server holds its log
        try:
            tailer.start()
            wait_for(lambda: rec.bootstraps, what="bootstrap")
            assert loop._thread is not None
            before, start = _wakeups(loop._thread), time.monotonic()
            for line in written:
                server.write(line + b"\n")
                time.sleep(0.05)
            wait_for(lambda: rec.lines == written, what="every line")
            wakeups, ticks = _wakeups(loop._thread) - before, (time.monotonic() - start) / 0.25
        finally:
            tailer.stop()
            loop.stop()
    assert wakeups <= 1.5 * ticks + 3, (wakeups, ticks)
