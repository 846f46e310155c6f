"""``specwatch run`` refuses, at start, what would otherwise fail later without a word.

Each case runs the command through its entry point: exit status 2 and one line on stderr that
names the option, key, variable or file, and what is wrong with it. The cases run in the
test's process (``refused_start``); the real process's refusal, standard input and all, is
pinned by the endless device and passphrase cases, which start ``specwatch run`` itself.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import bcrypt
import pytest

from tests.support.certs import Pair, encrypted, self_signed
from tests.support.daemon import refused_start, specwatch_cmd

pytestmark = pytest.mark.e2e


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``specwatch run ARGS`` (on a port nobody listens on) and return its one error line."""
    result = refused_start(*args, env=env)
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_missing_bearer_token_file_is_named(tmp_path: Path) -> None:
    line = refused("--log-file", "x.log", "--bearer-token-file", str(tmp_path / "token"))
    assert "--bearer-token-file" in line
    assert f"cannot read {tmp_path / 'token'}: No such file or directory" in line


def test_an_unset_token_variable_is_named(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "targets: [{log_files: [x.log], bearer_token_env: NO_KEY}]")
    line = refused("--config", str(config), env={"NO_KEY": ""})
    assert "environment variable NO_KEY is not set" in line
    assert f"config file {config}" in line


def test_an_unset_token_variable_given_through_the_environment_names_both(tmp_path: Path) -> None:
    env = {"SPECWATCH_BEARER_TOKEN_ENV": "SGLANG_KEY_UNSET", "SPECWATCH_LOG_FILE": "x.log"}
    line = refused(env=env)
    assert "SGLANG_KEY_UNSET is not set" in line
    assert "environment variable SPECWATCH_BEARER_TOKEN_ENV" in line


@pytest.mark.parametrize(
    "args",
    [
        ["--log-file", ""],
        ["--log-file", "x.log", "--config", ""],
        ["--log-file", "x.log", "--web-config", ""],
        ["--log-file", "x.log", "--draft-config", " "],
        ["--log-file", "x.log", "--bearer-token-file", ""],
    ],
    ids=lambda a: a[-2],
)
def test_an_empty_path_is_refused_naming_the_option(args: list[str]) -> None:
    line = refused(*args)
    assert args[-2] in line
    assert "empty path" in line


def test_an_empty_path_in_the_config_file_is_refused(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "targets: [{log_files: ['']}]\n")
    line = refused("--config", str(config))
    assert f"targets.0.log_files: an empty path names no file (config file {config})" in line


def test_a_plaintext_basic_auth_password_is_refused_without_echoing_it(tmp_path: Path) -> None:
    good = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    web = write(
        tmp_path / "web.yaml", f"basic_auth_users:\n  alice: '{good}'\n  bob: hunter2-plain\n"
    )
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"web config {web}: basic_auth_users.bob: not a bcrypt hash" in line
    assert "hunter2" not in line


def test_a_port_out_of_range_says_so() -> None:
    line = refused("--log-file", "x.log", "--listen", "127.0.0.1:70000")
    assert "--listen" in line
    assert "port 70000 is out of range" in line


def test_an_abbreviated_option_is_not_taken_for_the_long_one() -> None:
    line = refused("--log-file", "x.log", "--baseline-curv", "1:82,48:1500")
    assert "--baseline-curv" in line


def test_bad_yaml_names_the_file_and_the_line(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "listen: 127.0.0.1:9\ntargets:\n  - {name: a,\n")
    line = refused("--config", str(config))
    assert f"config file {config}: line 4" in line
    assert "not valid YAML" in line


def test_every_config_error_is_listed_on_the_one_line(tmp_path: Path) -> None:
    config = write(
        tmp_path / "c.yaml",
        "stale_after: soon\nmax_line_bytes: 1\ntargets: [{log_files: [a], colour: blue}]\n",
    )
    line = refused("--config", str(config))
    for key in ("stale_after:", "max_line_bytes:", "targets.0.colour: unknown key"):
        assert key in line
    assert "more)" not in line
    assert line.count(f"(config file {config})") == 3


def test_a_bad_environment_value_names_the_variable() -> None:
    line = refused(env={"SPECWATCH_STALE_AFTER": "soon", "SPECWATCH_LOG_FILE": "x.log"})
    assert "stale_after" in line
    assert "environment variable SPECWATCH_STALE_AFTER" in line


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pair, Pair]:
    """Two certificates with their keys, made once for the TLS cases."""
    folder = tmp_path_factory.mktemp("tls")
    return self_signed(folder, "one"), self_signed(folder, "two")


