"""The upstream scraper against real HTTP servers on loopback, healthy and broken."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.sources.upstream import MAX_BODY_BYTES, UpstreamScraper
from tests.conftest import free_port

API_KEY = "sk-live-upstream-0123456789"


def exposition(sep: str = ":", graph: float = 1000.0, eager: float = 0.0) -> str:
    """Two DP ranks of SGLang's scheduler gauges (Feb 2026 names and help texts)."""
    ranks = ('dp_rank="0",engine_type="unified",model_name="kimi",tp_rank="0"', "31", "2.41")
    ranks2 = ('dp_rank="1",engine_type="unified",model_name="kimi",tp_rank="4"', "30", "2.47")
    out = []
    gauges = [
        ("num_running_reqs", "The number of running requests.", lambda r: r[1]),
        ("num_queue_reqs", "The number of requests in the waiting queue.", lambda r: "2"),
        ("gen_throughput", "The generation throughput (token/s).", lambda r: "600.5"),
        ("token_usage", "The token usage.", lambda r: "0.21" if r is ranks else "0.35"),
        ("spec_accept_length", "The average acceptance length.", lambda r: r[2]),
        ("spec_accept_rate", "The average acceptance rate.", lambda r: "0.6"),
    ]
    for name, doc, value in gauges:
        out += [f"# HELP sglang{sep}{name} {doc}", f"# TYPE sglang{sep}{name} gauge"]
        out += [f"sglang{sep}{name}{{{r[0]}}} {value(r)}" for r in (ranks, ranks2)]
    passes = f"sglang{sep}cuda_graph_passes_total"
    out += [
        f"# HELP {passes} Total number of forward passes categorized by CUDA graph.",
        f"# TYPE {passes} counter",
        f'{passes}{{mode="decode_cuda_graph",model_name="kimi"}} {graph}',
        f'{passes}{{mode="decode_none",model_name="kimi"}} {eager}',
    ]
    return "\n".join(out) + "\n"


def server_info(**overrides: object) -> bytes:
    args = {
        "model_path": "moonshotai/Kimi-K2.5",
        "api_key": API_KEY,
        "admin_api_key": API_KEY + "-admin",
        "speculative_algorithm": "EAGLE",
        "speculative_draft_model_path": "AQ-MedAI/Kimi-K2-Instruct-eagle3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "disable_cuda_graph": False,
        "cuda_graph_max_bs": 160,
        "log_level": "info",
        "max_running_requests": None,
        "enable_metrics": True,
        **overrides,
    }
    state = {**args, "effective_max_running_requests_per_dp": 48, "last_gen_throughput": 600.5}
    return json.dumps({**args, "status": "ready", "internal_states": [state]}).encode()


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"
    delay: float = 0.0
    trickle: float = 0.0  # seconds between single bytes of the body
    stream_bytes: int = 0  # a generated body of this size, sent without Content-Length
    need_token: bool = False


@dataclass
class FakeSGLang:
    """A loopback HTTP server whose routes a test sets up; records the headers it saw."""

    url: str
    routes: dict[str, Route] = field(default_factory=dict)
    seen_auth: list[str | None] = field(default_factory=list)


