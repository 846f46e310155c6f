"""The upstream scraper against real HTTP servers on loopback, healthy and broken."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.engines import registry
from exporter.sources.scrape_pool import ScrapePool
from exporter.sources.upstream import (
    MAX_BODY_BYTES,
    ScrapeError,
    UpstreamScraper,
    parse_metrics,
)
from exporter.sources.upstream_snapshot import UpstreamSnapshot
from tests.support.fake_sglang import (
    API_KEY,
    FakeSGLang,
    Route,
    exposition,
    fake_sglang,
    idle_exposition,
    server_info,
)
from tests.support.tools import free_port
from tests.support.waiting import PROCESS_TIMEOUT, wait_for


@pytest.fixture
def sglang() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def scraper(
    fake: FakeSGLang, *, token_file: str | None = None, token_env: str | None = None
) -> UpstreamScraper:
    return UpstreamScraper(
        f"{fake.url}/metrics",
        f"{fake.url}/server_info",
        timeout=2.0,
        token_file=token_file,
        token_env=token_env,
    )


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


def test_a_server_info_of_countless_values_is_too_large_not_walked(sglang: FakeSGLang) -> None:
    """A 6 MB body of 100,000 small lists cost 3.7 s of CPU per scrape to walk and clean."""
    body = b'{"speculative_algorithm": "EAGLE", "x": [' + b",".join([b"[1, 2]"] * 200_000) + b"]}"
    sglang.routes["/server_info"] = Route(body=body, content_type="application/json")
    snap = UpstreamScraper(server_info_url=f"{sglang.url}/server_info").scrape_once()
    assert not snap.endpoints["server_info"].up
    assert snap.errors == {("server_info", "too_large"): 1}
    assert snap.config is None


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_token_file_turned_into_a_fifo_or_device_costs_one_scrape_not_the_scraper(
    sglang: FakeSGLang, tmp_path: Path, special: str
) -> None:
    """The token is read again on every scrape; a FIFO there blocked the scraper for good."""
    sglang.routes["/metrics"] = Route(body=exposition().encode())
    token_file = special
    if special == "fifo":
        token_file = str(tmp_path / "token")
        os.mkfifo(token_file)
    results: list[UpstreamSnapshot] = []
    reading = scraper(sglang, token_file=token_file)
    reader = threading.Thread(target=lambda: results.append(reading.scrape_once()), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert results, f"the scrape is still reading {token_file}"
    assert results[0].errors[("metrics", "other")] == 1
    assert "not a regular file" in (results[0].endpoints["metrics"].error or "")


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


def _failed(snap_errors: dict[tuple[str, str], int], endpoint: str) -> set[str]:
    return {reason for (ep, reason), count in snap_errors.items() if ep == endpoint and count}


def test_refused_connection() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    snap = UpstreamScraper(f"{url}/metrics", f"{url}/server_info", timeout=1).scrape_once()
    assert not snap.endpoints["metrics"].up and not snap.endpoints["server_info"].up
    assert snap.errors == {("metrics", "refused"): 1, ("server_info", "refused"): 1}
    assert snap.values is None and snap.metrics_endpoint == "down"


def test_slow_server_times_out(sglang: FakeSGLang) -> None:
    """The server answers only once the scrape has returned (or, were it waited for, after
    the test's own deadline): a scrape that waited would show its values, up."""
    answer = threading.Event()
    sglang.routes["/metrics"] = Route(body=exposition().encode(), hold=answer)
    guard = threading.Timer(PROCESS_TIMEOUT, answer.set)
    guard.start()
    try:
        snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=0.5).scrape_once()
        assert not answer.is_set()  # returned while the server still held its answer
    finally:
        answer.set()
        guard.cancel()
    assert not snap.endpoints["metrics"].up
    assert _failed(dict(snap.errors), "metrics") == {"timeout"}