def tls_config(folder: Path, cert: Path, key: Path) -> Path:
    return write(
        folder / "web.yaml", f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    )


def test_a_key_of_another_certificate_names_the_files(
    tmp_path: Path, pairs: tuple[Pair, Pair]
) -> None:
    (cert, _), (_, other_key) = pairs
    web = tls_config(tmp_path, cert, other_key)
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"tls_server_config.key_file: {other_key}: does not belong to the certificate" in line
    assert "--listen" not in line


def test_an_unreadable_key_names_the_file(tmp_path: Path, pairs: tuple[Pair, Pair]) -> None:
    (cert, _), _ = pairs
    web = tls_config(tmp_path, cert, tmp_path / "gone.key")
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"tls_server_config.key_file: cannot read {tmp_path / 'gone.key'}" in line


def test_a_certificate_that_is_not_pem_names_the_file(
    tmp_path: Path, pairs: tuple[Pair, Pair]
) -> None:
    (_, key), _ = pairs
    web = tls_config(tmp_path, key, key)  # the key where the certificate belongs
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"tls_server_config.cert_file: {key}: not a PEM certificate" in line
    assert "PEM lib" not in line


def test_a_key_protected_by_a_passphrase_is_refused_without_a_prompt(
    tmp_path: Path, pairs: tuple[Pair, Pair]
) -> None:
    """With standard input an open pipe (``docker run -i``, ``stdin: true``) OpenSSL printed
    ``Enter PEM pass phrase:`` and the start hung for good. The real process, its standard
    input a pipe left open."""
    cert, key = encrypted(pairs[0])
    web = tls_config(tmp_path, cert, key)
    cmd = specwatch_cmd(
        "run", "--listen", "127.0.0.1:0", "--log-file", "x.log", "--web-config", str(web)
    )
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.wait(timeout=30) == 2
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        assert proc.stdin is not None
        proc.stdin.close()
    assert f"tls_server_config.key_file: {key}: protected by a passphrase" in stderr
    assert "pass phrase" not in stderr


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        ((), {"SPECWATCH_STALE_AFTER": "inf"}, "environment variable SPECWATCH_STALE_AFTER"),
        (("--stale-after", "nan"), {}, "--stale-after"),
        ((), {"SPECWATCH_MAX_LINE_BYTES": str(1 << 30)}, "SPECWATCH_MAX_LINE_BYTES"),
    ],
)
def test_an_endless_duration_or_line_cap_is_refused_naming_its_source(
    args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    line = refused("--log-file", "x.log", *args, env=env)
    assert named in line


OPTIONS = [
    ("--config", "config file"),
    ("--web-config", "web config"),
    ("cert_file", "tls_server_config.cert_file"),
    ("--bearer-token-file", "--bearer-token-file"),
    ("--baseline-bench", "--baseline-bench"),
]


def naming(tmp_path: Path, option: str, path: Path) -> list[str]:
    """The arguments that give ``path`` as ``option`` (a web config's ``cert_file``)."""
    args = ["--log-file", "x.log"]
    if option != "cert_file":
        return [*args, option, str(path)]
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {path}\n  key_file: {path}\n")
    return [*args, "--web-config", str(web)]


@contextmanager
def written_to(fifo: Path) -> Iterator[None]:
    """Whoever opens ``fifo`` for reading meets a writer that ends at once (twice a second): a
    start stuck opening or reading it then fails on what it says, where it hung for good."""
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(0.5):
            with suppress(OSError):  # nobody reading: nothing to unblock
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    writer = threading.Thread(target=unblock, daemon=True)
    writer.start()
    try:
        yield
    finally:
        done.set()
        writer.join()


@pytest.mark.parametrize(("option", "named"), OPTIONS)
def test_a_fifo_given_as_a_file_is_refused_unread(tmp_path: Path, option: str, named: str) -> None:
    """A FIFO hung the start for good, without a word. Anything but a regular file is refused
    before it is opened for reading."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with written_to(fifo):
        line = refused(*naming(tmp_path, option, fifo))
    assert named in line
    assert "not a regular file" in line


@pytest.mark.parametrize(("option", "named"), OPTIONS)
def test_an_endless_device_given_as_a_file_is_refused_unread(
    tmp_path: Path, option: str, named: str
) -> None:
    """/dev/zero as the token took 3 GB in 3 s. The real process: one that reads it anyway is
    stopped at the timeout, not this test run."""
    cmd = specwatch_cmd(
        "run", "--listen", "127.0.0.1:0", *naming(tmp_path, option, Path("/dev/zero"))
    )
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "not a regular file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
