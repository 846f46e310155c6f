"""A hostile upstream against a real daemon: it costs its own ``up``, never the exporter.

Each attack is bounded in time and size; each test asserts that specwatch's own /metrics
answers within its budget and that nothing from a failed scrape is shown as current.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from exporter.exposition.families import LABEL_VALUE_MAX
from tests.support.daemon import RunningDaemon, config_file, run_daemon
from tests.support.fake_sglang import (
    FakeSGLang,
    Route,
    decoding,
    exposition,
    fake_sglang,
    server_info,
)
from tests.support.metrics import Scrape
from tests.support.proc import MEMORY_LIMIT_MIB, SCRAPE_TIMEOUT, rss_mib
from tests.support.realprom import running_prometheus
from tests.support.tools import require_tool, unprivileged
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

TARGET = {"target": "sglang-0"}


def answered_scrape(daemon: RunningDaemon) -> Scrape:
    """/metrics, answered within a scrape timeout while the attack runs (how fast: bench/)."""
    url = f"http://127.0.0.1:{daemon.port}/metrics"
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as resp:
        return Scrape(resp.read().decode())


def up(scrape: Scrape, endpoint: str) -> float | None:
    return scrape.value("specwatch_upstream_up", **TARGET, endpoint=endpoint)


def assert_metrics_down(daemon: RunningDaemon, reason: str) -> None:
    """Within 8 s the scrape of /metrics fails for ``reason``: up 0 and its values gone."""
    errors = {**TARGET, "endpoint": "metrics", "reason": reason}
    daemon.wait_metric("specwatch_upstream_scrape_errors_total", lambda v: bool(v), 8, **errors)
    scrape = answered_scrape(daemon)
    assert up(scrape, "metrics") == 0
    assert scrape.value("specwatch_running_requests", **TARGET) is None


@contextmanager
def scraping(
    tmp_path: Path, port: int, body: str
) -> Iterator[tuple[FakeSGLang, RunningDaemon, Scrape]]:
    """A daemon scraping a server that answers ``body``, and its first scrape with it up."""
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=body.encode())
        config = config_file(tmp_path, server.url, server_info=False)
        with run_daemon(["--config", str(config)], port) as daemon:
            up = {**TARGET, "endpoint": "metrics"}
            yield (
                server,
                daemon,
                daemon.wait_metric("specwatch_upstream_up", lambda v: v == 1, **up),
            )


@contextmanager
def raw_server(answer: Callable[[socket.socket, bytes], None]) -> Iterator[str]:
    """A loopback server that hands each connection to ``answer``, for what http.server
    cannot be made to send (trickled headers, foreign redirects)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=talk, args=(conn,), daemon=True).start()

    def talk(conn: socket.socket) -> None:
        # The client giving up (OSError) is what an attack is for.
        with conn, contextlib.suppress(OSError):
            answer(conn, conn.recv(65536))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_an_upstream_trickling_its_headers_goes_down_with_no_values(
    tmp_path: Path, port: int
) -> None:
    trickle = threading.Event()
    body = exposition().encode()

    def answer(conn: socket.socket, request: bytes) -> None:
        if not trickle.is_set():
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            conn.sendall(head + body)
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(300):  # a header line that never ends, one byte every 0.1 s
            conn.sendall(b"X")
            time.sleep(0.1)

    with raw_server(answer) as url:
        config = config_file(tmp_path, url, server_info=False)
        with run_daemon(["--config", str(config)], port) as daemon:
            daemon.wait_metric("specwatch_running_requests", lambda v: v == 61, **TARGET)
            trickle.set()
            assert_metrics_down(daemon, "timeout")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_draft_path_from_server_info_never_stalls_or_bloats_a_scrape(
    tmp_path: Path, port: int, special: str
) -> None:
    if special == "fifo":
        draft = tmp_path / "draft-fifo"
        os.mkfifo(draft)
    else:
        draft = Path(special)
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(live=decoding())
        server.routes["/server_info"] = Route(
            body=server_info(speculative_draft_model_path=str(draft)),
            content_type="application/json",
        )
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as daemon:
            daemon.wait_metric("specwatch_running_requests", lambda v: v == 61, **TARGET)
            labels = {**TARGET, "endpoint": "server_info"}
            duration = "specwatch_upstream_scrape_duration_seconds"
            durations = [answered_scrape(daemon).value(duration, **labels)]
            for _ in range(3):  # three more reads of /server_info, and so of the draft path
                scrape = daemon.wait_metric(duration, lambda v: v != durations[-1], **labels)
                durations.append(scrape.value(duration, **labels))
                assert up(scrape, "server_info") == 1
                assert scrape.value("specwatch_running_requests", **TARGET) == 61
            assert rss_mib(daemon.proc.pid) < MEMORY_LIMIT_MIB


