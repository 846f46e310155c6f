"""The web config as exporter-toolkit reads it, over loopback with real TLS and certificates.

A ``web-config.yml`` written for node_exporter must start specwatch and mean the same: the
file and the certificates it names are read again when they change (a rotated certificate is
served from the next connection), a bad new file keeps the one before and says why, each
``client_auth_type`` asks for and checks certificates as Go's crypto/tls does, and what is
accepted but not enforced is named in a WARNING.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import itertools
import logging
import os
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry

from exporter.exposition.server import WebServer, make_app
from exporter.exposition.webreload import LiveWebConfig
from exporter.settings import ConfigError
from tests.support.certs import Pair, encrypted, self_signed, signed_by
from tests.support.daemon import RunningDaemon, run_daemon, specwatch_cmd
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

Refused = None  # what ``fetch`` returns when the server ends the connection


@contextmanager
def serving(web: Path) -> Iterator[int]:
    """A real web server on a loopback port, guarded and secured by the web config ``web``."""
    live = LiveWebConfig(web)
    app = make_app(CollectorRegistry(), lambda: b"landing", live.guard)
    server = WebServer("127.0.0.1", 0, app, live if live.serves_tls else None)
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def fetch(
    port: int,
    path: str = "/metrics",
    client: Pair | None = None,
    auth: tuple[str, str] | None = None,
    ciphers: str | None = None,
) -> tuple[int, bytes, http.client.HTTPResponse] | None:
    """Status, the server's certificate (DER) and the response; None when refused."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if client is not None:
        context.load_cert_chain(*client)
    if ciphers is not None:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(ciphers)
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        conn.request("GET", path, headers=headers)
        assert isinstance(conn.sock, ssl.SSLSocket)
        server_cert = conn.sock.getpeercert(binary_form=True) or b""
        response = conn.getresponse()
        response.read()
        return response.status, server_cert, response
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected):
        return Refused
    finally:
        conn.close()


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def tls_yaml(server: Pair, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {server[0]}\n  key_file: {server[1]}\n{extra}"


@contextmanager
def tls_daemon(tmp_path: Path, web: Path, port: int) -> Iterator[RunningDaemon]:
    """The real daemon serving TLS with ``web``, once its /healthz answers over TLS."""
    log = tmp_path / "server.log"
    log.touch()

    def ready(p: int) -> bool:
        answer = fetch(p, "/healthz")
        return answer is not None and answer[0] == 200

    with run_daemon(["--log-file", str(log), "--web-config", str(web)], port, ready=ready) as d:
        yield d


def replace(path: Path, text: str) -> None:
    """Write ``text`` as tools rotating files do: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def test_a_rotated_certificate_is_served_from_the_next_connection(tmp_path: Path) -> None:
    first = self_signed(tmp_path, "first")
    second = self_signed(tmp_path, "second")
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(first))
    old, new = der(first[0]), der(second[0])  # read now: the first files are overwritten
    with serving(web) as port:
        before = fetch(port)
        assert before is not None and before[1] == old
        # cert-manager and certbot replace both files; until both are new the pair mismatches
        # and the pair read before stays in force.
        replace(first[1], second[1].read_text())
        between = fetch(port)
        assert between is not None and between[1] == old
        replace(first[0], second[0].read_text())
        # A connection waits a second at most for the new pair to be read; a loaded machine
        # may take longer, and meanwhile the pair before is served, never a broken one.
        wait_for(lambda: new_cert_served(port, old, new))


def new_cert_served(port: int, old: bytes, new: bytes) -> bool:
    """Whether a new connection is served ``new``; ``old`` means not yet, anything else (or
    no answer) fails at once."""
    answer = fetch(port)
    assert answer is not None and answer[1] in (old, new)
    return answer[1] == new


def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def test_a_bad_new_file_keeps_the_one_before_and_a_good_one_applies(
    tmp_path: Path, port: int
) -> None:
    """The real daemon: its log says why a new file was not taken."""
    server = self_signed(tmp_path, "server")
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(server, f"basic_auth_users:\n  alice: '{hashed('a-pass')}'\n"))
    with tls_daemon(tmp_path, web, port) as daemon:
        assert (fetch(port, auth=("alice", "a-pass")) or [0])[0] == 200
        replace(web, tls_yaml(server, "basic_auth_users:\n  bob: plain-text\n"))
        assert (fetch(port, auth=("alice", "a-pass")) or [0])[0] == 200
        assert (fetch(port, auth=("bob", "plain-text")) or [0])[0] == 401
        replace(web, tls_yaml(server, f"basic_auth_users:\n  bob: '{hashed('b-pass')}'\n"))
        # Read within a second, or on a loaded machine once the read is done.
        wait_for(lambda: (fetch(port, auth=("bob", "b-pass")) or [0])[0] == 200)
        assert (fetch(port, auth=("alice", "a-pass")) or [0])[0] == 401
    errors = daemon.logged
    assert f"web config {web}: basic_auth_users.bob: not a bcrypt hash" in errors
    assert "keeping the web config read before" in errors
    assert "plain-text" not in errors


def test_a_certificate_replaced_by_a_fifo_keeps_the_one_before_and_answers(
    tmp_path: Path, port: int
) -> None:
    """Each connection reads a changed certificate again: a FIFO there blocked that read, and
    with it the accept loop, /metrics and /healthz, for good."""
    server = self_signed(tmp_path, "server")
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(server))
    with tls_daemon(tmp_path, web, port) as daemon:
        der_before = der(server[0])
        fifo = tmp_path / "cert.fifo"
        os.mkfifo(fifo)
        os.replace(fifo, server[0])
        for path in ("/healthz", "/metrics"):
            answer = fetch(port, path)
            assert answer is not None and answer[0] == 200
            assert answer[1] == der_before
    errors = daemon.logged
    assert f"cert_file: cannot read {server[0]}: not a regular file" in errors
    assert "keeping the web config read before" in errors


def test_a_node_exporter_web_config_starts_and_names_what_is_not_enforced(
    tmp_path: Path, port: int
) -> None:
    """Every key exporter-toolkit documents, relative paths from the file's folder."""
    ca = self_signed(tmp_path, "ca")
    signed_by(ca, tmp_path, "server")
    scraper = signed_by(ca, tmp_path, "scraper", ["DNS:prometheus.monitoring"])
    web = tmp_path / "web-config.yml"
    web.write_text(
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "  client_ca_file: ca.crt\n"
        "  client_allowed_sans: [prometheus.monitoring]\n"
        "  min_version: TLS12\n"
        "  max_version: TLS13\n"
        "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,"
        " TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n"
        "  prefer_server_cipher_suites: true\n"
        "  curve_preferences: [CurveP256, X25519]\n"
        "http_server_config:\n"
        "  http2: true\n"
        "  headers:\n"
        "    X-Frame-Options: deny\n"
        f"basic_auth_users:\n  prometheus: '{hashed('scrape')}'\n"
        "rate_limit:\n  interval: 100ms\n  burst: 50\n"
    )
    log = tmp_path / "server.log"
    log.touch()

    def ready(p: int) -> bool:
        return fetch(p, "/healthz", client=scraper) is not None

    args = ["--log-file", str(log), "--web-config", str(web)]
    with run_daemon(args, port, ready=ready) as daemon:
        answer = fetch(port, client=scraper, auth=("prometheus", "scrape"))
        assert answer is not None and answer[0] == 200
        assert answer[2].getheader("X-Frame-Options") == "deny"
        assert fetch(port, auth=("prometheus", "scrape")) is Refused  # no client certificate
    errors = daemon.logged
    warnings = [line for line in errors.splitlines() if "WARNING" in line]
    assert any("curve_preferences: not enforced" in line for line in warnings), errors
    assert any("http2: not enforced" in line for line in warnings), errors
    assert len(warnings) == 2, errors


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    folder = tmp_path_factory.mktemp("certs")
    ca = self_signed(folder, "ca")
    return {
        "ca": ca,
        "server": signed_by(ca, folder, "server"),
        "trusted": signed_by(ca, folder, "trusted", ["DNS:scraper.example"]),
        "stranger": self_signed(folder, "stranger", ["DNS:scraper.example", "IP:::1"]),
        "other-name": self_signed(folder, "other-name", ["DNS:intruder.example"]),
    }


# Go's crypto/tls: which client (none, a self-signed certificate, one the CA issued) gets in.
CLIENT_AUTH = {
    "NoClientCert": (True, True, True),
    "RequestClientCert": (True, True, True),
    "RequireAnyClientCert": (False, True, True),
    "VerifyClientCertIfGiven": (True, False, True),
    "RequireAndVerifyClientCert": (False, False, True),
}


@pytest.mark.parametrize(("mode", "admitted"), CLIENT_AUTH.items())
def test_client_auth_type_has_gos_meaning(
    mode: str, admitted: tuple[bool, bool, bool], certs: dict[str, Pair], tmp_path: Path
) -> None:
    ca = f"  client_ca_file: {certs['ca'][0]}\n" if mode != "NoClientCert" else ""
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(certs["server"], f"  client_auth_type: {mode}\n{ca}"))
    with serving(web) as port:
        clients = (None, certs["stranger"], certs["trusted"])
        got = tuple(fetch(port, client=client) is not Refused for client in clients)
    assert got == admitted