def test_trickling_body_hits_the_overall_deadline(sglang: FakeSGLang) -> None:
    """A byte every 0.05 s never lets a read wait out a per-read timeout; only a deadline
    over the whole scrape ends it, minutes before the body would."""
    sglang.routes["/metrics"] = Route(body=exposition().encode(), trickle=0.05)
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=0.5).scrape_once()
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
        # a value of more digits than a float holds: plain, and with an escape in a label
        ("/metrics", b"sglang:num_running_reqs " + b"9" * 400 + b"\n"),
        ("/metrics", b'sglang:num_running_reqs{a="\\""} ' + b"9" * 400 + b"\n"),
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
    """Readers take snapshots while the scrape in flight waits on a server that answers only
    when the test lets it (or, were a reader waiting on the scrape, after the test's own
    deadline): none of them waits for that scrape."""
    answer = threading.Event()
    sglang.routes["/metrics"] = Route(body=exposition().encode(), hold=answer)
    scrape = UpstreamScraper(f"{sglang.url}/metrics", interval=0.1, timeout=PROCESS_TIMEOUT)
    pool = ScrapePool([scrape])
    guard = threading.Timer(PROCESS_TIMEOUT / 2, answer.set)
    pool.start()
    try:
        assert sglang.held.acquire(timeout=PROCESS_TIMEOUT)  # the scrape waits on the server
        guard.start()
        snapshots = [scrape.snapshot() for _ in range(100)]
        assert not answer.is_set()  # every one taken while the scrape was in flight
        assert all(snap.values is None for snap in snapshots)
        answer.set()
        wait_for(lambda: scrape.snapshot().values, what="the scrape's answer, once let go")
    finally:
        answer.set()
        guard.cancel()
        pool.stop(timeout=3)


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


def _with_setup(steps: str, draft_tokens: str) -> bytes:
    """SGLang 0.5.23's gauges of the speculative setup in force, on both ranks."""
    gauges = [
        ("spec_num_steps", "Currently active speculative_num_steps.", steps),
        ("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens.", draft_tokens),
    ]
    lines = []
    for name, doc, value in gauges:
        lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge"]
        lines += [f'sglang:{name}{{model_name="kimi",tp_rank="{r}"}} {value}' for r in (0, 4)]
    return (exposition() + "\n".join(lines) + "\n").encode()


@pytest.mark.parametrize(
    ("steps", "draft_tokens", "active"),
    [("0", "1", 0), ("5", "6", 5), ("0", "0", None), ("1e9", "6", None)],
)
def test_the_steps_in_force_come_from_sglangs_setup_gauges(
    sglang: FakeSGLang, steps: str, draft_tokens: str, active: int | None
) -> None:
    """Adaptive with drafting off reads 0 steps and 1 verified position; a server without
    speculation 0 and 0; a value no drafter runs is not taken."""
    sglang.routes["/metrics"] = Route(body=_with_setup(steps, draft_tokens))
    snap = scraper(sglang).scrape_once()
    got = None if snap.config is None else snap.config.active_steps
    assert got == active


def test_an_endpoint_that_stops_answering_is_logged_once_and_so_is_its_return(
    sglang: FakeSGLang, caplog: pytest.LogCaptureFixture
) -> None:
    path = "/metrics?key=s3cret"
    url = sglang.url.replace("http://", "http://user:pa55@") + path
    scrape = UpstreamScraper(url, timeout=2, target="sglang-0")
    caplog.set_level(logging.INFO, logger="exporter.sources.upstream")
    sglang.routes[path] = Route(body=exposition().encode())
    scrape.scrape_once()
    sglang.routes[path] = Route(status=503)
    scrape.scrape_once()
    scrape.scrape_once()
    sglang.routes[path] = Route(body=exposition().encode())
    scrape.scrape_once()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "sglang-0" in r.getMessage()]
    assert [level for level, _ in said] == ["WARNING", "INFO"]
    assert "metrics" in said[0][1] and "HTTP 503" in said[0][1]
    assert f"{sglang.url}/metrics " in said[0][1]
    assert not any(secret in caplog.text for secret in ("s3cret", "pa55", "user"))


