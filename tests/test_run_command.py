"""``specwatch run`` as a user meets it: HTTP endpoints, shutdown, and refusing bad input."""

from __future__ import annotations

import base64
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest

from tests.support.daemon import healthy, refused_start, run_daemon, specwatch_cmd
from tests.support.proc import SCRAPE_TIMEOUT
from tests.support.waiting import PROCESS_TIMEOUT, wait_for

pytestmark = pytest.mark.e2e


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_endpoints(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log), "--target", "gpu-node-7"], port):
        status, ctype, body = get(port, "/")
        assert status == 200 and ctype.startswith("text/html")
        assert "/metrics" in body and "gpu-node-7" in body
        assert get(port, "/healthz")[:1] == (200,)
        status, ctype, body = get(port, "/metrics")
        assert status == 200 and ctype.startswith("text/plain")
        assert 'specwatch_build_info{version="' in body
        assert 'specwatch_log_lines_total{target="gpu-node-7"} 0.0' in body
        assert "process_resident_memory_bytes" in body
        assert get(port, "/nope")[0] == 404


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        specwatch_cmd(*args), capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )


# Each refused in the test's process (``refused_start``); a refusal by the real process, its
# exit status and stderr, is test_port_in_use_exits_2's.
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--log-file", "x.log", "--listen", "nowhere"], "listen"),
        (["--log-file", "x.log", "--stale-after", "-5"], "stale_after"),
        (["--log-file", "x.log", "--stale-after", "soon"], "--stale-after"),
        (["--log-file", "x.log", "--baseline-curve", "fast"], "--baseline-curve"),
        (["--log-file", "x.log", "--baseline-bench", "/nonexistent.jsonl"], "--baseline-bench"),
        (["--log-file", "x.log", "--expected-accept-length", "0.2"], "expected_accept_length"),
        (["--config", "/nonexistent/specwatch.yaml"], "specwatch.yaml"),
        ([], "targets"),
        (["--log-file", "x.log", "--bogus"], "--bogus"),
        (
            ["--log-file", "x.log", "--baseline-tok-s", "5", "--baseline-curve", "1:2"],
            "not allowed",
        ),
        (["--log-file", "x.log", "--web-config", "/nonexistent/web.yml"], "web.yml"),
        (["--log-file", "x.log", "--draft-config", "/nonexistent/drafter"], "draft_config"),
    ],
)
def test_bad_flags_exit_2_with_one_line_naming_the_problem(args: list[str], named: str) -> None:
    result = refused_start(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and named in lines[0], result.stderr


def test_bad_config_key_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "specwatch.yaml"
    config.write_text("targets:\n  - log_files: [a.log]\n    stale_after: 5\n")
    result = refused_start("--config", str(config))
    assert result.returncode == 2
    assert "targets.0.stale_after: unknown key" in result.stderr


def test_exporter_toolkit_flag_names_listen_and_guard_like_ours(tmp_path: Path, port: int) -> None:
    """Scripts written for Go exporters pass --web.listen-address and --web.config.file."""
    log, web = tmp_path / "server.log", tmp_path / "web.yml"
    log.touch()
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    argv = specwatch_cmd(
        "run", "--log-file", str(log), f"--web.listen-address=127.0.0.1:{port}",
        "--web.config.file", str(web),
    )  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: healthy(port), PROCESS_TIMEOUT)
        assert get(port, "/metrics")[0] == 401
        right = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
        status, _, body = get(port, "/metrics", right)
        assert status == 200 and "specwatch_build_info" in body
    finally:
        proc.terminate()
        proc.communicate(timeout=PROCESS_TIMEOUT)


def test_port_in_use_exits_2(tmp_path: Path, port: int) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port):
        result = run_cli("run", "--log-file", str(log), "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2 and "--listen" in result.stderr


def test_healthz_stays_open_while_basic_auth_guards_the_rest(tmp_path: Path, port: int) -> None:
    log, web = tmp_path / "server.log", tmp_path / "web.yml"
    log.touch()
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    with run_daemon(["--log-file", str(log), "--web-config", str(web)], port):
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/metrics")[0] == 401
        assert get(port, "/")[0] == 401
        wrong = {"Authorization": "Basic " + base64.b64encode(b"prometheus:guess").decode()}
        assert get(port, "/metrics", wrong)[0] == 401
        right = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
        status, _, body = get(port, "/metrics", right)
        assert status == 200 and "specwatch_build_info" in body
