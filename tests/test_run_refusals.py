"""``specwatch run`` refuses, at start, what would otherwise fail later without a word.

Each case runs the real command: exit status 2 and one line on stderr that names the option,
key, variable or file, and what is wrong with it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import bcrypt
import pytest

from tests.support.certs import encrypted
from tests.support.daemon import specwatch_cmd
from tests.support.tools import require_tool

pytestmark = pytest.mark.e2e


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``specwatch run ARGS`` (on a port nobody listens on) and return its one error line."""
    cmd = specwatch_cmd("run", "--listen", "127.0.0.1:0", *args)
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )
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


def tls_pair(folder: Path, name: str) -> tuple[Path, Path]:
    openssl = require_tool("openssl")
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         f"/CN={name}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def tls_config(folder: Path, cert: Path, key: Path) -> Path:
    return write(
        folder / "web.yaml", f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    )


def test_a_key_of_another_certificate_names_the_files(tmp_path: Path) -> None:
    cert, _ = tls_pair(tmp_path, "one")
    _, other_key = tls_pair(tmp_path, "two")
    web = tls_config(tmp_path, cert, other_key)
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"tls_server_config.key_file: {other_key}: does not belong to the certificate" in line
    assert "--listen" not in line


def test_an_unreadable_key_names_the_file(tmp_path: Path) -> None:
    cert, _ = tls_pair(tmp_path, "one")
    web = tls_config(tmp_path, cert, tmp_path / "gone.key")
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"tls_server_config.key_file: cannot read {tmp_path / 'gone.key'}" in line


def test_a_certificate_that_is_not_pem_names_the_file(tmp_path: Path) -> None:
    _, key = tls_pair(tmp_path, "one")
    web = tls_config(tmp_path, key, key)  # the key where the certificate belongs
    line = refused("--log-file", "x.log", "--web-config", str(web))
    assert f"tls_server_config.cert_file: {key}: not a PEM certificate" in line
    assert "PEM lib" not in line


def test_a_key_protected_by_a_passphrase_is_refused_without_a_prompt(tmp_path: Path) -> None:
    """With standard input an open pipe (``docker run -i``, ``stdin: true``) OpenSSL printed
    ``Enter PEM pass phrase:`` and the start hung for good."""
    cert, key = encrypted(tls_pair(tmp_path, "one"))
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


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("--config", "config file"),
        ("--web-config", "web config"),
        ("cert_file", "tls_server_config.cert_file"),
        ("--bearer-token-file", "--bearer-token-file"),
        ("--baseline-bench", "--baseline-bench"),
    ],
)
def test_a_fifo_or_endless_device_given_as_a_file_is_refused_unread(
    tmp_path: Path, special: str, option: str, named: str
) -> None:
    """A FIFO hung the start for good, without a word; /dev/zero as the token took 3 GB in
    3 s. Anything but a regular file is refused before it is opened for reading."""
    path = tmp_path / "fifo"
    if special == "fifo":
        os.mkfifo(path)
    else:
        path = Path(special)
    args = ["--log-file", "x.log"]
    if option == "cert_file":
        web = tmp_path / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: {path}\n  key_file: {path}\n")
        args += ["--web-config", str(web)]
    else:
        args += [option, str(path)]
    cmd = specwatch_cmd("run", "--listen", "127.0.0.1:0", *args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "not a regular file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
