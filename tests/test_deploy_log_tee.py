"""sglang-log-tee.py: the console-to-file bridge the sidecar and Compose deployments rely on.

Run as a real process on a pipe, the way the SGLang container runs it. What specwatch needs
from it: every line reaches both the console and the file, and rotation is by rename (the old
inode moves to ``.1``, a new file takes the name), never by truncating in place.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.tools import REPO
from tests.support.waiting import wait_for

TEE = REPO / "deploy" / "kubernetes" / "overlays" / "sidecar" / "sglang-log-tee.py"
LINE = b"[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 48, accept len: 1.00\n"


def run_tee(path: Path, data: bytes, *flags: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(TEE), str(path), *flags],
        input=data,
        capture_output=True,
        timeout=30,
    )


@pytest.mark.e2e
def test_every_line_reaches_console_and_file_unchanged(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    data = LINE + b"bad utf-8 \xff\xfe and a NUL \x00\r\n" + b"no newline at the end"
    result = run_tee(log, data)
    assert result.returncode == 0
    assert result.stdout == data
    assert log.read_bytes() == data


@pytest.mark.e2e
def test_appends_to_an_existing_file_instead_of_overwriting(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"from the previous container start\n")
    run_tee(log, LINE)
    assert log.read_bytes() == b"from the previous container start\n" + LINE


@pytest.mark.e2e
def test_rotates_by_rename_and_keeps_every_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(LINE)
    first_inode = log.stat().st_ino
    lines = [LINE.replace(b"48", str(i).encode()) for i in range(10)]
    max_bytes = len(LINE) * 4
    result = run_tee(log, b"".join(lines), "--max-bytes", str(max_bytes), "--backups", "2")
    assert result.returncode == 0
    rotated = [tmp_path / "server.log.2", tmp_path / "server.log.1", log]
    # The file specwatch had open is renamed away, not truncated: it keeps its inode.
    assert rotated[0].stat().st_ino == first_inode
    assert all(p.stat().st_size <= max_bytes for p in rotated)
    # Oldest to newest across the three files: nothing lost, nothing repeated, order kept.
    assert b"".join(p.read_bytes() for p in rotated) == LINE + b"".join(lines)
    assert not (tmp_path / "server.log.3").exists()


@pytest.mark.e2e
def test_oldest_backup_is_dropped_beyond_the_backup_count(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    lines = [LINE.replace(b"48", str(i).encode()) for i in range(10)]
    run_tee(log, b"".join(lines), "--max-bytes", str(len(LINE) * 2), "--backups", "1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log", "server.log.1"]
    assert (tmp_path / "server.log.1").read_bytes() + log.read_bytes() == b"".join(lines[-4:])


def start_tee(path: Path) -> subprocess.Popen[bytes]:
    """The tee on pipes for its input, console and errors, as the container's bash starts it."""
    return subprocess.Popen(
        [sys.executable, str(TEE), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.e2e
def test_lines_are_forwarded_as_they_arrive_not_at_exit(tmp_path: Path) -> None:
    """SGLang logs a few lines a second: they must not sit in a buffer until the next batch."""
    log = tmp_path / "server.log"
    proc = start_tee(log)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(LINE)
        proc.stdin.flush()
        wait_for(lambda: log.exists() and log.read_bytes() == LINE, timeout=5)
        assert os.read(proc.stdout.fileno(), len(LINE)) == LINE
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0


@pytest.mark.e2e
def test_closed_console_does_not_stop_the_log_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    proc = start_tee(log)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # whoever read the console went away
    proc.stdin.write(LINE * 3)
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0, proc.stderr.read()
    assert log.read_bytes() == LINE * 3


@pytest.mark.e2e
def test_bad_limits_are_refused_with_a_usage_error(tmp_path: Path) -> None:
    result = run_tee(tmp_path / "server.log", b"", "--max-bytes", "0")
    assert result.returncode == 2
    assert b"--max-bytes" in result.stderr


FAKE_SERVER = """
import signal, sys, time
def stop(signum, frame):
    print("stopping on SIGTERM", file=sys.stderr, flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
print("INFO:     127.0.0.1:51234 - GET /health HTTP/1.1 200 OK", flush=True)
print("[2026-02-23 00:14:33 TP0] Decode batch, accept len: 1.00", file=sys.stderr, flush=True)
time.sleep(60)
"""


def shipped_launch_scripts() -> dict[str, str]:
    """The bash script that starts SGLang, from the Kubernetes sidecar and from Compose."""
    sidecar = yaml.safe_load((TEE.parent / "sglang.yaml").read_text(encoding="utf-8"))
    pod = sidecar["spec"]["template"]["spec"]
    compose = yaml.safe_load((REPO / "deploy/compose/docker-compose.yaml").read_text("utf-8"))
    return {
        "kubernetes": next(c for c in pod["containers"] if c["name"] == "sglang")["args"][0],
        "compose": compose["services"]["sglang"]["command"][0],
    }


def test_kubernetes_and_compose_start_sglang_the_same_way() -> None:
    scripts = shipped_launch_scripts()
    assert scripts["kubernetes"] == scripts["compose"]


@pytest.mark.e2e
def test_launch_script_logs_both_streams_and_leaves_sglang_as_the_signalled_process(
    tmp_path: Path,
) -> None:
    """Run the shipped script with a stand-in ``sglang.launch_server`` module.

    Paths are moved into tmp_path; what is checked is the shell wiring: stdout and stderr both
    reach the file and the console, SIGTERM to the container's first process reaches the
    server itself, and its exit status is the container's.
    """
    package = tmp_path / "fake" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_SERVER)
    script = (
        shipped_launch_scripts()["kubernetes"]
        .replace("/opt/specwatch/", f"{TEE.parent}/")
        .replace("/var/log/sglang/", f"{tmp_path}/")
        .replace("python3 ", f"{sys.executable} ")
    )
    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        ["bash", "-c", script],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "fake")},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        wait_for(lambda: log.exists() and log.read_text().count("\n") == 2, timeout=15)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"sglang.launch_server" in cmdline, "bash must exec the server, not wrap it"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 3
        wait_for(lambda: "stopping on SIGTERM" in log.read_text(), timeout=5)
        console = proc.stdout.read().decode()
    finally:
        proc.kill()
    lines = log.read_text().splitlines()
    assert "GET /health" in lines[0] and "Decode batch" in lines[1]
    assert all(line in console for line in lines)