def test_client_allowed_sans_admit_only_the_names_listed(
    certs: dict[str, Pair], tmp_path: Path
) -> None:
    web = tmp_path / "web.yml"
    sans = "  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: ['::1']\n"
    web.write_text(tls_yaml(certs["server"], sans))
    with serving(web) as port:
        assert fetch(port, client=certs["stranger"]) is not Refused  # IP SAN, as Go prints it
        assert fetch(port, client=certs["other-name"]) is Refused
        assert fetch(port, client=certs["trusted"]) is Refused  # issued by the CA, wrong name


def test_cipher_suites_take_gos_names(certs: dict[str, Pair], tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    suites = "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n"
    web.write_text(tls_yaml(certs["server"], suites))
    with serving(web) as port:
        answer = fetch(port, ciphers="ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256")
        assert answer is not None
        assert fetch(port, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256") is Refused


def test_inline_certificate_and_key_are_served(certs: dict[str, Pair], tmp_path: Path) -> None:
    cert, key = (path.read_text() for path in certs["server"])
    indent = "\n    ".join
    web = tmp_path / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        f"  cert: |\n    {indent(cert.splitlines())}\n"
        f"  key: |\n    {indent(key.splitlines())}\n"
    )
    with serving(web) as port:
        answer = fetch(port)
        assert answer is not None and answer[1] == der(certs["server"][0])


def test_the_rate_limit_answers_429_past_the_burst_and_spares_healthz(
    certs: dict[str, Pair], tmp_path: Path
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(certs["server"], "rate_limit:\n  interval: 1m\n  burst: 2\n"))
    with serving(web) as port:
        statuses = [(fetch(port) or [0])[0] for _ in range(3)]
        assert statuses == [200, 200, 429]
        assert (fetch(port, "/healthz") or [0])[0] == 200


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "cipher_suites"),
        ("  curve_preferences: [CurveP224]\n", "curve_preferences"),
        ("  min_version: TLS14\n", "min_version"),
        ("  client_ca_file: server.crt\n", "client_ca_file"),
        (
            "  client_auth_type: VerifyClientCertIfGiven\n  client_allowed_sans: [x]\n",
            "client_allowed_sans",
        ),
        ("  client_auth_type: Sometimes\n", "client_auth_type"),
    ],
)
def test_values_go_refuses_are_refused_naming_the_key(
    extra: str, named: str, certs: dict[str, Pair], tmp_path: Path
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(certs["server"], extra))
    with pytest.raises(ConfigError, match=named):
        LiveWebConfig(web)


