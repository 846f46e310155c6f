"""The daemon on real log files (docs/configuration.md), asserted by /metrics.

Each test runs the real ``specwatch run`` process, changes the file the way log rotation tools
and servers do, and checks over HTTP that nothing is lost or counted twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import RunningDaemon, healthz, run_daemon, specwatch_cmd
from tests.support.files import append
from tests.support.loglines import cri, decode_line
from tests.support.metrics import scrape
from tests.support.tools import free_port, unprivileged
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

pytestmark = pytest.mark.e2e

DECODES = "specwatch_log_stats_lines_total"


def count_is(n: float) -> Callable[[float | None], bool]:
    return lambda v: v == n


def test_file_present_at_start_is_read_from_end_but_tail_sets_current_state(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    append(log, decode_line(1.0), decode_line(2.75))
    with run_daemon(["--log-file", str(log)], port) as d:
        s = d.wait_metric("specwatch_accept_length", lambda v: v is not None)
        assert s.value("specwatch_accept_length") == 2.75
        assert s.value(DECODES, kind="decode") == 0
        append(log, decode_line(3.5))
        s = d.wait_metric(DECODES, count_is(1), kind="decode")
        assert s.value("specwatch_accept_length") == 3.5
        assert s.value("specwatch_log_lines_total") == 1


def test_a_scrape_shows_every_line_written_before_it(tmp_path: Path, port: int) -> None:
    """The tail loop reads a written log at its next tick (a pass costs as much for one line
    as for many); a scrape does not wait for it: each one here comes right after a write."""
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as d:
        for n in range(1, 11):
            append(log, decode_line(1.0 + n / 4))
            s = d.scrape()
            assert s.value(DECODES, kind="decode") == n
            assert s.value("specwatch_accept_length") == 1.0 + n / 4


def test_old_tail_at_start_is_not_presented_as_current(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    append(log, decode_line(1.0))
    an_hour_ago = time.time() - 3600
    os.utime(log, (an_hour_ago, an_hour_ago))
    with run_daemon(["--log-file", str(log)], port) as d:  # ready: the tail was read
        assert d.scrape().value("specwatch_accept_length") is None


def test_from_beginning_replays_and_counts_everything(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    append(log, *(decode_line(1.0) for _ in range(5)), "[2026-02-23 00:14:35] other line")
    with run_daemon(["--log-file", str(log), "--from-beginning"], port) as d:
        s = d.wait_metric(DECODES, count_is(5), kind="decode")
        assert s.value("specwatch_log_lines_total") == 6
        assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 5


# The tests below need only a daemon following their own log from its start: one daemon
# follows them all, a target each (named for its test, its log in a folder of that name), as
# a node's specwatch follows its servers. Each file as it is when the daemon starts: written
# with these lines, touched (no lines), or absent (None).
SHARED: dict[str, dict[str, list[str] | None]] = {
    "rotation": {"server.log": []},
    "copytruncate": {"server.log": []},
    "recreate": {"server.log": ["[2026-02-23 00:10:00] starting"]},
    "absent": {"later/server.log": None},
    "overlong": {"server.log": []},
    "hostile": {"server.log": []},
    "echoed": {"server.log": []},
    "unparseable": {"server.log": []},
    "ranks": {"dp0.log": [], "dp1.log": None},
    "cri": {"0.log": []},
    "docker": {"container-json.log": []},
}
# The overlong test's limit, for every shared target (their other lines are short).
MAX_LINE_BYTES = 2048


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, Path]]:
    """The daemon following every ``SHARED`` target, and the folder of their folders."""
    folder = tmp_path_factory.mktemp("shared")
    targets = []
    for name, files in SHARED.items():
        (folder / name).mkdir()
        for path, lines in files.items():
            if lines is not None:
                append(folder / name / path, *lines)
        logs = [str(folder / name / path) for path in files]
        targets.append({"name": name, "log_files": logs})
    config = folder / "specwatch.yaml"
    config.write_text(yaml.safe_dump({"max_line_bytes": MAX_LINE_BYTES, "targets": targets}))
    with run_daemon(["--config", str(config)], free_port()) as daemon:
        yield daemon, folder


def test_rotation_by_rename_and_create_loses_nothing(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "rotation" / "server.log", "rotation"
    append(log, *(decode_line(1.0) for _ in range(3)))
    d.wait_metric(DECODES, count_is(3), kind="decode", target=target)
    old = log.open("a")  # the server keeps writing to its open descriptor for a moment
    log.rename(log.with_name("server.log.1"))
    old.write(decode_line(1.5) + "\n")
    old.flush()
    append(log, *(decode_line(2.0) for _ in range(4)))
    old.write(decode_line(1.5) + "\n")
    old.close()
    s = d.wait_metric(DECODES, count_is(9), kind="decode", target=target)
    assert s.value("specwatch_log_rotations_total", target=target) == 1
    append(log, decode_line(3.0))  # read after anything that could be read twice
    s = d.wait_metric("specwatch_accept_length", count_is(3.0), target=target)
    assert s.value(DECODES, kind="decode", target=target) == 10


def test_copytruncate_is_detected_and_new_lines_read(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "copytruncate" / "server.log", "copytruncate"
    append(log, *(decode_line(1.0) for _ in range(4)))
    d.wait_metric(DECODES, count_is(4), kind="decode", target=target)
    os.truncate(log, 0)
    d.wait_metric("specwatch_log_truncations_total", count_is(1), target=target)
    append(log, decode_line(3.0))
    s = d.wait_metric(DECODES, count_is(5), kind="decode", target=target)
    assert s.value("specwatch_accept_length", target=target) == 3.0
    assert s.value("specwatch_log_rotations_total", target=target) == 0


def test_delete_and_recreate_reads_new_file_from_first_byte(
    shared: tuple[RunningDaemon, Path],
) -> None:
    d, folder = shared
    log, target = folder / "recreate" / "server.log", "recreate"
    append(log, decode_line(1.0))
    d.wait_metric(DECODES, count_is(1), kind="decode", target=target)
    log.unlink()
    append(log, decode_line(2.0), decode_line(2.5))
    s = d.wait_metric(DECODES, count_is(3), kind="decode", target=target)
    assert s.value("specwatch_accept_length", target=target) == 2.5
    assert s.value("specwatch_log_rotations_total", target=target) == 1


def test_file_absent_at_start_is_read_from_first_byte(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "absent" / "later" / "server.log", "absent"
    assert d.scrape().value(DECODES, kind="decode", target=target) == 0
    log.parent.mkdir(parents=True)
    append(log, decode_line(1.0), decode_line(1.0))
    d.wait_metric(DECODES, count_is(2), kind="decode", target=target)


def test_overlong_line_is_skipped_and_counted(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "overlong" / "server.log", "overlong"
    huge = decode_line(9.0) + ", " + "x" * (5 * MAX_LINE_BYTES)
    append(log, huge, decode_line(1.25))
    s = d.wait_metric(DECODES, count_is(1), kind="decode", target=target)
    assert s.value("specwatch_log_skipped_lines_total", reason="too_long", target=target) == 1
    assert s.value("specwatch_accept_length", target=target) == 1.25


def test_hostile_bytes_are_survived(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "hostile" / "server.log", "hostile"
    raw = (
        b"\xff\xfe not utf-8 \x80 Decode batch, accept len: 7.00\n"
        b"\x00\x00\x00" + decode_line(1.5).encode() + b"\r\n"
        b'\x1b[32mINFO\x1b[0m:     127.0.0.1:1 - "GET /metrics HTTP/1.1" 200 OK\n'
        b"Capturing batches (bs=4 avail_mem=20.1 GB):  10%\rCapturing batches:  100%\n"
        + decode_line(2.0).encode()
        + b"\n"
    )
    append(log, raw=raw)
    s = d.wait_metric(DECODES, count_is(2), kind="decode", target=target)
    assert s.value("specwatch_accept_length", target=target) == 2.0
    assert s.value("specwatch_log_lines_total", target=target) == 5
    skipped = s.value("specwatch_log_skipped_lines_total", reason="invalid_utf8", target=target)
    assert skipped == 1


def test_prompt_text_echoed_in_request_log_is_never_a_record(
    shared: tuple[RunningDaemon, Path],
) -> None:
    d, folder = shared
    log, target = folder / "echoed" / "server.log", "echoed"
    echoed = (
        "[2026-02-23 00:14:40] Finish: obj=GenerateReqInput(text='Decode batch, "
        "#running-req: 1, accept len: 9.99, cuda graph: True, gen throughput (token/s): 1.0'), "
        "out={'meta_info': {}}"
    )
    append(log, echoed, "Decode batch, accept len: 9.99, #running-req: 1", decode_line(1.0))
    s = d.wait_metric(DECODES, count_is(1), kind="decode", target=target)
    assert s.value("specwatch_accept_length", target=target) == 1.0
    assert s.value("specwatch_accept_length_windows_bucket", le="8.0", target=target) == 1


def test_unparseable_stats_line_counts_as_unrecognized(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "unparseable" / "server.log", "unparseable"
    append(log, "[2026-09-01 10:00:00 TP0] Decode batch, something entirely new happened")
    d.wait_metric("specwatch_log_unrecognized_stats_lines_total", count_is(1), target=target)


def test_several_targets_from_a_config_file(tmp_path: Path, port: int) -> None:
    a, b, config = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "specwatch.yaml"
    a.touch()
    b.touch()
    config.write_text(
        f"targets:\n  - {{name: node-a, log_files: ['{a}']}}\n"
        f"  - {{name: node-b, log_files: ['{b}'], baseline: {{tok_s: 1000}}}}\n"
    )
    with run_daemon(["--config", str(config)], port) as d:
        append(a, decode_line(1.0))
        append(b, decode_line(3.0, tput=1800.0))
        # Each target has its own tailer: wait for both before comparing them.
        d.wait_metric("specwatch_accept_length", lambda v: v is not None, target="node-a")
        s = d.wait_metric("specwatch_speedup", lambda v: v is not None, target="node-b")
        assert s.value("specwatch_accept_length", target="node-a") == 1.0
        assert s.value("specwatch_accept_length", target="node-b") == 3.0
        assert s.value("specwatch_speedup", target="node-b") == 1.8
        assert s.value("specwatch_speedup", target="node-a") is None


def test_stdin_source(port: int) -> None:
    cmd = specwatch_cmd("run", "--log-file", "-", "--listen", f"127.0.0.1:{port}")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write((decode_line(2.25) + "\n").encode())
        proc.stdin.flush()

        def seen() -> bool:
            try:
                return scrape(port).value("specwatch_accept_length") == 2.25
            except OSError:
                return False

        wait_for(seen, timeout=PROCESS_TIMEOUT)  # its start, then the line
    finally:
        proc.terminate()
        assert proc.wait(timeout=PROCESS_TIMEOUT) == 0


def test_per_window_gauges_vanish_after_stale_after_and_return_with_a_new_window(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log), "--stale-after", "1.5"], port) as d:
        append(log, decode_line(2.5))
        s = d.wait_metric("specwatch_accept_length", count_is(2.5))
        assert s.value("specwatch_running_requests") == 48
        s = d.wait_metric("specwatch_accept_length", lambda v: v is None, 5)
        window_gauges = {
            "specwatch_accept_length",
            "specwatch_accept_ratio",
            "specwatch_cuda_graph",
            "specwatch_running_requests",
            "specwatch_queued_requests",
            "specwatch_token_usage_ratio",
            "specwatch_gen_throughput_tokens_per_second",
        }
        assert not window_gauges & s.names()
        assert s.value(DECODES, kind="decode") == 1
        assert s.value("specwatch_last_decode_timestamp_seconds") is not None
        append(log, decode_line(3.0))
        d.wait_metric("specwatch_accept_length", count_is(3.0))


def test_several_log_files_of_one_target_are_all_followed(
    shared: tuple[RunningDaemon, Path],
) -> None:
    """One file per DP rank, as a router-launched deployment writes them."""
    d, folder = shared
    rank0, rank1, target = folder / "ranks" / "dp0.log", folder / "ranks" / "dp1.log", "ranks"
    append(rank0, decode_line(1.5, ranks=" DP0 TP0"))
    rank1.write_text(decode_line(3.5, ranks=" DP1 TP1") + "\n")  # appears after start
    s = d.wait_metric(DECODES, count_is(2), kind="decode", target=target)
    assert s.value("specwatch_accept_length", dp_rank="0", target=target) == 1.5
    assert s.value("specwatch_accept_length", dp_rank="1", target=target) == 3.5
    assert s.value("specwatch_log_lines_total", target=target) == 2


def test_cri_records_split_across_writes_are_joined_into_one_line(
    shared: tuple[RunningDaemon, Path],
) -> None:
    d, folder = shared
    log, target = folder / "cri" / "0.log", "cri"
    line = decode_line(2.25)
    append(log, cri("stderr", "P", line[:50]))
    append(log, cri("stderr", "P", line[50:90]), cri("stderr", "F", line[90:]))
    s = d.wait_metric(DECODES, count_is(1), kind="decode", target=target)
    assert s.value("specwatch_accept_length", target=target) == 2.25
    assert s.value("specwatch_log_lines_total", target=target) == 1
    assert s.value("specwatch_log_unrecognized_stats_lines_total", target=target) == 0


def test_docker_json_file_log_is_unwrapped(shared: tuple[RunningDaemon, Path]) -> None:
    d, folder = shared
    log, target = folder / "docker" / "container-json.log", "docker"
    line = decode_line(1.75)

    def record(text: str) -> str:
        return json.dumps({"log": text, "stream": "stderr", "time": "2026-02-23T00:14:33Z"})

    append(log, record(line[:70]))
    append(log, record(line[70:] + "\n"), record("\x1b[32mINFO\x1b[0m: access\r\n"))
    s = d.wait_metric(DECODES, count_is(1), kind="decode", target=target)
    assert s.value("specwatch_accept_length", target=target) == 1.75
    assert s.value("specwatch_log_lines_total", target=target) == 2


def test_a_backlog_with_a_read_only_temp_directory_is_read_whole_and_reported_up(
    tmp_path: Path, port: int
) -> None:
    """Our own read-only containers: a backlog over 32 MiB (here a big file rotated in) needs
    spool files for the helper processes; their creation failed on every pass, 100 of 214,105
    lines were read and the path still showed as followed. Run without the power to write
    anywhere (as a service user would), with TMPDIR a read-only directory."""
    read_only = tmp_path / "read-only-tmp"
    read_only.mkdir(mode=0o555)
    log = tmp_path / "server.log"
    append(log, decode_line(2.5))
    # A 4 KiB line (a request's prompt echoed): the bytes, not the lines, start helpers, and
    # parsing a tenth as many lines is a tenth of the CPU.
    line = f"[2026-02-23 00:14:40] Receive: obj=GenerateReqInput(text='{'x' * 4000}')\n".encode()
    # Past the 32 MiB above which helpers start, after the 4 MiB the first pass reads itself.
    count = (40 << 20) // len(line) + 1
    args = ["--log-file", str(log), "--from-beginning"]
    with run_daemon(args, port, env={"TMPDIR": str(read_only)}, prefix=unprivileged()) as daemon:
        daemon.wait_metric("specwatch_log_lines_total", lambda v: v == 1, target="default")
        rotated = tmp_path / "server.log.new"
        rotated.write_bytes(line * count)
        rotated.rename(log)
        scrape = daemon.wait_metric(
            "specwatch_log_lines_total", lambda v: v == 1 + count, 60, target="default"
        )
        assert scrape.value("specwatch_log_read_errors_total", target="default") == 0
        up = scrape.value("specwatch_log_source_up", path=str(log), reason="ok")
        assert up == 1
        assert healthz(port) == (200, "ok\n")
    stderr = daemon.logged
    assert "Traceback" not in stderr
    # At start, and at the backlog when a core was idle for a helper (none is started on a
    # busy machine, which then needs no spool).
    assert stderr.count(f"cannot spool in {read_only}") in (1, 2)
