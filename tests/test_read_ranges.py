"""A big log read on several cores delivers exactly what one reader delivers.

The reader cuts a plain SGLang log at line boundaries and replays helper processes' sink
calls in order; a helper that fails or hangs has its range read in-process instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from exporter.engines.record import LogLine, StatsRecord
from exporter.parse import ranges
from exporter.parse.pipeline import RecordSink
from exporter.parse.reader import read_logs, read_range
from exporter.sources.tail import FileTailer
from exporter.sources.tail import file as tail_file
from exporter.sources.tail.lines import CHUNK_BYTES
from exporter.state import feed
from exporter.state.feed import LogFeed
from exporter.state.target_state import TargetSnapshot, TargetState
from tests.support.loglines import decode_line
from tests.support.tailing import FAST
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

LOGS = Path(__file__).parent / "data" / "logs"
MAX_LINE = 4096

pytestmark = pytest.mark.e2e


class RecordingSink(RecordSink):
    """Records, events and drift in order, comparable; line counts summed and skips counted:
    those come per batch, before the batch's records, and batches differ by ranges."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lines = 0
        self.skipped: Counter[str] = Counter()

    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self.calls.append(repr(record))

    def on_unrecognized(self, reason: str) -> None:
        self.calls.append(f"unrecognized {reason}")

    def on_skipped(self, reason: str) -> None:
        self.skipped[reason] += 1

    def on_event(self, line: LogLine) -> None:
        self.calls.append(repr(line))


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every core idle, whatever else runs on this machine meanwhile: helpers start where
    the CPUs allow them (a busy machine: ``test_a_busy_machine_starts_no_helper``)."""
    monkeypatch.setattr(ranges, "idle_cores", lambda sample=ranges.IDLE_SAMPLE: 64.0)
    monkeypatch.setattr(ranges.IdleWatch, "cores", lambda self: 64.0)


@pytest.fixture
def big_log(tmp_path: Path) -> Path:
    """The held SGLang logs over and over (restarts, drift, all kinds of lines), with lines
    too long for the cap, quoted stats text and no newline after the last line."""
    held = b"".join(log.read_bytes() for log in sorted(LOGS.glob("*.log")))
    extra = b"[2026-02-23 00:14:33] Receive: text='" + b"Decode batch, " * 400 + b"'\n"
    path = tmp_path / "server.log"
    path.write_bytes((held + extra) * 12 + b"[2026-02-23 00:14:40 TP0] Decode batch, accept len: 2")
    return path


def read(path: Path, split_above: int) -> RecordingSink:
    sink = RecordingSink()
    read_logs([str(path)], sink, max_line_bytes=MAX_LINE, split_above=split_above)
    return sink


def spy_on_replays(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each helper's replay delivered its whole range."""
    outcomes: list[bool] = []
    replay = ranges.Helper.replay

    def recorded(self: ranges.Helper, sink: Any, stopping: Any) -> int:
        done = replay(self, sink, stopping)
        outcomes.append(done == self.end)
        return done

    monkeypatch.setattr(ranges.Helper, "replay", recorded)
    return outcomes


def test_a_log_read_by_ranges_gives_every_call_of_one_reader_in_order(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "helpers_available", lambda: 2)
    outcomes = spy_on_replays(monkeypatch)
    by_ranges = read(big_log, split_above=0)
    assert outcomes == [True, True]  # two helpers did read their ranges
    alone = read(big_log, split_above=1 << 40)
    assert by_ranges.calls == alone.calls
    assert by_ranges.lines == alone.lines == big_log.read_bytes().count(b"\n") + 1 - 12
    assert by_ranges.skipped == alone.skipped == {"too_long": 12}
    assert alone.calls[-1].startswith("StatsRecord(kind='decode', time='2026-02-23T00:14:40'")


# Commands standing in for the helper's Python: the same arguments, other endings.
FAILING_HELPERS = {
    "cannot_run": "exec false\n",
    # -m exporter.parse.range_helper FD START END MAX PARENT ENGINE, with END moved to the middle
    "stops_halfway": (
        f'exec {sys.executable} "$1" "$2" "$3" "$4" $(( ($4 + $5) / 2 )) "$6" "$7" "$8"\n'
    ),
    "hangs": "exec sleep 60\n",
}


