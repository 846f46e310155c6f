"""Filesystem errors are counted and retried; nothing stops the tailer thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from exporter.sources.tail import FileTailer
from exporter.sources.tail import file as tail_file
from exporter.sources.tail.file import STUCK_AFTER
from tests.support.files import append
from tests.support.tailing import FailingOnce, following, stepped
from tests.support.tools import REPO, unprivileged
from tests.support.waiting import wait_for

# Runs a tailer in a child process (so its file permissions can be those of an unprivileged
# user) and prints every event as one JSON line.
CHILD = """
import json, sys
from exporter.sources.tail import FileTailer
from exporter.sources.tail.file import STUCK_AFTER

class Printer:
    def __getattr__(self, name):
        def record(*args):
            if name == "on_framed":  # lines as read, each between two newlines
                return self.on_lines(args[0].split(b"\\n")[1:-1])
            if name == "on_written_by":  # when the lines were written: not errors
                return None
            payload = [a if isinstance(a, str) else None for a in args]
            lines = [b.decode() for a in args if isinstance(a, list) for b in a]
            print(json.dumps({"event": name, "args": payload, "lines": lines}), flush=True)
        return record

tailer = FileTailer(sys.argv[1], Printer(), poll_interval=0.02)
tailer.start()
sys.stdin.read()
tailer.stop()
"""


def test_unresolvable_path_is_counted_and_retried_until_it_resolves(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.symlink_to(log)  # a symlink loop: stat fails with ELOOP
    with following(log) as (_, rec):
        wait_for(lambda: rec.reasons("read_error")["stat"] >= 2, what="repeated stat errors")
        log.unlink()
        log.write_bytes(b"resolved\n")
        wait_for(lambda: rec.lines == [b"resolved"], what="the file once it resolves")
    assert set(rec.reasons("read_error")) == {"stat"}


@pytest.mark.e2e
def test_permission_denied_is_counted_and_retried_until_readable() -> None:
    prefix = unprivileged()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "server.log"
        log.write_bytes(b"server args\n")
        log.chmod(0)
        child = subprocess.Popen(
            [*prefix, sys.executable, "-c", CHILD, str(log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        killer = threading.Timer(10.0, child.kill)
        killer.start()
        try:
            assert child.stdout is not None and child.stdin is not None
            events = [json.loads(child.stdout.readline())]
            assert events[0] == {"event": "on_read_error", "args": ["permission"], "lines": []}
            log.chmod(0o644)
            while events[-1]["event"] != "on_bootstrap":
                events.append(json.loads(child.stdout.readline()))
            append(log, raw=b"appended\n")
            events.append(json.loads(child.stdout.readline()))
            child.stdin.close()
            assert child.wait() == 0
        finally:
            killer.cancel()
            child.kill()
    assert {e["event"] for e in events[:-2]} == {"on_read_error"}
    assert events[-2]["lines"] == ["server args"]
    assert events[-1] == {"event": "on_lines", "args": [None], "lines": ["appended"]}


def test_a_raising_consumer_is_counted_and_the_tailer_keeps_going(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    rec = FailingOnce()
    tailer = FileTailer(str(log), rec, poll_interval=0.02)
    tailer.start()
    try:
        wait_for(lambda: rec.bootstraps, what="bootstrap")
        append(log, raw=b"lost to the bug\n")
        wait_for(lambda: rec.reasons("read_error")["internal"] == 1, what="the counted failure")
        append(log, raw=b"after the bug\n")
        wait_for(lambda: rec.lines == [b"after the bug"], what="the next line")
    finally:
        tailer.stop()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_path_that_is_not_a_regular_file_is_not_opened(tmp_path: Path, kind: str) -> None:
    log = tmp_path / "server.log"
    if kind == "fifo":
        os.mkfifo(log)
    else:
        log.mkdir()
    with stepped(log) as (tailer, rec):
        tailer.poll()
        assert tailer.ready.is_set()
        assert rec.snapshot() == []
        if kind == "fifo":
            log.unlink()
        else:
            log.rmdir()
        log.write_bytes(b"regular now\n")
        tailer.poll()
        assert rec.lines == [b"regular now"]
    assert rec.count("read_error") == 0


def test_a_pass_that_keeps_failing_turns_the_path_stuck_logs_once_then_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that fails the same way on every pass (it could not make its spool files)
    read 100 of 214,105 lines while the path was reported followed."""
    monkeypatch.setattr(tail_file, "PASS_BUDGET_BYTES", 1)  # a line is a backlog to offer
    log = tmp_path / "server.log"
    append(log, "line")
    statuses: list[str] = []
    broken = [True]

    def backlog(*args: object) -> int | None:
        if broken[0]:
            raise OSError(30, "Read-only file system")
        return None

    with stepped(log, backlog=backlog, on_status=statuses.append, from_beginning=True) as (
        tailer,
        rec,
    ):
        for _ in range(STUCK_AFTER + 2):
            tailer.poll()
        assert statuses == ["stuck"] * 3  # the first passes fail before any verdict
        tracebacks = [r for r in caplog.records if r.exc_info and r.levelname == "ERROR"]
        assert len(tracebacks) == 1
        assert rec.reasons("read_error")["internal"] == STUCK_AFTER + 2
        broken[0] = False
        tailer.poll()
        assert statuses[-1] == "ok"
        assert rec.lines == [b"line"]
