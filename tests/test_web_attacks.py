"""Hostile HTTP clients against a real daemon: none of them stalls, blinds or bloats the server.

Each attack is bounded in count and time, and each test asserts that a normal scrape is
answered while the attack runs, and that the attack holds no thread. How fast the answer
comes, and what the attackers cost in CPU, are measured by ``bench/attack_bench.py``: a
loaded machine makes wall-clock budgets in a test fail for the machine, not the code.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry

from exporter.exposition.connections import Limits
from exporter.exposition.server import WebServer, make_app
from exporter.exposition.webconfig import load_web_config
from tests.support.daemon import run_daemon
from tests.support.proc import MEMORY_LIMIT_MIB, SCRAPE_TIMEOUT, rss_mib, threads
from tests.support.tools import require_tool

pytestmark = pytest.mark.e2e


def get(
    url: str,
    headers: dict[str, str] | None = None,
    tls: bool = False,
    timeout: float = SCRAPE_TIMEOUT,
) -> int:
    context = ssl._create_unverified_context() if tls else None
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@contextlib.contextmanager
def idle_connections(
    port: int, count: int, host: str = "127.0.0.1"
) -> Iterator[list[socket.socket]]:
    """``count`` TCP connections that send nothing unless the test makes them."""
    socks = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection((host, port), timeout=5))
        yield socks
    finally:
        for sock in socks:
            sock.close()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x"]
    subprocess.run(
        [require_tool("openssl"), *request, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def tls_daemon_args(tmp_path: Path) -> list[str]:
    """``specwatch run`` flags for TLS with a fresh self-signed certificate and an empty log."""
    cert, key = self_signed(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    log = tmp_path / "server.log"
    log.touch()
    return ["--log-file", str(log), "--web-config", str(web)]


def tls_healthy(port: int) -> bool:
    try:
        return get(f"https://127.0.0.1:{port}/healthz", tls=True) == 200
    except (urllib.error.URLError, OSError):
        return False


def test_an_idle_connection_does_not_block_a_tls_server_nor_its_shutdown(
    tmp_path: Path, port: int
) -> None:
    args = tls_daemon_args(tmp_path)
    with run_daemon(args, port, ready=tls_healthy) as daemon, idle_connections(port, 5):
        for path in ("/healthz", "/metrics"):
            assert get(f"https://127.0.0.1:{port}{path}", tls=True) == 200
        # run_daemon insists on a clean exit after SIGTERM; the idle sockets are still open.
        proc = daemon.proc
    assert proc.returncode == 0


def test_tls_clients_stalling_in_the_handshake_or_the_head_hold_no_thread(
    tmp_path: Path, port: int
) -> None:
    """Over TLS the handshake and head were read in workers: 64 slow clients took them all."""
    args = tls_daemon_args(tmp_path)
    context = ssl._create_unverified_context()
    with run_daemon(args, port, ready=tls_healthy) as daemon:
        before = threads(daemon.proc.pid)
        with idle_connections(port, 150) as slow:
            secured = []
            for number, sock in enumerate(slow):
                if number % 2:  # half stop inside the handshake, after a partial hello
                    sock.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
                else:  # half finish it and trickle a head that never ends
                    secure = context.wrap_socket(sock, server_hostname="x")
                    secure.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    secured.append(secure)
            for _ in range(5):
                assert get(f"https://127.0.0.1:{port}/healthz", tls=True) == 200
                assert get(f"https://127.0.0.1:{port}/metrics", tls=True) == 200
            assert threads(daemon.proc.pid) <= before + 2


def test_idle_plain_connections_cost_neither_threads_nor_memory_nor_scrapes(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as daemon:
        before = threads(daemon.proc.pid)
        with idle_connections(port, 1000):
            assert get(f"http://127.0.0.1:{port}/metrics") == 200
            assert threads(daemon.proc.pid) <= before + Limits().max_workers
            assert rss_mib(daemon.proc.pid) < MEMORY_LIMIT_MIB


def test_clients_trickling_their_requests_neither_starve_scrapes_nor_pile_up_threads(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    """128 of them failed every kubelet probe (2 s timeout), 200 every scrape (10 s): each held
    a worker while its head trickled in. Heads are now read by the accept loop itself."""
    with run_daemon(["--log-file", str(log)], port) as daemon:
        before = threads(daemon.proc.pid)
        with idle_connections(port, 200) as slow:
            for sock in slow:
                sock.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the end
            for _ in range(5):
                assert get(f"http://127.0.0.1:{port}/healthz") == 200
                assert get(f"http://127.0.0.1:{port}/metrics") == 200
            assert threads(daemon.proc.pid) <= before + 2  # no worker is held by them


def serve_plain(limits: Limits) -> WebServer:
    server = WebServer("127.0.0.1", 0, make_app(CollectorRegistry(), lambda: b""), limits=limits)
    server.start()
    return server


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() -> None:
    server = serve_plain(Limits(idle_timeout=0.3))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=SCRAPE_TIMEOUT) as sock:
            assert sock.recv(1) == b""  # closed by the server: our timeout would raise
    finally:
        server.stop()


def test_a_client_trickling_its_request_is_cut_off_at_the_deadline() -> None:
    """Each byte comes well within the I/O timeout; the head as a whole does not."""
    server = serve_plain(Limits(io_timeout=60, head_timeout=0.5))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=SCRAPE_TIMEOUT) as sock:
            try:
                for byte in b"GET /metrics HTTP/1.1\r\n":
                    sock.send(bytes([byte]))
                    time.sleep(0.1)  # the trickle is the attack
                closed = sock.recv(1) == b""  # waiting on for the I/O timeout raises instead
            except (ConnectionResetError, BrokenPipeError):
                closed = True  # reset by the server is as good as closed
            assert closed
    finally:
        server.stop()


def test_the_oldest_idle_connection_makes_room_when_too_many_wait() -> None:
    server = serve_plain(Limits(max_waiting=3))
    try:
        oldest = socket.create_connection(("127.0.0.1", server.port), timeout=SCRAPE_TIMEOUT)
        with oldest, idle_connections(server.port, 3):
            assert oldest.recv(1) == b""
            assert get(f"http://127.0.0.1:{server.port}/healthz") == 200
    finally:
        server.stop()


def test_a_connection_closed_to_make_room_in_the_same_wake_up_does_not_kill_the_accept_loop() -> (
    None
):
    """530 clients trickling heads a byte every 0.5 s killed the accept thread within 0.5 s
    (KeyError: the oldest, closed to make room for a newer one, was then read in the same
    select batch): /metrics and /healthz never answered again. Here with room for 8."""
    server = serve_plain(Limits(max_waiting=8))
    clients: list[socket.socket] = []
    try:
        until = time.monotonic() + 2
        while time.monotonic() < until:
            with contextlib.suppress(OSError):
                clients.append(socket.create_connection(("127.0.0.1", server.port), timeout=1))
            for sock in clients[-20:]:
                with contextlib.suppress(OSError):
                    sock.send(b"G")
            for sock in clients[:-40]:
                sock.close()
            clients = clients[-40:]
            time.sleep(0.005)
        assert get(f"http://127.0.0.1:{server.port}/healthz") == 200
    finally:
        for sock in clients:
            sock.close()
        server.stop()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_an_unknown_user_costs_the_password_check_a_known_one_does(tmp_path: Path) -> None:
    """CPU time, not wall time, of the check: the same on a loaded machine. Without a stand-in
    hash an unknown user was refused at once, telling a guesser which users exist."""
    web = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    config = load_web_config(web)

    def refused_cpu_seconds(user: str, password: str) -> float:
        statuses: list[str] = []
        environ = {"HTTP_AUTHORIZATION": basic(user, password)["Authorization"]}
        started = time.thread_time()
        config.guard(lambda *_: [b""], environ, lambda status, *_: statuses.append(status))
        used = time.thread_time() - started
        assert statuses == ["401 Unauthorized"]
        return used

    known = min(refused_cpu_seconds("prometheus", f"guess{i}") for i in range(3))
    unknown = min(refused_cpu_seconds(f"nobody{i}", f"guess{i}") for i in range(3))
    assert unknown > 0.5 * known, (known, unknown)


def test_password_guessers_neither_lock_out_nor_starve_the_right_password(
    tmp_path: Path, port: int
) -> None:
    """Guesses wait for one another; the scraper's password, once checked, is not checked
    again. What the guessers cost in CPU is measured by ``bench/attack_bench.py``."""
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    log = tmp_path / "server.log"
    log.touch()
    url = f"http://127.0.0.1:{port}/metrics"
    with run_daemon(["--log-file", str(log), "--web-config", str(web)], port):
        assert get(url, basic("prometheus", "s3cret")) == 200
        stop, refused = threading.Event(), threading.Semaphore(0)

        def guess(worker: int) -> None:
            for i in range(1000):
                if stop.is_set():
                    return
                with contextlib.suppress(OSError):  # a guess may wait its turn past our timeout
                    if get(url, basic("prometheus", f"w{worker}-{i}")) == 401:
                        refused.release()

        guessers = [threading.Thread(target=guess, args=(n,)) for n in range(8)]
        for thread in guessers:
            thread.start()
        try:
            for _ in range(8):  # the guessers are being refused, not waiting to start
                assert refused.acquire(timeout=SCRAPE_TIMEOUT)
            for _ in range(3):
                assert get(url, basic("prometheus", "s3cret")) == 200
        finally:
            stop.set()
            for thread in guessers:
                thread.join(timeout=SCRAPE_TIMEOUT)


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_listens_on_ipv6_loopback(tmp_path: Path) -> None:
    if not ipv6_loopback() and os.environ.get("CI") != "true":
        pytest.skip("this machine has no IPv6 loopback")
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "server.log"
    log.touch()

    def ready(port: int) -> bool:
        try:
            return get(f"http://[::1]:{port}/healthz") == 200
        except (urllib.error.URLError, OSError):
            return False

    with run_daemon(["--log-file", str(log)], port, ready=ready, host="::1"):
        assert get(f"http://[::1]:{port}/metrics") == 200