@pytest.mark.parametrize("failure", FAILING_HELPERS)
def test_a_failing_helper_leaves_its_undelivered_lines_to_the_reader(
    failure: str, big_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole frames it spooled are taken; reading goes on at the first line they did not
    deliver, and a helper past its deadline is stopped first."""
    helper = tmp_path / "helper"
    helper.write_text("#!/bin/sh\n" + FAILING_HELPERS[failure])
    helper.chmod(0o755)
    monkeypatch.setattr(ranges, "helpers_available", lambda: 1)
    if failure == "hangs":
        monkeypatch.setattr(ranges, "HELPER_MIN_SECONDS", 0.5)
    monkeypatch.setattr(sys, "executable", str(helper))
    outcomes = spy_on_replays(monkeypatch)
    by_ranges = read(big_log, split_above=0)
    assert outcomes == [False]
    monkeypatch.undo()
    alone = read(big_log, split_above=1 << 40)
    assert by_ranges.calls == alone.calls
    assert by_ranges.lines == alone.lines


def test_compressed_and_small_logs_are_read_by_one_reader(
    big_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    zipped = tmp_path / "server.log.1.gz"
    zipped.write_bytes(gzip.compress(big_log.read_bytes()))
    outcomes = spy_on_replays(monkeypatch)
    assert read(zipped, split_above=0).calls == read(big_log, split_above=1 << 40).calls
    read(big_log, split_above=big_log.stat().st_size)
    assert outcomes == []


def caught_up(log: Path, with_helpers: bool) -> tuple[TargetSnapshot, list[str]]:
    """The daemon's state after catching up on ``log`` from its first byte, stepped."""
    state = TargetState("node")
    feed = LogFeed(state)
    backlog = feed.read_backlog if with_helpers else None
    tailer = FileTailer(
        str(log), feed, from_beginning=True, max_line_bytes=MAX_LINE, backlog=backlog, **FAST
    )
    try:
        previous = -1
        while (lines := state.snapshot().log_lines) != previous:  # until a pass adds none
            previous = lines
            tailer.poll()
    finally:
        tailer.stop()
    observed = state.evidence.observations(state.tracker.config, now=0.0)
    return state.snapshot(), [repr(window) for window in observed.windows]


def test_the_daemon_catching_up_by_ranges_ends_in_the_state_of_one_reader(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "helpers_available", lambda: 1)
    monkeypatch.setattr(ranges, "SPLIT_ABOVE_BYTES", 0)
    monkeypatch.setattr(tail_file, "PASS_BUDGET_BYTES", CHUNK_BYTES)  # the log is one budget
    outcomes = spy_on_replays(monkeypatch)
    by_ranges, by_ranges_evidence = caught_up(big_log, with_helpers=True)
    assert outcomes == [True]
    alone, alone_evidence = caught_up(big_log, with_helpers=False)
    assert by_ranges_evidence == alone_evidence
    for field in ("log_lines", "stats_lines", "unrecognized", "skipped", "decode_windows"):
        assert getattr(by_ranges, field) == getattr(alone, field), field
    assert by_ranges.accept_length_buckets == alone.accept_length_buckets
    assert by_ranges.accept_length_sum == pytest.approx(alone.accept_length_sum)
    assert {rank: w.record for rank, w in by_ranges.windows.items()} == {
        rank: w.record for rank, w in alone.windows.items()
    }


def test_a_line_appended_after_a_catch_up_by_ranges_is_read_alone(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bytes before the offset the helpers left it at are what the next pass compares
    (not those the tailer itself read last): a new line is one more line, not a rewrite."""
    monkeypatch.setattr(ranges, "helpers_available", lambda: 1)
    monkeypatch.setattr(ranges, "SPLIT_ABOVE_BYTES", 0)
    monkeypatch.setattr(tail_file, "PASS_BUDGET_BYTES", CHUNK_BYTES)
    outcomes = spy_on_replays(monkeypatch)
    state = TargetState("node")
    feed = LogFeed(state)
    backlog = feed.read_backlog
    tailer = FileTailer(
        str(big_log), feed, from_beginning=True, max_line_bytes=MAX_LINE, backlog=backlog, **FAST
    )
    try:
        for _ in range(20):  # until a pass adds none (a rewrite taken would read on)
            before = state.snapshot().log_lines
            tailer.poll()
            if state.snapshot().log_lines == before:
                break
        assert outcomes == [True]
        with big_log.open("ab") as log:
            log.write(f"\n{decode_line(accept_len=2.5)}\n".encode())
        tailer.poll()
        tailer.poll()
    finally:
        tailer.stop()
    after = state.snapshot()
    assert after.truncations == 0
    assert after.log_lines == before + 2  # the unterminated last line, then the new one


def test_a_log_caught_up_by_ranges_is_as_old_as_its_last_write(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helpers' windows too: a log last written two hours ago shows nothing current."""
    monkeypatch.setattr(ranges, "helpers_available", lambda: 1)
    monkeypatch.setattr(ranges, "SPLIT_ABOVE_BYTES", 0)
    monkeypatch.setattr(tail_file, "PASS_BUDGET_BYTES", CHUNK_BYTES)
    outcomes = spy_on_replays(monkeypatch)
    written = time.time() - 7200
    os.utime(big_log, (written, written))
    snapshot, _ = caught_up(big_log, with_helpers=True)
    assert outcomes == [True]
    assert snapshot.windows
    for window in snapshot.windows.values():
        assert window.observed_at == pytest.approx(written, abs=0.01)
    assert snapshot.last_decode_at == pytest.approx(written, abs=0.01)
    assert snapshot.fresh_windows(time.time(), stale_after=60) == {}


def test_a_helpers_spool_replays_every_call_in_order(tmp_path: Path) -> None:
    """Records come in runs (one call or many); the shared read-only empty ``extra`` that a
    record made without one carries, which marshal cannot write, arrives as an empty dict."""
    bare = StatsRecord(kind="decode", time="2026-02-23T00:14:33", engine="sglang", dp_rank=1)
    extra = bare._replace(kind="prefill", extra={"new_seqs": 2})
    event = LogLine(
        "2026-02-23T00:14:30", None, 0, "Load weight end. type=LlamaForCausalLM", "sglang"
    )
    with (tmp_path / "spool").open("w+b") as spool:
        sink = ranges.SpoolSink(spool)
        sink.on_lines(3)
        sink.on_records([bare, extra])
        sink.on_event(event)
        sink.on_record(extra)
        sink.on_record(bare)
        sink.flush(resume=120)
        sink.on_skipped("too_long")
        sink.on_unrecognized("no_fields")
        sink.flush(resume=240)
        frames = ranges._SpoolReader(spool)
        replayed = RecordingSink()
        resumes = []
        while (frame := frames.next()) is not None:
            resumes.append(frame[0])
            ranges._deliver(frame[1], replayed)
    assert resumes == [120, 240]
    assert (replayed.lines, replayed.skipped) == (3, {"too_long": 1})
    plain = bare._replace(extra={})
    expected = [plain, extra, event, extra, plain]
    assert replayed.calls == [*map(repr, expected), "unrecognized no_fields"]


def test_without_a_usable_spool_directory_the_log_is_read_in_process(
    big_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With no writable /tmp the spool failed, and every pass retried it (the daemon under a
    read-only TMPDIR: ``test_daemon_logs.py``)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "absent"))
    monkeypatch.setattr(ranges, "helpers_available", lambda: 2)
    monkeypatch.setattr(ranges, "_warned_spool", False)
    assert ranges.spool_problem() is not None
    outcomes = spy_on_replays(monkeypatch)
    by_ranges = read(big_log, split_above=0)
    assert outcomes == []  # no helper started
    assert by_ranges.calls == read(big_log, split_above=1 << 40).calls
    warnings = [r for r in caplog.records if r.getMessage().startswith("cannot spool in")]
    assert len(warnings) == 1


def test_a_busy_machine_starts_no_helper(big_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper's interpreter, spool and replay cost CPU of their own: on a machine whose
    other cores are busy they would only take turns with the reader, at a cost to the node."""
    monkeypatch.setattr(ranges, "helpers_available", lambda: 2)
    outcomes = spy_on_replays(monkeypatch)
    alone = read(big_log, split_above=1 << 40)
    monkeypatch.setattr(ranges, "idle_cores", lambda sample=ranges.IDLE_SAMPLE: 1.3)
    assert read(big_log, split_above=0).calls == alone.calls
    assert outcomes == []  # only the reader's own core was idle
    monkeypatch.setattr(ranges, "idle_cores", lambda sample=ranges.IDLE_SAMPLE: 2.2)
    assert read(big_log, split_above=0).calls == alone.calls
    assert outcomes == [True]  # one other core idle: one helper, though two were allowed


def test_idle_cores_are_the_idle_share_of_the_cpu_time_in_proc_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle and iowait ticks over all ticks, times the cores, while the reader waits."""
    monkeypatch.undo()  # the real function, not the idle machine of every other test
    stat = tmp_path / "stat"
    fields = "cpu  {} 0 {} {} {} 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    stat.write_text(fields.format(1000, 500, 8000, 100))
    monkeypatch.setattr(ranges, "PROC_STAT", str(stat))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    # Over the sample: 40 ticks busy, 50 idle, 10 waiting on I/O, of 100.
    later = fields.format(1030, 510, 8050, 110)
    monkeypatch.setattr(time, "sleep", lambda seconds: stat.write_text(later))
    assert ranges.idle_cores() == pytest.approx(4 * 60 / 100)
    stat.write_text("cpu  nonsense\n")
    monkeypatch.setattr(ranges, "usable_cpus", lambda: 3)
    assert ranges.idle_cores() == 3  # unreadable: as if every usable core were idle


class _Clock:
    """``ranges``' view of time: a sleep moves it on, and writes the next ``/proc/stat``."""

    def __init__(self, stat: Path, after_sleep: list[str]) -> None:
        self.now, self.cpu = 100.0, 0.0
        self.slept: list[float] = []
        self._stat, self.after_sleep = stat, after_sleep

    def monotonic(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self._stat.write_text(self.after_sleep.pop(0))


def test_a_reader_asking_before_every_pass_waits_for_idle_cores_only_at_its_first_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon catching up asks before each 4 MiB pass: a wait of 0.1 s each time was a
    third of its wall time on a busy machine. Later looks measure from the one before, the
    reader's own CPU time since counted idle (its core is its own). The first look is taken
    when the watch is made."""
    monkeypatch.undo()  # the real watch, not the idle machine of every other test
    stat = tmp_path / "stat"
    line = "cpu  {} 0 0 {} 0 0 0 0 0 0\n"  # busy ticks, idle ticks
    stat.write_text(line.format(1000, 1000))
    clock = _Clock(stat, [line.format(1030, 1010)])
    monkeypatch.setattr(ranges, "time", clock)
    monkeypatch.setattr(ranges, "_own_cpu", clock.process_time)
    monkeypatch.setattr(ranges, "PROC_STAT", str(stat))
    monkeypatch.setattr(ranges, "CLK_TCK", 100)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    watch = ranges.IdleWatch(sample=0.1, fresh=5.0)  # looks now, at the daemon's start
    # Asked sooner than the sample after it: the rest is waited. 10 idle ticks of 40, 4 cores.
    clock.now += 0.04
    assert watch.cores() == pytest.approx(4 * 10 / 40)
    assert clock.slept == pytest.approx([0.06])
    # A pass later (0.3 s, of which the reader ran 0.25 s), no wait: 30 idle of 120 ticks.
    clock.now += 0.3
    clock.cpu += 0.25
    stat.write_text(line.format(1120, 1040))
    assert watch.cores() == pytest.approx(4 * (30 + 25) / 120)
    assert clock.slept == pytest.approx([0.06])
    # Sooner than the sample after the last look: the rest of it is waited.
    clock.now += 0.04
    clock.after_sleep.append(line.format(1140, 1060))
    assert watch.cores() == pytest.approx(4 * 20 / 40)
    assert clock.slept == pytest.approx([0.06, 0.06])
    # Long after: that look tells little of now, so the watch looks afresh and waits.
    clock.now += 60.0
    stat.write_text(line.format(5000, 5000))
    clock.after_sleep.append(line.format(5010, 5030))
    assert watch.cores() == pytest.approx(4 * 30 / 40)
    assert clock.slept == pytest.approx([0.06, 0.06, 0.1])
    clock.after_sleep.append("cpu  nonsense\n")
    monkeypatch.setattr(ranges, "usable_cpus", lambda: 3)
    assert watch.cores() == 3  # unreadable: as if every usable core were idle


def test_a_look_after_a_stretch_counts_the_reaped_helpers_cpu_as_the_readers_own() -> None:
    """Their cores were the reader's to use: counted busy, a catch-up of more than one
    stretch would start no helper for the next on a machine that is otherwise idle."""
    before = ranges._own_cpu()
    burn = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)  # reaped, as Helper.close does
    assert ranges._own_cpu() - before >= 0.25


def test_a_catch_up_takes_on_at_most_its_stretch_and_the_rest_is_read_after(
    big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stretch bounds the spool files, which the shipped deploy files give 256 MiB."""
    monkeypatch.setattr(ranges, "helpers_available", lambda: 2)
    size = big_log.stat().st_size
    first, rest = RecordingSink(), RecordingSink()
    with big_log.open("rb") as file:
        fd = file.fileno()

        def read_here(start: int, end: int) -> None:
            read_range(fd, start, end, first, MAX_LINE, lambda offset: None, engine="sglang")

        end = ranges.read_by_ranges(
            fd,
            0,
            size,
            first,
            MAX_LINE,
            read_here,
            split_above=0,
            max_stretch=size // 3,
            engine="sglang",
        )
        assert end is not None and 0 < end <= size // 3
        read_range(fd, end, size, rest, MAX_LINE, lambda offset: None, engine="sglang")
    alone = read(big_log, split_above=1 << 40)
    # The log's last line has no newline: only a read to the end of the input takes it.
    assert first.calls + rest.calls == alone.calls[:-1]
    assert first.lines + rest.lines == alone.lines - 1
    assert feed.MAX_STRETCH_BYTES <= 256 << 20  # the deploy files' /tmp


def test_helpers_die_with_a_reader_that_is_killed(tmp_path: Path) -> None:
    """Without a parent-death signal they read on, each holding a core, after the OOM
    killer or a SIGKILL took the command that started them."""
    log = tmp_path / "server.log"
    line = (decode_line(2.5) + "\n").encode()
    log.write_bytes(line * ((200 << 20) // len(line)))  # several seconds of reading
    # ``specwatch report`` on a machine with a core idle, however busy this one is.
    idle = "from exporter.parse import ranges; ranges.idle_cores = lambda sample=0: 64.0"
    run = (
        f"from exporter.cli import main; raise SystemExit(main({['report', '--json', str(log)]!r}))"
    )
    cmd = [sys.executable, "-c", f"{idle}\n{run}"]
    reader = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        helpers = wait_for(
            lambda: children(reader.pid), timeout=PROCESS_TIMEOUT, what="a helper started"
        )
        # Spooling, so past asking for the signal; stopped, so none can finish its range
        # meanwhile and leave on its own: only the parent-death signal ends a stopped helper.
        wait_for(
            lambda: all(map(spooled, helpers)), timeout=PROCESS_TIMEOUT, what="the helpers spooling"
        )
        for helper in helpers:
            with contextlib.suppress(ProcessLookupError):  # one done with its range already
                os.kill(helper, signal.SIGSTOP)
    finally:
        reader.kill()
        reader.wait()
    wait_for(
        lambda: not any(map(running, helpers)), timeout=PROCESS_TIMEOUT, what="the helpers gone"
    )


def spooled(pid: int) -> bool:
    """Whether ``pid`` has written anything (a helper writes only its spool); gone counts."""
    try:
        io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:
        return True
    return int(io["wchar"]) > 0


def running(pid: int) -> bool:
    """Alive, not a zombie waiting for whoever adopted it to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def children(pid: int) -> list[int]:
    """Helper processes ``pid`` started, from every thread of it."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found += [int(c) for c in (task / "children").read_text().split()]
    return [c for c in found if ranges.HELPER_MODULE in _cmdline(c)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_stretch_too_short_to_cut_is_left_to_the_tailer_without_reading_the_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every live pass asks; reading the CPU quota's files first was a quarter of a live
    daemon's CPU. Only a stretch worth cutting asks how many helpers the cgroup allows."""
    asked: list[int] = []

    def counted() -> int:
        asked.append(1)
        return 2

    monkeypatch.setattr(ranges, "usable_cpus", counted)
    log = tmp_path / "server.log"
    log.write_text(decode_line(2.5) * 100)
    with log.open("rb") as file:
        size = log.stat().st_size
        kept = ranges.read_by_ranges(
            file.fileno(),
            0,
            size,
            RecordingSink(),
            MAX_LINE,
            lambda start, end: None,
            engine="sglang",
        )
        assert kept is None
        assert asked == []
        ranges.read_by_ranges(
            file.fileno(),
            0,
            size,
            RecordingSink(),
            MAX_LINE,
            lambda start, end: None,
            split_above=0,
            engine="sglang",
        )
    assert asked == [1]