@contextmanager
def fake_sglang() -> Iterator[FakeSGLang]:
    """A loopback HTTP server playing SGLang, on its own thread, until the block ends."""
    fake: FakeSGLang

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            route = fake.routes.get(self.path)
            auth = self.headers.get("Authorization")
            fake.seen_auth.append(auth)
            if route is None:
                self.send_error(404)
                return
            if route.need_token and auth != f"Bearer {API_KEY}":
                self.send_error(401)
                return
            time.sleep(route.delay)
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            if not route.stream_bytes and not route.trickle:
                self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._body(route)

        def _body(self, route: Route) -> None:
            if route.stream_bytes:
                chunk = b"# filler comment line to make the body huge\n" * 1024
                for _ in range(route.stream_bytes // len(chunk) + 1):
                    self.wfile.write(chunk)
            elif route.trickle:
                for byte in route.body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(route.trickle)
            else:
                self.wfile.write(route.body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake = FakeSGLang(f"http://127.0.0.1:{server.server_port}")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def sglang() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def scraper(fake: FakeSGLang, **kwargs: object) -> UpstreamScraper:
    kwargs.setdefault("timeout", 2.0)
    return UpstreamScraper(f"{fake.url}/metrics", f"{fake.url}/server_info", **kwargs)


@pytest.mark.parametrize("sep", [":", "_"])
def test_healthy_server_values_in_both_name_spellings(sglang: FakeSGLang, sep: str) -> None:
    sglang.routes["/metrics"] = Route(body=exposition(sep).encode())
    sglang.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
    snap = scraper(sglang).scrape_once()
    assert snap.endpoints["metrics"].up and snap.endpoints["server_info"].up
    values = snap.values
    assert values is not None
    assert values.running_requests == 61  # 31 + 30, one series per DP rank
    assert values.queued_requests == 4
    assert values.gen_throughput == pytest.approx(1201.0)
    assert values.token_usage == pytest.approx(0.35)  # the fullest rank
    assert values.accept_length == pytest.approx(2.44)
    assert values.cuda_graph_share is None  # needs two scrapes
    assert snap.metrics_endpoint == "ok"
    assert snap.errors == {}
    assert snap.config is not None
    assert snap.config.algorithm == "EAGLE"
    assert snap.config.max_running_requests == 48


def test_openmetrics_exposition_is_parsed_with_its_own_parser(sglang: FakeSGLang) -> None:
    # OpenMetrics names a counter family without its _total suffix and ends with # EOF.
    family = "sglang_cuda_graph_passes"
    body = exposition("_").replace(f"{family}_total ", f"{family} ") + "# EOF\n"
    content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    sglang.routes["/metrics"] = Route(body=body.encode(), content_type=content_type)
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=2).scrape_once()
    assert snap.endpoints["metrics"].up
    assert snap.values is not None and snap.values.running_requests == 61


@pytest.mark.parametrize(
    ("before", "after", "share"),
    [
        ((1000, 0), (1300, 100), 300 / 400),  # 300 graph passes and 100 eager since the last
        ((1000, 50), (10, 0), None),  # counter reset: the server restarted
        ((1000, 50), (1000, 50), None),  # idle: no decode pass at all
    ],
)
def test_cuda_graph_share_comes_from_the_counter_increase(
    sglang: FakeSGLang,
    before: tuple[float, float],
    after: tuple[float, float],
    share: float | None,
) -> None:
    scrape = scraper(sglang)
    snaps = []
    for graph, eager in (before, after):
        sglang.routes["/metrics"] = Route(body=exposition(graph=graph, eager=eager).encode())
        snaps.append(scrape.scrape_once())
    assert snaps[0].values is not None and snaps[0].values.cuda_graph_share is None
    assert snaps[1].values is not None
    assert snaps[1].values.cuda_graph_share == (None if share is None else pytest.approx(share))


def test_non_speculative_server_zero_gauges_are_absent(sglang: FakeSGLang) -> None:
    body = exposition().replace(" 2.41", " 0.0").replace(" 2.47", " 0.0").replace(" 0.6", " 0")
    sglang.routes["/metrics"] = Route(body=body.encode())
    snap = scraper(sglang).scrape_once()
    assert snap.values is not None
    assert snap.values.accept_length is None


def test_secrets_of_server_info_are_nowhere_in_the_snapshot(sglang: FakeSGLang) -> None:
    sglang.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
    snap = UpstreamScraper(server_info_url=f"{sglang.url}/server_info").scrape_once()
    assert snap.endpoints["server_info"].up
    assert API_KEY not in repr(snap)


def test_old_server_falls_back_to_get_server_info(sglang: FakeSGLang) -> None:
    sglang.routes["/get_server_info"] = Route(body=server_info(), content_type="application/json")
    snap = scraper(sglang).scrape_once()
    assert snap.endpoints["server_info"].up
    assert snap.config is not None and snap.config.num_draft_tokens == 4


def test_bearer_token_from_file_is_sent_and_never_reported(
    sglang: FakeSGLang, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(API_KEY + "\n")
    sglang.routes["/server_info"] = Route(body=server_info(), need_token=True)
    without = scraper(sglang).scrape_once()
    assert not without.endpoints["server_info"].up
    assert without.errors[("server_info", "http")] == 1
    with_token = scraper(sglang, token_file=str(token_file)).scrape_once()
    assert with_token.endpoints["server_info"].up
    assert f"Bearer {API_KEY}" in sglang.seen_auth
    assert API_KEY not in repr(without) + repr(with_token)


def test_bearer_token_from_environment(sglang: FakeSGLang, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_API_KEY", API_KEY)
    sglang.routes["/server_info"] = Route(body=server_info(), need_token=True)
    snap = scraper(sglang, token_env="SGLANG_API_KEY").scrape_once()
    assert snap.endpoints["server_info"].up


def _failed(snap_errors: dict, endpoint: str) -> set[str]:
    return {reason for (ep, reason), count in snap_errors.items() if ep == endpoint and count}


def test_refused_connection() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    snap = UpstreamScraper(f"{url}/metrics", f"{url}/server_info", timeout=1).scrape_once()
    assert not snap.endpoints["metrics"].up and not snap.endpoints["server_info"].up
    assert snap.errors == {("metrics", "refused"): 1, ("server_info", "refused"): 1}
    assert snap.values is None and snap.metrics_endpoint == "down"


def test_slow_server_times_out(sglang: FakeSGLang) -> None:
    sglang.routes["/metrics"] = Route(body=exposition().encode(), delay=2.0)
    started = time.monotonic()
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=0.5).scrape_once()
    assert time.monotonic() - started < 1.5
    assert not snap.endpoints["metrics"].up
    assert _failed(dict(snap.errors), "metrics") == {"timeout"}


def test_trickling_body_hits_the_overall_deadline(sglang: FakeSGLang) -> None:
    sglang.routes["/metrics"] = Route(body=exposition().encode(), trickle=0.05)
    started = time.monotonic()
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=0.5).scrape_once()
    assert time.monotonic() - started < 1.5
    assert _failed(dict(snap.errors), "metrics") == {"timeout"}


def test_http_500(sglang: FakeSGLang) -> None:
    sglang.routes["/metrics"] = Route(status=500, body=b"Internal Server Error")
    snap = scraper(sglang).scrape_once()
    assert snap.errors[("metrics", "http")] == 1
    assert snap.values is None


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        ("/metrics", b"<html><body>Welcome to nginx!</body></html>\n"),
        ("/metrics", b'sglang:num_running_reqs{tp_rank="0" 48\n'),
        ("/server_info", b"<html>not json</html>"),
        ("/server_info", b"[1, 2, 3]"),
    ],
)
def test_garbage_bodies(sglang: FakeSGLang, endpoint: str, body: bytes) -> None:
    sglang.routes[endpoint] = Route(body=body)
    snap = scraper(sglang).scrape_once()
    name = endpoint.strip("/")
    assert not snap.endpoints[name].up
    assert snap.errors[(name, "garbage")] == 1