def _unreadable_draft(tmp_path: Path) -> Path:
    """A draft folder behind a directory only another user may enter (a model under
    ``/root`` while specwatch runs as a service user)."""
    private = tmp_path / "private"
    (private / "draft").mkdir(parents=True)
    (private / "draft" / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    private.chmod(0o700)
    os.chown(private, 65534, 65534)
    return private / "draft"


@pytest.mark.parametrize("privileged", [True, False], ids=["root", "unprivileged"])
@pytest.mark.parametrize("path", ["component_too_long", "behind_private_dir"])
def test_a_draft_path_the_file_system_refuses_costs_nothing_but_a_count(
    tmp_path: Path, port: int, privileged: bool, path: str
) -> None:
    """Path.exists() raised ENAMETOOLONG or EACCES here, and every scrape failed with no
    ``upstream_up`` series at all."""
    if os.geteuid() != 0:
        pytest.skip("changing a folder's owner needs root")
    prefix = [] if privileged else unprivileged()
    draft = tmp_path / ("d" * 300) if path == "component_too_long" else _unreadable_draft(tmp_path)
    refused = path == "component_too_long" or not privileged
    reason = "name_too_long" if path == "component_too_long" else "permission"
    tmp_path.chmod(0o755)  # the daemon's own config must stay readable
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        server.routes["/server_info"] = Route(
            body=server_info(speculative_draft_model_path=str(draft)),
            content_type="application/json",
        )
        config = ["--config", str(config_file(tmp_path, server.url))]
        with run_daemon(config, port, prefix=prefix) as daemon:
            daemon.wait_metric("specwatch_running_requests", lambda v: v == 61, **TARGET)
            scrape = daemon.wait_metric(
                "specwatch_speculative_info", lambda v: v == 1, **TARGET, algorithm="EAGLE"
            )
            for _ in range(3):
                scrape = answered_scrape(daemon)
                assert up(scrape, "server_info") == 1
                assert up(scrape, "metrics") == 1
            errors = scrape.value("specwatch_draft_config_errors_total", reason=reason)
            assert errors == (1 if refused else 0)
            arch = "" if refused else "LlamaForCausalLMEagle3"
            info = {**TARGET, "draft_architecture": arch}
            assert scrape.value("specwatch_speculative_info", **info) == 1
        assert "Traceback" not in daemon.logged


def test_server_info_nested_too_deep_is_garbage_not_a_traceback(tmp_path: Path, port: int) -> None:
    depth = 100_000
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        server.routes["/server_info"] = Route(
            body=b'{"a":' + b"[" * depth + b"]" * depth + b"}", content_type="application/json"
        )
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as daemon:
            errors = {**TARGET, "endpoint": "server_info", "reason": "garbage"}
            daemon.wait_metric(
                "specwatch_upstream_scrape_errors_total", lambda v: (v or 0) >= 2, **errors
            )
            assert up(answered_scrape(daemon), "server_info") == 0
            shallow = json.dumps({"a": json.loads("[" * 40 + "]" * 40)}).encode()
            server.routes["/server_info"] = Route(body=shallow, content_type="application/json")
            daemon.wait_metric(
                "specwatch_upstream_scrape_errors_total", lambda v: (v or 0) >= 3, **errors
            )
        stderr = daemon.logged
    assert "Traceback" not in stderr


def test_an_upstream_with_too_many_series_is_refused_within_the_memory_limit(
    tmp_path: Path, port: int
) -> None:
    lines = [f'sglang:num_running_reqs{{dp_rank="{i}"}} 1' for i in range(150_000)]
    body = ("\n".join(lines) + "\n").encode()
    assert len(body) < 10 * 1024 * 1024  # inside the byte cap: only the series count is hostile
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=body)
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as daemon:
            errors = {**TARGET, "endpoint": "metrics", "reason": "too_large"}
            daemon.wait_metric(
                "specwatch_upstream_scrape_errors_total", lambda v: (v or 0) >= 3, **errors
            )
            scrape = answered_scrape(daemon)
            assert up(scrape, "metrics") == 0
            assert scrape.value("specwatch_running_requests", **TARGET) is None
            assert rss_mib(daemon.proc.pid) < MEMORY_LIMIT_MIB


