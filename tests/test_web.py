"""The HTTP side under concurrent scrapes, over real loopback HTTP."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from exporter.exposition import server as web
from exporter.exposition.server import WebServer, make_app
from tests.support.daemon import run_daemon
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.metrics import Scrape


class NumberedRenders(Collector):
    """Each render is slow and exports its own sequence number."""

    def __init__(self, seconds: float) -> None:
        self.started = 0
        self._seconds = seconds
        self._lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            self.started += 1
            number = self.started
        time.sleep(self._seconds)
        yield GaugeMetricFamily("render_number", "Which render produced this body.", number)


def serve(collector: Collector, content: Callable[[], object] | None = None) -> WebServer:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = WebServer("127.0.0.1", 0, make_app(registry, lambda: b"landing", content=content))
    server.start()
    return server


def at_once(client: Callable[[], None], clients: int) -> None:
    """Start every client before waiting on any, so their requests overlap on the server."""
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_healthz_answers_503_with_the_reason_until_ready_then_200() -> None:
    reason: list[str | None] = ["starting: 1 of 2 log sources not followed yet"]
    app = make_app(CollectorRegistry(), lambda: b"landing", not_ready=lambda: reason[0])
    server = WebServer("127.0.0.1", 0, app)
    server.start()
    url = f"http://127.0.0.1:{server.port}/healthz"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        assert refused.value.code == 503
        assert refused.value.read() == b"starting: 1 of 2 log sources not followed yet\n"
        reason[0] = None
        with urllib.request.urlopen(url, timeout=5) as response:
            assert (response.status, response.read()) == (200, b"ok\n")
    finally:
        server.stop()


def fetch(port: int, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def served_number(body: str) -> int:
    line = next(x for x in body.splitlines() if x.startswith("render_number "))
    return int(float(line.split()[1]))


def test_concurrent_scrapes_share_renders_but_never_one_begun_before_they_arrived() -> None:
    collector = NumberedRenders(seconds=0.05)
    server = serve(collector)
    seen: list[tuple[int, int]] = []

    def scrape() -> None:
        begun_before = collector.started
        seen.append((begun_before, served_number(fetch(server.port)[1])))

    try:
        at_once(scrape, clients=10)
    finally:
        server.stop()
    assert len(seen) == 10
    assert all(served > begun_before for begun_before, served in seen), seen
    assert collector.started < 10  # renders were shared


def test_scrapes_asking_for_different_formats_get_their_own_render() -> None:
    collector = NumberedRenders(seconds=0)
    server = serve(collector)
    try:
        plain_type, plain = fetch(server.port)
        open_type, open_metrics = fetch(server.port, "application/openmetrics-text; version=1.0.0")
        again_type, again = fetch(server.port)
    finally:
        server.stop()
    assert plain_type.startswith("text/plain") and again_type.startswith("text/plain")
    assert open_type.startswith("application/openmetrics-text")
    assert open_metrics.rstrip().endswith("# EOF") and "# EOF" not in plain
    assert [served_number(b) for b in (plain, open_metrics, again)] == [1, 2, 3]


def test_a_body_is_reused_only_while_its_content_is_unchanged_and_young(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collector, content = NumberedRenders(seconds=0), {"version": 1}
    server = serve(collector, lambda: dict(content))
    try:
        numbers = [served_number(fetch(server.port)[1]) for _ in range(3)]
        content["version"] = 2
        numbers.append(served_number(fetch(server.port)[1]))
        monkeypatch.setattr(web, "MAX_REUSE_SECONDS", 0.0)
        numbers.append(served_number(fetch(server.port)[1]))
    finally:
        server.stop()
    assert numbers == [1, 1, 1, 2, 3]


def test_a_shared_render_gives_each_response_its_own_header_list() -> None:
    """The server adds to the header list it is given (wsgiref appends Content-Length); a body
    shared by threads answering at once must not share that list."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NumberedRenders(seconds=0))
    app = make_app(registry, lambda: b"landing", content=lambda: "unchanged")
    given: list[list[tuple[str, str]]] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        given.append(headers)
        headers.append(("Content-Length", "0"))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""}
    bodies = [b"".join(app(dict(environ), start_response)) for _ in range(2)]
    assert served_number(bodies[0].decode()) == served_number(bodies[1].decode()) == 1
    assert [h.count(("Content-Length", "0")) for h in given] == [1, 1]