def test_a_scraper_without_a_target_name_leaves_the_telling_to_its_caller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """doctor prints its own ``problem:`` line; a log line on top would say it twice."""
    UpstreamScraper(f"http://127.0.0.1:{free_port()}/metrics", timeout=1).scrape_once()
    assert not caplog.records


def unrelated_families(series: int) -> str:
    """A web framework's and a process's own families beside the engine's, as a server
    mounted in a larger app exports them: many series, many labels, none an engine reads."""
    lines = [
        "# HELP http_request_duration_seconds Latency.",
        "# TYPE http_request_duration_seconds histogram",
    ]
    for i in range(series):
        labels = f'handler="/v1/route/{i}",method="POST",status="200",le="0.5",zone="z{i % 7}"'
        lines.append(f"http_request_duration_seconds_bucket{{{labels}}} {i}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_only_the_families_an_engine_reads_are_parsed(
    sglang: FakeSGLang, openmetrics: bool
) -> None:
    """An exposition of 1.7 MB inside every cap took 13 s to parse whole, `upstream_up` 1: a
    line filter before prometheus-client's parser keeps only the engines' families."""
    body = exposition("_") + unrelated_families(19_000)
    content_type = "text/plain; version=0.0.4"
    if openmetrics:
        family = "sglang_cuda_graph_passes"
        body = body.replace(f"{family}_total ", f"{family} ") + "# EOF\n"
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    sglang.routes["/metrics"] = Route(body=body.encode(), content_type=content_type)
    # A scrape's timeout is no measure of the filter (a 2 s one ran out at load 10): the
    # deadline already passed, below, is.
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=30).scrape_once()
    assert snap.endpoints["metrics"].up
    assert snap.values is not None and snap.values.running_requests == 61
    # Parsed whole, the body is cut short by a deadline already passed; the engine's own
    # lines alone are not: the other families never reach the parser.
    reader = registry.engine("sglang").upstream_reader()
    assert reader is not None
    passed = time.monotonic()
    with pytest.raises(ScrapeError, match="while parsing"):
        parse_metrics(body.encode(), content_type, deadline=passed)
    read = parse_metrics(body.encode(), content_type, reader.reads, deadline=passed)
    assert "sglang_num_running_reqs" in read and "http_request_duration_seconds_bucket" not in read


def _slow_to_parse() -> str:
    """An exposition within every size cap that takes seconds to parse: its label values hold
    escapes, so prometheus-client's parser reads it (plain lines take a tenth of the time)."""
    labels = ",".join(f'l{i}="v\\\\"' for i in range(9))
    series = "".join(
        f'sglang:num_running_reqs{{dp_rank="{i}",{labels}}} 1\n' for i in range(19_000)
    )
    return exposition() + series


def test_a_scrape_whose_parsing_outlasts_its_timeout_is_down(sglang: FakeSGLang) -> None:
    """The timeout covered the answer but not its parsing: values parsed for 13 s were shown
    as the server's present, `upstream_up` 1."""
    sglang.routes["/metrics"] = Route(body=_slow_to_parse().encode())
    snap = UpstreamScraper(f"{sglang.url}/metrics", timeout=0.2).scrape_once()
    assert not snap.endpoints["metrics"].up
    assert snap.errors == {("metrics", "timeout"): 1}
    assert snap.values is None


@pytest.mark.parametrize("content_type", ["text/plain", "application/openmetrics-text"])
def test_parsing_stops_at_the_scrapes_deadline(content_type: str) -> None:
    """Values parsed past the timeout were dropped, but only once all of them were parsed:
    seconds of CPU a scrape for a body that is late anyway."""
    series = "".join(f'sglang:num_running_reqs{{dp_rank="{i}"}} 1\n' for i in range(5_000))
    body = f"# TYPE sglang:num_running_reqs gauge\n{series}# EOF\n".encode()
    with pytest.raises(ScrapeError, match="while parsing") as raised:
        parse_metrics(body, content_type, deadline=time.monotonic())
    assert raised.value.reason == "timeout"