@pytest.mark.parametrize(
    "content_type", ["text/plain; version=0.0.4", "application/openmetrics-text; version=1.0.0"]
)
def test_a_line_of_countless_labels_is_refused_before_parsing_not_parsed_for_minutes(
    tmp_path: Path, port: int, content_type: str
) -> None:
    # prometheus-client parses a line's labels in time quadratic in their number: this 3 MB
    # line held a scraper thread at full CPU for minutes, up 1 and the old values shown.
    labels = ",".join(f'l{i}="v"' for i in range(300_000))
    body = f"sglang:num_running_reqs{{{labels}}} 1\n# EOF\n".encode()
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as daemon:
            daemon.wait_metric("specwatch_running_requests", lambda v: v == 61, **TARGET)
            server.routes["/metrics"] = Route(body=body, content_type=content_type)
            assert_metrics_down(daemon, "too_large")


def test_redirects_are_followed_on_the_same_server_only(tmp_path: Path, port: int) -> None:
    with fake_sglang() as other:
        other.routes["/metrics"] = Route(body=exposition().encode())

        def answer(conn: socket.socket, request: bytes) -> None:
            conn.sendall(
                f"HTTP/1.1 302 Found\r\nLocation: {other.url}/metrics\r\n"
                "Content-Length: 0\r\n\r\n".encode()
            )

        with raw_server(answer) as url:
            config = config_file(tmp_path, url, server_info=False)
            with run_daemon(["--config", str(config)], port) as daemon:
                errors = {**TARGET, "endpoint": "metrics", "reason": "http"}
                daemon.wait_metric(
                    "specwatch_upstream_scrape_errors_total", lambda v: bool(v), **errors
                )
                scrape = answered_scrape(daemon)
                assert up(scrape, "metrics") == 0
                assert scrape.value("specwatch_running_requests", **TARGET) is None
        assert other.seen_auth == []  # the other host was never asked


def test_a_redirect_on_the_same_server_is_followed(tmp_path: Path, port: int) -> None:
    body = exposition().encode()

    def answer(conn: socket.socket, request: bytes) -> None:
        if request.startswith(b"GET /metrics/ "):
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            conn.sendall(head + body)
        else:  # as a mounted metrics app answers /metrics
            conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /metrics/\r\n\r\n")

    with raw_server(answer) as url:
        config = config_file(tmp_path, url, server_info=False)
        with run_daemon(["--config", str(config)], port) as daemon:
            daemon.wait_metric("specwatch_running_requests", lambda v: v == 61, **TARGET)


def test_label_values_the_server_names_are_cut_and_prometheus_takes_the_scrape(
    tmp_path: Path, port: int
) -> None:
    """A 1 MB ``speculative_algorithm`` was exported as a 1 MB label value; a lone surrogate
    in a JSON string cannot be encoded at all."""
    huge = "EAGLE3" + "X" * 1_000_000
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        server.routes["/server_info"] = Route(
            body=server_info(
                speculative_algorithm=huge, speculative_draft_model_path="org/draft\ud800"
            ),
            content_type="application/json",
        )
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as daemon:
            scrape = daemon.wait_metric(
                "specwatch_upstream_up", lambda v: v == 1, endpoint="server_info", **TARGET
            )
            (info,) = [s for s in scrape.samples if s.name == "specwatch_speculative_info"]
            assert len(info.labels["algorithm"]) == LABEL_VALUE_MAX
            assert info.labels["algorithm"].startswith("EAGLE3XXX")
            assert info.labels["draft_model"] == "org/draft?"
            assert scrape.value("specwatch_draft_config_errors_total", reason="bad_name") == 1
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            assert len(body) < 100_000
            promtool = require_tool("promtool")
            checked = subprocess.run(
                [promtool, "check", "metrics"], input=body, capture_output=True, timeout=60
            )
            assert checked.returncode == 0, checked.stdout + checked.stderr
            with running_prometheus(tmp_path, [f"127.0.0.1:{port}"]) as prometheus:
                (target,) = prometheus.wait_for(
                    lambda: [t for t in prometheus.targets() if t["health"] == "up"], 30
                )
                assert target["lastError"] == ""
                (series,) = prometheus.query("specwatch_speculative_info")
                assert series["metric"]["algorithm"] == info.labels["algorithm"]


