"""A log path that cannot be followed is named, with the reason, never passed over in silence."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.sources.tail import FileTailer
from exporter.sources.tail.health import REPEAT_SECONDS, SourceHealth, SourceReason
from tests.support.tailing import Recorder
from tests.support.tools import REPO, unprivileged


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tail_once(pattern: Path | str, *, missing_grace: float = 60.0) -> list[SourceReason]:
    """The status one synchronous pass reports for ``pattern``."""
    reported: list[SourceReason] = []
    tailer = FileTailer(
        str(pattern), Recorder(), on_status=reported.append, missing_grace=missing_grace
    )
    tailer.poll()
    tailer.stop()
    return reported


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.mkdir(), "directory"),
        (lambda p: os.mkfifo(p), "not_regular"),
        (lambda p: p.symlink_to("/dev/zero"), "not_regular"),
        (lambda p: p.write_text("line\n"), "ok"),
        (
            lambda p: (p.symlink_to(p.with_name("b")), p.with_name("b").symlink_to(p)),
            "symlink_loop",
        ),
    ],
    ids=["directory", "fifo", "symlink-to-dev-zero", "regular", "symlink-loop"],
)
def test_what_is_at_the_path_is_reported_after_one_pass(
    tmp_path: Path, make: Callable[[Path], object], reason: str
) -> None:
    log = tmp_path / "server.log"
    make(log)
    assert tail_once(log) == [reason]


def test_a_glob_matching_only_directories_says_so(tmp_path: Path) -> None:
    (tmp_path / "a.log").mkdir()
    assert tail_once(tmp_path / "*.log") == ["directory"]


def test_a_glob_with_one_readable_match_is_followed(tmp_path: Path) -> None:
    (tmp_path / "a.log").mkdir()
    (tmp_path / "b.log").write_text("line\n")
    assert tail_once(tmp_path / "*.log") == ["ok"]


def test_a_missing_path_waits_for_the_grace_then_is_missing(tmp_path: Path) -> None:
    assert tail_once(tmp_path / "later.log", missing_grace=3600) == ["waiting"]
    assert tail_once(tmp_path / "later.log", missing_grace=0) == ["missing"]


def test_a_file_appearing_after_the_grace_is_followed(tmp_path: Path) -> None:
    log = tmp_path / "late.log"
    reported: list[SourceReason] = []
    rec = Recorder()
    tailer = FileTailer(str(log), rec, on_status=reported.append, missing_grace=0)
    tailer.poll()
    log.write_text("finally\n")
    tailer.poll()
    tailer.stop()
    assert reported == ["missing", "ok"]
    assert rec.lines == [b"finally"]


def test_missing_is_logged_once_per_change_and_repeated_only_after_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    reported: list[SourceReason] = []
    health = SourceHealth("/logs/x.log", reported.append, missing_grace=60, clock=clock)
    caplog.set_level(logging.INFO, logger="exporter.sources.tail.health")
    for step in range(0, 120, 1):  # a pass a second for two minutes
        clock.now = 1000.0 + step
        health.observe("missing", following=False)
    assert reported[:60] == ["waiting"] * 60
    assert set(reported[60:]) == {"missing"}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "/logs/x.log" in warnings[0].getMessage()
    assert "no such file for 60 s" in warnings[0].getMessage()
    # Still watched: not "nothing is read from it", which sent people to restart the sidecar.
    assert warnings[0].getMessage().endswith("still watched, and read as soon as it appears")
    clock.now += REPEAT_SECONDS
    health.observe("missing", following=False)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
    health.observe(None, following=True)
    assert reported[-1] == "ok"
    assert "readable again" in caplog.records[-1].getMessage()


def test_a_rotation_in_progress_is_no_problem(tmp_path: Path) -> None:
    """The path briefly missing while the old file is still open: followed, within the grace."""
    clock = Clock()
    health = SourceHealth("x.log", missing_grace=60, clock=clock)
    health.observe(None, following=True)
    clock.now += 5
    health.observe("missing", following=True)
    within_grace = health.reason
    clock.now += 61
    health.observe("missing", following=True)
    assert (within_grace, health.reason) == ("ok", "missing")


# One pass of a tailer in a child process, whose file permissions can be an unprivileged
# user's; prints the status it reported.
STATUS_CHILD = """
import sys
from exporter.sources.tail import FileTailer

class Quiet:
    def __getattr__(self, name):
        return lambda *args: None

reported = []
tailer = FileTailer(sys.argv[1], Quiet(), on_status=reported.append)
tailer.poll()
tailer.stop()
print(" ".join(reported))
"""


@pytest.mark.parametrize("where", ["file", "folder"])
@pytest.mark.e2e
def test_a_path_specwatch_may_not_read_is_unreadable(where: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "logs" / "server.log"
        log.parent.mkdir()
        log.write_text("line\n")
        (log if where == "file" else log.parent).chmod(0)
        try:
            result = subprocess.run(
                [*unprivileged(), sys.executable, "-c", STATUS_CHILD, str(log)],
                capture_output=True,
                text=True,
                timeout=30,
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
        finally:
            log.parent.chmod(0o755)
            log.chmod(0o644)
    assert result.stdout.split() == ["unreadable"], result.stderr
    assert f"log {log}: permission denied" in result.stderr


def test_a_followed_file_deleted_while_its_server_writes_is_read_and_said_to_be(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server writing on to its deleted log: every line was read, yet the path was reported
    missing ("NOT FOLLOWED: no such file", log_source_up 0)."""
    log = tmp_path / "server.log"
    reported: list[SourceReason] = []
    with log.open("a") as server:
        server.write("before\n")
        server.flush()
        recorder = Recorder()
        tailer = FileTailer(str(log), recorder, on_status=reported.append, missing_grace=0.0)
        try:
            tailer.poll()
            log.unlink()
            server.write("after the delete\n")
            server.flush()
            tailer.poll()
            tailer.poll()
        finally:
            tailer.stop()
    assert recorder.lines == [b"after the delete"]
    assert reported == ["ok", "ok", "ok"]
    assert "deleted while open; reading on from the open file" in caplog.text
