"""`specwatch parse` run as users run it: the installed console script on real files."""

from __future__ import annotations

import gzip
import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SPECWATCH = Path(sys.executable).with_name("specwatch")

LOG = """\
[2026-02-23 00:10:02] server_args=ServerArgs(model_path='m', speculative_algorithm='EAGLE3')
[2026-02-23 00:14:31 TP0] Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 512, \
token usage: 0.09, #running-req: 11, #queue-req: 0, input throughput (token/s): 8123.40, \
cuda graph: False
[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 48, #token: 6460, token usage: 0.06, \
accept len: 1.00, accept rate: 0.25, cuda graph: True, gen throughput (token/s): 637.19, \
#queue-req: 32
[2026-02-23 00:14:35] INFO:     10.0.0.7:51234 - "GET /metrics HTTP/1.1" 200 OK
[2026-02-23 00:14:35] Finish: obj=GenerateReqInput(text='Decode batch, accept len: 9.99')
[2026-02-23 00:14:37 TP0] Decode batch, #running-req: 48, #token: nonsense, token usage: ??, \
#queue-req: 32
[2026-02-23 00:14:40 TP0] Decode batch, #running-req: 47, #token: 8380, token usage: 0.07, \
accept len: 1.00, accept rate: 0.25, cuda graph: False, gen throughput (token/s): 597.79, \
#queue-req: 30
"""


def specwatch(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SPECWATCH), *args],
        input=None if stdin is None else stdin.decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    path.write_text(LOG)
    return path


def test_json_output_has_one_record_per_stats_line(log_file: Path) -> None:
    result = specwatch("parse", "--json", str(log_file))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["kind"] for r in records] == ["prefill", "decode", "decode"]
    first_decode = records[1]
    assert first_decode["time"] == "2026-02-23T00:14:33"
    assert first_decode["engine"] == "sglang"
    assert (first_decode["running_requests"], first_decode["queued_requests"]) == (48, 32)
    assert (first_decode["accept_length"], first_decode["accept_rate"]) == (1.0, 0.25)
    assert first_decode["cuda_graph"] is True
    assert first_decode["gen_throughput"] == 637.19
    assert first_decode["dp_rank"] is None
    assert first_decode["tp_rank"] == 0
    assert records[0]["new_tokens"] == 2048
    assert records[0]["cached_tokens"] == 512
    assert records[0]["input_throughput"] == 8123.40
    assert records[2]["cuda_graph"] is False


def test_summary_on_stderr_counts_lines_records_and_unrecognised(log_file: Path) -> None:
    result = specwatch("parse", "--json", str(log_file))
    assert "7 lines read" in result.stderr
    assert "3 records" in result.stderr
    assert "1 unrecognised" in result.stderr


def test_table_output_is_aligned_with_a_header(log_file: Path) -> None:
    result = specwatch("parse", str(log_file))
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert len(rows) == 4
    assert rows[0].split()[:2] == ["time", "kind"]
    assert len({len(row.rstrip()) for row in rows}) == 1
    assert rows[2].split()[:2] == ["2026-02-23T00:14:33", "decode"]
    assert "637.19" in rows[2]
    assert "1.00" in rows[2]
    assert "0.25" in rows[2]


def test_dash_reads_stdin(log_file: Path) -> None:
    result = specwatch("parse", "--json", "-", stdin=log_file.read_bytes())
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3


def test_several_files_are_read_in_order(log_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.log"
    other.write_text(
        "[2026-02-24 01:00:00 DP1 TP4] Decode batch, #running-req: 2, #token: 10, "
        "token usage: 0.00, accept len: 3.50, accept rate: 0.62, cuda graph: True, "
        "gen throughput (token/s): 90.00, #queue-req: 0"
    )
    result = specwatch("parse", "--json", str(log_file), str(other))
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 4
    assert (records[-1]["dp_rank"], records[-1]["tp_rank"], records[-1]["accept_length"]) == (
        1,
        4,
        3.5,
    )


def test_missing_file_exits_2_naming_the_file(log_file: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    result = specwatch("parse", str(log_file), str(missing))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(missing) in result.stderr


def test_records_read_before_a_broken_file_are_printed(log_file: Path, tmp_path: Path) -> None:
    broken = tmp_path / "server.log.1.gz"
    broken.write_bytes(gzip.compress(LOG.encode())[:-12])  # cut off mid-rotation
    result = specwatch("parse", "--json", str(log_file), str(broken))
    assert result.returncode == 2
    assert str(broken) in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["kind"] for r in records] == ["prefill", "decode", "decode"]


def test_directory_instead_of_file_exits_2(tmp_path: Path) -> None:
    result = specwatch("parse", str(tmp_path))
    assert result.returncode == 2
    assert str(tmp_path) in result.stderr


def test_cri_wrapped_kubernetes_log_gives_the_same_records(log_file: Path, tmp_path: Path) -> None:
    cri = tmp_path / "0.log"
    lines = LOG.splitlines()
    wrapped = []
    for line in lines:
        # kubelet splits long lines into P records ended by an F record
        wrapped.append(f"2026-02-23T00:14:33.000000001Z stderr P {line[:40]}")
        wrapped.append(f"2026-02-23T00:14:33.000000002Z stderr F {line[40:]}")
    cri.write_text("\n".join(wrapped) + "\n")
    plain = specwatch("parse", "--json", str(log_file))
    result = specwatch("parse", "--json", str(cri))
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain.stdout


def test_docker_json_file_log_gives_the_same_records(log_file: Path, tmp_path: Path) -> None:
    docker = tmp_path / "container-json.log"
    docker.write_text(
        "".join(
            json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-02-23T00:14:33Z"})
            + "\n"
            for line in LOG.splitlines()
        )
    )
    plain = specwatch("parse", "--json", str(log_file))
    result = specwatch("parse", "--json", str(docker))
    assert result.stdout == plain.stdout


def test_binary_garbage_file_is_read_without_crashing(tmp_path: Path) -> None:
    junk = tmp_path / "junk.log"
    junk.write_bytes(bytes(range(256)) * 50 + b"\nDecode batch\xff\xfe\n\x00\r\n")
    result = specwatch("parse", str(junk))
    assert result.returncode == 0, result.stderr
    assert "0 records" in result.stderr


def test_gzipped_rotation_and_a_last_line_without_newline_are_read(tmp_path: Path) -> None:
    """parse shares report's and doctor's reader: gzip is opened, an unterminated last line
    counts, and an overlong line is skipped and counted instead of held."""
    rotated = tmp_path / "server.log.1.gz"
    rotated.write_bytes(gzip.compress(LOG.encode()))
    current = tmp_path / "server.log"
    current.write_bytes(b"x" * (2 << 20) + b"\n" + LOG.rstrip("\n").encode())  # no final \n
    result = specwatch("parse", "--json", str(rotated), str(current))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["accept_length"] for r in records if r["kind"] == "decode"] == [1.0, 1.0] * 2
    assert records[-1]["running_requests"] == 47  # the unterminated last line
    assert "skipped: 1 too_long" in result.stderr


def test_records_from_a_live_pipe_are_printed_as_they_come(log_file: Path) -> None:
    """``tail -f log | specwatch parse --json -``: a record shows while the pipe stays open."""
    proc = subprocess.Popen(
        [str(SPECWATCH), "parse", "--json", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(LOG.encode())
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no record printed while standard input was still open"
        assert json.loads(proc.stdout.readline())["kind"] == "prefill"
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