def test_impossible_upstream_values_are_dropped_and_counted(tmp_path: Path, port: int) -> None:
    """-Inf fired the collapse alert, NaN silenced it, a 0-1 usage read 332,667, and a
    series given twice was summed as if two ranks."""
    body = exposition()
    rank0 = 'dp_rank="0",engine_type="unified",model_name="kimi",tp_rank="0"'
    body = body.replace(
        f"sglang:spec_accept_length{{{rank0}}} 2.41", f"sglang:spec_accept_length{{{rank0}}} -Inf"
    )
    body = body.replace(" 0.35\n", " 332667\n")  # rank 1's token usage
    body += f"sglang:num_queue_reqs{{{rank0}}} 7\n"  # rank 0's queue, a second time
    with scraping(tmp_path, port, body) as (server, daemon, scrape):
        assert scrape.value("specwatch_accept_length", **TARGET) == 2.47  # rank 1 alone
        assert scrape.value("specwatch_token_usage_ratio", **TARGET) == 0.21
        assert scrape.value("specwatch_queued_requests", **TARGET) == 2  # rank 1's alone
        assert scrape.value("specwatch_running_requests", **TARGET) == 61
        dropped = {
            reason: scrape.value(
                "specwatch_upstream_dropped_samples_total", **TARGET, reason=reason
            )
            for reason in ("non_finite", "negative", "out_of_range", "duplicate")
        }
        assert dropped == {"non_finite": 1, "negative": 0, "out_of_range": 1, "duplicate": 2}
        server.routes["/metrics"] = Route(
            body=exposition().replace(" 2.47\n", " NaN\n").replace(" 2.41\n", " NaN\n").encode()
        )
        scrape = daemon.wait_metric(
            "specwatch_upstream_dropped_samples_total",
            lambda v: v == 3,
            **TARGET,
            reason="non_finite",
        )
        assert scrape.value("specwatch_accept_length", **TARGET) is None
        assert "specwatch_accept_ratio" not in scrape.names()


def test_finite_upstream_counts_too_large_to_sum_are_dropped_not_exported_as_inf(
    tmp_path: Path, port: int
) -> None:
    """A rank running 1.7e308 requests, two at 1.7e308 tok/s: every sample finite, the one
    exported as current, the throughput's sum as +Inf."""
    body = exposition().replace('"} 31\n', '"} 1.7e308\n').replace(" 600.5", " 1.7e308")
    with scraping(tmp_path, port, body) as (_, _, scrape):
        assert scrape.value("specwatch_running_requests", **TARGET) == 30  # rank 1 alone
        assert scrape.value("specwatch_gen_throughput_tokens_per_second", **TARGET) is None
        assert (
            scrape.value(
                "specwatch_upstream_dropped_samples_total", **TARGET, reason="out_of_range"
            )
            == 3
        )
        assert all(math.isfinite(sample.value) for sample in scrape.samples)


@contextmanager
def silent_dns() -> Iterator[str]:
    """The address of a UDP socket on port 53 that never answers, a loopback address of its own
    (resolv.conf names no port), so two test runs on one machine do not both ask for one."""
    for _ in range(50):
        octets = (random.randrange(1, 255), random.randrange(256), random.randrange(2, 255))
        address = "127.{}.{}.{}".format(*octets)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as dns:
            try:
                dns.bind((address, 53))
            except OSError:
                continue
            yield address
            return
    raise AssertionError("no loopback address had port 53 free")