@pytest.mark.e2e
def test_scrapes_back_to_back_never_show_a_window_past_stale_after(
    tmp_path: Path, port: int
) -> None:
    """Reused bodies included: each scrape that shows the window was sent before it went stale."""
    log = tmp_path / "server.log"
    log.touch()
    # Longer than a body may be reused, so a body rendered while the window was fresh is
    # still young when the window goes stale: only the content check can refuse it then.
    stale_after = web.MAX_REUSE_SECONDS + 0.5
    with run_daemon(["--log-file", str(log), "--stale-after", str(stale_after)], port) as d:
        append(log, decode_line(2.5))
        shown, sent_after_stale = [], 0
        deadline = time.time() + 10
        while time.time() < deadline and sent_after_stale < 50:
            sent = time.time()
            s: Scrape = d.scrape()
            last = s.value("specwatch_last_decode_timestamp_seconds")
            if last is None:
                continue
            if s.value("specwatch_accept_length") is not None:
                shown.append((sent, last))
            elif sent > last + stale_after:
                sent_after_stale += 1
    assert shown and sent_after_stale == 50
    assert all(sent < last + stale_after for sent, last in shown)


def test_clients_polling_the_landing_page_share_its_renders() -> None:
    """Ten clients on / of a 200-target daemon pushed /metrics from 94 ms to 1 s."""
    renders: list[float] = []

    def landing() -> bytes:
        renders.append(time.monotonic())
        time.sleep(0.05)
        return b"landing"

    server = WebServer("127.0.0.1", 0, make_app(CollectorRegistry(), landing))
    server.start()
    url = f"http://127.0.0.1:{server.port}/"
    bodies: list[bytes] = []

    def visit() -> None:
        with urllib.request.urlopen(url, timeout=5) as answer:
            bodies.append(answer.read())

    try:
        at_once(visit, clients=10)
    finally:
        server.stop()
    assert bodies == [b"landing"] * 10
    assert len(renders) < 10


def test_clients_polling_the_landing_page_back_to_back_leave_the_interpreter_to_scrapes() -> None:
    """Ten clients polling / of a 100-target daemon made scrapes 5 times slower: the page's
    renders now take at most PAGE_DUTY of the time, each client served a page begun after it
    asked."""
    renders: list[float] = []
    seconds = 0.05

    def landing() -> bytes:
        renders.append(time.monotonic())
        time.sleep(seconds)
        return str(len(renders)).encode()

    server = WebServer("127.0.0.1", 0, make_app(CollectorRegistry(), landing))
    server.start()
    url = f"http://127.0.0.1:{server.port}/"
    stop = time.monotonic() + 1.5
    served: list[tuple[int, int]] = []

    def poll() -> None:
        while time.monotonic() < stop:
            begun_before = len(renders)
            with urllib.request.urlopen(url, timeout=10) as answer:
                served.append((begun_before, int(answer.read())))

    try:
        at_once(poll, clients=10)
    finally:
        server.stop()
    gaps = [later - earlier for earlier, later in itertools.pairwise(renders)]
    assert gaps and min(gaps) >= seconds / web.PAGE_DUTY - 0.01, gaps
    assert all(number > begun_before for begun_before, number in served)


@pytest.mark.e2e
def test_head_answers_like_get_without_a_body_and_name_filters_select_families(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    log.touch()
    with run_daemon(["--log-file", str(log)], port) as daemon:
        url = f"http://127.0.0.1:{port}/metrics"
        head = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/plain")
            assert int(answer.headers["Content-Length"]) > 1000
            assert answer.read() == b""
        wanted = "specwatch_log_lines_total"
        query = f"{url}?name[]={wanted}&name[]=process_open_fds"
        with urllib.request.urlopen(query, timeout=5) as answer:
            filtered = Scrape(answer.read().decode())
        assert {s.name for s in filtered.samples} == {wanted, "process_open_fds"}
        assert filtered.value(wanted, target="default") == 0
        assert daemon.scrape().value(wanted, target="default") == 0  # unfiltered still whole
