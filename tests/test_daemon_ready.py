"""Ready means following: /healthz says 200 only once nothing appended can be taken as old.

Until a log source's first pass, a line appended to a file present at start would be read as
part of its history (bootstrap) and never counted. Probes, ``run_daemon`` and users wait for
/healthz, so it must not answer 200 before every source follows.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import pytest

from exporter.config import Config, TargetConfig
from exporter.daemon import THREAD_DIED_STATUS, Daemon
from exporter.sources.tail import file as tail_file
from exporter.sources.tail.file import STUCK_AFTER
from tests.support.daemon import healthz, run_daemon
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.tailing import stepped
from tests.support.waiting import wait_for

DECODES = "specwatch_log_stats_lines_total"


def test_not_ready_names_how_many_sources_do_not_follow_yet_then_200(tmp_path: Path) -> None:
    present, absent = tmp_path / "rank0.log", tmp_path / "later" / "rank1.log"
    append(present, decode_line(1.0))
    target = TargetConfig(name="node", log_files=[str(present), str(absent)])
    daemon = Daemon(Config(listen="127.0.0.1:0", targets=[target]))
    assert daemon.not_ready() == "starting: 2 of 2 log sources not followed yet"
    daemon.start()
    try:
        wait_for(lambda: daemon.not_ready() is None, what="every source following")
        assert healthz(daemon.web.port) == (200, "ok\n")
    finally:
        daemon.stop()


@pytest.mark.e2e
def test_lines_appended_right_after_the_first_200_are_all_counted(
    tmp_path: Path, port: int
) -> None:
    """Several files with a history each: several first passes racing the HTTP server."""
    logs = [tmp_path / f"dp{rank}.log" for rank in range(8)]
    for rank, log in enumerate(logs):
        append(log, *(decode_line(1.0, ranks=f" DP{rank} TP{rank}") for _ in range(2000)))
    flags = [arg for log in logs for arg in ("--log-file", str(log))]
    with run_daemon(flags, port) as d:
        for rank, log in enumerate(logs):
            append(log, *(decode_line(3.0, ranks=f" DP{rank} TP{rank}") for _ in range(3)))
        s = d.wait_metric(DECODES, lambda v: v == 3 * len(logs), kind="decode")
    assert s.values("specwatch_accept_length") == [3.0] * len(logs)


def test_a_stuck_log_reader_turns_healthz_503_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that fails on every pass is broken in this process: a restart is the cure."""
    monkeypatch.setattr(tail_file, "PASS_BUDGET_BYTES", 1)  # a line is a backlog to offer
    log = tmp_path / "server.log"
    append(log, decode_line(1.0))
    daemon = Daemon(Config(listen="127.0.0.1:0", targets=[TargetConfig(log_files=[str(log)])]))
    state = daemon.targets[0].state

    def failing(*args: object) -> int | None:
        raise OSError(30, "Read-only file system")

    for source in daemon._sources:
        source.ready.set()  # as after a first pass
    assert daemon.not_ready() is None
    status = functools.partial(state.set_log_source, str(log))
    with stepped(log, backlog=failing, on_status=status, from_beginning=True) as (tailer, _):
        for _ in range(STUCK_AFTER):
            tailer.poll()
    assert state.log_sources() == {str(log): "stuck"}
    assert daemon.not_ready() == f"stuck: reading {log} keeps failing"


def test_a_thread_that_died_turns_healthz_503_naming_it_and_asks_to_stop(tmp_path: Path) -> None:
    """The process must not look alive with a part of it dead: /healthz names the thread
    until the stop, which exits with status 70."""
    log = tmp_path / "server.log"
    log.touch()
    daemon = Daemon(Config(listen="127.0.0.1:0", targets=[TargetConfig(log_files=[str(log)])]))
    daemon.start()
    hook = threading.excepthook
    threading.excepthook = daemon.thread_died
    try:
        wait_for(lambda: daemon.not_ready() is None, what="every source following")

        def fails() -> None:
            raise KeyError("a bug")

        dying = threading.Thread(target=fails, name="tail-x")
        dying.start()
        dying.join()
        assert daemon.stopping.is_set() and daemon.exit_status == THREAD_DIED_STATUS
        assert healthz(daemon.web.port) == (503, "broken: thread tail-x died: KeyError\n")
    finally:
        threading.excepthook = hook
        daemon.stop()