def test_a_key_given_inline_is_never_logged(
    certs: dict[str, Pair], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong inline key names the key, not its text."""
    other = self_signed(tmp_path, "other")
    key = other[1].read_text()
    indent = "\n    ".join(key.splitlines())
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {certs['server'][0]}\n  key: |\n    {indent}\n"
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigError) as refused:
        LiveWebConfig(web)
    assert "tls_server_config.key: does not belong to the certificate" in str(refused.value)
    assert key.splitlines()[1] not in str(refused.value) + caplog.text


def test_tls_is_not_switched_off_under_a_running_server(
    certs: dict[str, Pair], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(certs["server"]))
    with serving(web) as port, caplog.at_level(logging.WARNING):
        replace(web, f"basic_auth_users:\n  ops: '{hashed('pw')}'\n")
        answer = fetch(port)  # still TLS, and still without a password
        assert answer is not None and answer[0] == 200
    assert "TLS cannot be switched off while running" in caplog.text


def test_a_key_protected_by_a_passphrase_swapped_in_keeps_the_pair_before_without_a_prompt(
    tmp_path: Path, port: int
) -> None:
    """With standard input an open pipe, the reload waited on OpenSSL's passphrase prompt:
    /healthz timed out until a newline came on standard input (with ``--log-file -``, the
    server's first log line was taken as the passphrase)."""
    server = self_signed(tmp_path, "server")
    _, protected = encrypted(self_signed(tmp_path, "next"))
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(server))
    log = tmp_path / "server.log"
    log.touch()
    cmd = specwatch_cmd(
        "run", "--listen", f"127.0.0.1:{port}", "--log-file", str(log), "--web-config", str(web)
    )
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: fetch(port, "/healthz") is not None or proc.poll() is not None, 15)
        replace(server[1], protected.read_text())
        for path in ("/healthz", "/metrics"):
            answer = fetch(port, path)
            assert answer is not None and answer[0] == 200
            assert answer[1] == der(server[0])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        errors = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdin is not None:
            proc.stdin.close()
    assert f"key_file: {server[1]}: protected by a passphrase" in errors
    assert "keeping the web config read before" in errors


