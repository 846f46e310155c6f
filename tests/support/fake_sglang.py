"""A loopback HTTP server playing SGLang: ``/metrics`` and ``/server_info`` as a test sets them.

Real HTTP over a real socket, so the scraper's timeouts, size caps and auth are exercised as
they are against a server; routes can be slow, trickle, stream without end or demand a token.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API_KEY = "sk-live-upstream-0123456789"


def exposition(sep: str = ":", graph: float = 1000.0, eager: float = 0.0) -> str:
    """Two DP ranks of SGLang's scheduler gauges (Feb 2026 names and help texts)."""
    ranks = ('dp_rank="0",engine_type="unified",model_name="kimi",tp_rank="0"', "31", "2.41")
    ranks2 = ('dp_rank="1",engine_type="unified",model_name="kimi",tp_rank="4"', "30", "2.47")
    out = []
    gauges: list[tuple[str, str, Callable[[tuple[str, str, str]], str]]] = [
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


def decoding(sep: str = ":") -> Callable[[], bytes]:
    """``exposition()`` of a server that keeps decoding: each answer counts 1000 more decode
    passes, as a busy SGLang's does between two scrapes (a frozen counter is an idle server)."""
    passes = itertools.count(1000, 1000)
    return lambda: exposition(sep, graph=float(next(passes))).encode()


def idle_exposition() -> str:
    """The exposition after SGLang's 30 s idle refresh: running requests and throughput are 0,
    the spec gauges still hold the last decode window's values."""
    body = exposition().replace('"} 31\n', '"} 0\n').replace('"} 30\n', '"} 0\n')
    return body.replace(" 600.5\n", " 0\n")


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
    hold: threading.Event | None = None  # a hung server: no answer until the test sets it
    live: Callable[[], bytes] | None = None  # the body made afresh for each request

    def payload(self) -> bytes:
        return self.live() if self.live is not None else self.body


@dataclass
class FakeSGLang:
    """A loopback HTTP server whose routes a test sets up; records the headers it saw."""

    url: str
    routes: dict[str, Route] = field(default_factory=dict)
    seen_auth: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # every path asked for, in order
    held: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    """Released once for each request a route's ``hold`` keeps waiting."""


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
            fake.paths.append(self.path)
            if route is None:
                self.send_error(404)
                return
            if route.need_token and auth != f"Bearer {API_KEY}":
                self.send_error(401)
                return
            time.sleep(route.delay)
            if route.hold is not None:
                fake.held.release()
                route.hold.wait()
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            body = route.payload()
            if not route.stream_bytes and not route.trickle:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._body(route, body)

        def _body(self, route: Route, body: bytes) -> None:
            if route.stream_bytes:
                chunk = b"# filler comment line to make the body huge\n" * 1024
                for _ in range(route.stream_bytes // len(chunk) + 1):
                    self.wfile.write(chunk)
            elif route.trickle:
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(route.trickle)
            else:
                self.wfile.write(body)

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


# SGLang's /metrics exposition (gauge names from SGLang's metrics collector) for the ok node.
SGLANG_METRICS = "\n".join(
    [
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{model_name="moonshotai/Kimi-K2.5"} 48.0',
        "# TYPE sglang:num_queue_reqs gauge",
        'sglang:num_queue_reqs{model_name="moonshotai/Kimi-K2.5"} 0.0',
        "# TYPE sglang:gen_throughput gauge",
        'sglang:gen_throughput{model_name="moonshotai/Kimi-K2.5"} 2700.0',
        "# TYPE sglang:spec_accept_length gauge",
        'sglang:spec_accept_length{model_name="moonshotai/Kimi-K2.5"} 3.2',
        "",
    ]
)
SGLANG_SERVER_INFO = {
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "max_running_requests": 48,
    "disable_cuda_graph": False,
    "status": "ready",
    "version": "0.5.10",
}


@contextmanager
def sglang_http_api() -> Iterator[FakeSGLang]:
    """SGLang's /metrics and /server_info on a loopback port (the model itself needs a GPU)."""
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(
            body=SGLANG_METRICS.encode(), content_type="text/plain; version=0.0.4"
        )
        server.routes["/server_info"] = Route(
            body=json.dumps(SGLANG_SERVER_INFO).encode(), content_type="application/json"
        )
        yield server