@pytest.mark.parametrize("declared", [True, False])
def test_oversized_body_is_refused(sglang: FakeSGLang, declared: bool) -> None:
    if declared:
        sglang.routes["/metrics"] = Route(body=b"#" * (MAX_BODY_BYTES + 10))
    else:
        sglang.routes["/metrics"] = Route(stream_bytes=MAX_BODY_BYTES + 1024)
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=10).scrape_once()
    assert snap.errors == {("metrics", "too_large"): 1}


def test_missing_metrics_endpoint_is_reported_as_missing(sglang: FakeSGLang) -> None:
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=2).scrape_once()
    assert snap.metrics_endpoint == "missing"
    assert snap.errors == {("metrics", "http"): 1}


def test_empty_metrics_body_is_up_but_empty(sglang: FakeSGLang) -> None:
    sglang.routes["/metrics"] = Route(body=b"")
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=2).scrape_once()
    assert snap.endpoints["metrics"].up
    assert snap.metrics_endpoint == "empty"


def test_errors_accumulate_and_recovery_clears_up(sglang: FakeSGLang) -> None:
    scrape = scraper(sglang)
    sglang.routes["/metrics"] = Route(status=503)
    scrape.scrape_once()
    scrape.scrape_once()
    sglang.routes["/metrics"] = Route(body=exposition().encode())
    snap = scrape.scrape_once()
    assert snap.endpoints["metrics"].up
    assert snap.errors[("metrics", "http")] == 2


def test_background_thread_never_blocks_readers(sglang: FakeSGLang) -> None:
    sglang.routes["/metrics"] = Route(body=exposition().encode(), delay=1.5)
    scrape = UpstreamScraper(f"{sglang.url}/metrics", interval=0.1, timeout=1.0)
    scrape.start()
    try:
        time.sleep(0.2)  # the first scrape is now waiting on the slow server
        started = time.monotonic()
        for _ in range(100):
            scrape.snapshot()
        assert time.monotonic() - started < 0.05
        deadline = time.monotonic() + 5
        while not scrape.snapshot().errors and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scrape.snapshot().errors[("metrics", "timeout")] >= 1
    finally:
        scrape.stop(timeout=3)


def idle_exposition() -> str:
    """The exposition after SGLang's 30 s idle refresh: running requests and throughput are 0,
    the spec gauges still hold the last decode window's values."""
    body = exposition().replace('"} 31\n', '"} 0\n').replace('"} 30\n', '"} 0\n')
    return body.replace(" 600.5\n", " 0\n")


def test_idle_server_spec_gauges_are_not_shown_as_current(sglang: FakeSGLang) -> None:
    sglang.routes["/metrics"] = Route(body=idle_exposition().encode())
    snap = scraper(sglang).scrape_once()
    assert snap.values is not None
    assert snap.values.running_requests == 0 and snap.values.gen_throughput == 0
    assert snap.values.accept_length is None


def test_an_idle_dp_rank_does_not_skew_the_busy_ranks_accept_length(sglang: FakeSGLang) -> None:
    # Rank 1 (30 running, accept length 2.47) went idle; rank 0 still decodes at 2.41.
    body = exposition().replace('"} 30\n', '"} 0\n')
    sglang.routes["/metrics"] = Route(body=body.encode())
    snap = scraper(sglang).scrape_once()
    assert snap.values is not None
    assert snap.values.running_requests == 31
    assert snap.values.accept_length == pytest.approx(2.41)


def test_unreadable_token_file_is_a_counted_failure_not_a_crash(
    sglang: FakeSGLang, tmp_path: Path
) -> None:
    sglang.routes["/metrics"] = Route(body=exposition().encode(), need_token=True)
    snap = scraper(sglang, token_file=str(tmp_path / "absent-token")).scrape_once()
    assert snap.errors == {("metrics", "other"): 1, ("server_info", "other"): 1}
    assert "bearer token file unreadable" in (snap.endpoints["metrics"].error or "")
    assert sglang.seen_auth == []  # nothing was sent without the token