def test_a_certificate_swapped_with_a_fifo_again_and_again_never_blocks_the_accept_loop(
    tmp_path: Path,
) -> None:
    """The certificate was checked, then OpenSSL opened the same path again on the accept
    thread: a FIFO swapped in between blocked it for good (4 of 4 runs). It is read once now,
    and loaded from those bytes."""
    server = self_signed(tmp_path, "server")
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(server))
    pem = server[0].read_bytes()
    stop = threading.Event()

    def swap() -> None:
        for turn in itertools.count():
            if stop.is_set():
                return
            fresh = tmp_path / f"swap-{turn % 2}"
            with contextlib.suppress(FileNotFoundError):
                fresh.unlink()
            if turn % 2:
                os.mkfifo(fresh)
            else:
                fresh.write_bytes(pem)
            os.replace(fresh, server[0])

    with serving(web) as port:
        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            until = time.monotonic() + 3
            while time.monotonic() < until:
                fetch(port, "/healthz")
        finally:
            stop.set()
            swapper.join()
        replace(server[0], pem.decode())
        answer = fetch(port, "/healthz")
        assert answer is not None and answer[0] == 200


def test_a_costly_bcrypt_hash_read_again_does_not_stall_the_accept_loop(tmp_path: Path) -> None:
    """A new file with a cost-16 hash blocked the TLS accept loop for 13.6 s while its
    stand-in hash was made; it is read on a thread of its own now, waited for 1 s at most."""
    server = self_signed(tmp_path, "server")
    web = tmp_path / "web.yml"
    web.write_text(tls_yaml(server))
    costly = "$2b$14$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"
    with serving(web) as port:
        replace(web, tls_yaml(server, f"basic_auth_users:\n  alice: '{costly}'\n"))
        started = time.monotonic()
        answer = fetch(port, "/healthz")
        assert answer is not None and answer[0] == 200
        assert time.monotonic() - started < 2