@contextmanager
def silent_resolver(tmp_path: Path) -> Iterator[list[str]]:
    """A command prefix whose process resolves names through a DNS server that never
    answers (``silent_dns``), in a mount namespace of its own so the machine's resolv.conf is
    left alone."""
    with silent_dns() as address:
        resolv = tmp_path / "resolv.conf"
        resolv.write_text(f"nameserver {address}\noptions timeout:5 attempts:2\n")
        script = f'mount --bind {resolv} /etc/resolv.conf && exec "$@"'
        yield [
            require_tool("unshare"),
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ]


def test_a_name_whose_dns_never_answers_costs_the_scrape_deadline_not_ten_seconds(
    tmp_path: Path, port: int
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a mount namespace and port 53 need root")
    config = tmp_path / "specwatch.yaml"
    config.write_text(
        "targets:\n  - name: sglang-0\n    metrics_url: http://sglang.dns-silent.test:30000/metrics\n"
        "    scrape_interval: 2\n"
    )
    with (
        silent_resolver(tmp_path) as prefix,
        run_daemon(["--config", str(config)], port, prefix=prefix) as daemon,
    ):
        labels = {**TARGET, "endpoint": "metrics"}
        scrape = daemon.wait_metric(
            "specwatch_upstream_scrape_errors_total",
            lambda v: (v or 0) >= 2,
            15,
            **labels,
            reason="timeout",
        )
        assert up(scrape, "metrics") == 0
        duration = scrape.value("specwatch_upstream_scrape_duration_seconds", **labels)
        # The 2 s deadline, not the resolver's 5 s a try: a loaded machine may add to the 2 s,
        # never make a lookup the deadline cut short last a whole try.
        assert duration is not None and duration < 5


def dead_timeouts(scrape: Scrape) -> list[float]:
    """Scrapes timed out so far of each of the 20 targets named ``dead-N``."""
    errors = "specwatch_upstream_scrape_errors_total"
    labels = {"endpoint": "metrics", "reason": "timeout"}
    return [scrape.value(errors, target=f"dead-{i}", **labels) or 0 for i in range(20)]


def test_names_whose_dns_never_answers_leave_a_healthy_target_its_lookups(
    tmp_path: Path, port: int
) -> None:
    """20 targets whose DNS never answered kept the 8 shared lookups busy, and a healthy
    target named ``localhost`` went to ``upstream_up 0`` for want of one."""
    if os.geteuid() != 0:
        pytest.skip("a mount namespace and port 53 need root")
    dead = "".join(
        f"  - name: dead-{i}\n    metrics_url: http://sglang-{i}.dns-silent.test:30000/metrics\n"
        "    scrape_interval: 1\n"
        for i in range(20)
    )
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        url = server.url.replace("127.0.0.1", "localhost")
        config = tmp_path / "specwatch.yaml"
        config.write_text(
            f"targets:\n  - name: sglang-0\n    metrics_url: {url}/metrics\n"
            f"    scrape_interval: 1\n{dead}"
        )
        with (
            silent_resolver(tmp_path) as prefix,
            run_daemon(["--config", str(config)], port, prefix=prefix) as daemon,
        ):
            labels = {**TARGET, "endpoint": "metrics"}
            daemon.wait_metric("specwatch_upstream_up", lambda v: v == 1, 30, **labels)
            ok = daemon.scrape().value(
                "specwatch_upstream_scrape_errors_total", **labels, reason="timeout"
            )
            asked, timed_out = len(server.seen_auth), dead_timeouts(daemon.scrape())

            def lookups_busy_and_scraped() -> Scrape | None:
                """Every dead name timed out three more times (each lookup hangs for 10 s,
                so all 8 stay taken), and the healthy server was scraped five more times."""
                scrape = daemon.scrape()
                more = [
                    n - before for n, before in zip(dead_timeouts(scrape), timed_out, strict=True)
                ]
                enough = min(more) >= 3 and len(server.seen_auth) >= asked + 5
                return scrape if enough else None

            scrape = wait_for(lookups_busy_and_scraped, 60, what="dead lookups and live scrapes")
            errors = {
                sample.labels["reason"]: sample.value
                for sample in scrape.samples
                if sample.name == "specwatch_upstream_scrape_errors_total"
                and sample.labels.get("target") == "sglang-0"
            }
            assert up(scrape, "metrics") == 1, errors
            assert (
                scrape.value("specwatch_upstream_scrape_errors_total", **labels, reason="timeout")
                == ok
            )
