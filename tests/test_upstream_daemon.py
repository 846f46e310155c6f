"""A broken or slow upstream never hurts the daemon: /metrics stays fast, reasons are counted."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemon import config_file, run_daemon
from tests.support.fake_sglang import API_KEY, Route, exposition, fake_sglang, server_info
from tests.support.files import append
from tests.support.loglines import wrong_algorithm_flag
from tests.support.proc import SCRAPE_TIMEOUT

pytestmark = pytest.mark.e2e


def test_a_hung_upstream_holds_no_scrape_of_metrics(tmp_path: Path, port: int) -> None:
    """Scrapes are answered while the upstream request is still waiting, well before the
    daemon gives it up (10 s): a /metrics that waited for it would show that timeout. How
    fast they are answered is measured by ``bench/attack_bench.py``."""
    hung = threading.Event()
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode(), hold=hung)
        config = config_file(tmp_path, server.url, server_info=False, interval=10)
        try:
            with run_daemon(["--config", str(config)], port) as d:
                assert server.held.acquire(timeout=SCRAPE_TIMEOUT)  # the upstream is hanging
                labels = {"target": "sglang-0", "endpoint": "metrics"}
                timed_out = {**labels, "reason": "timeout"}
                for _ in range(5):
                    s = d.scrape()
                    assert not s.value("specwatch_upstream_scrape_errors_total", **timed_out)
                    assert s.value("specwatch_accept_length", target="sglang-0") is None
                s = d.wait_metric(
                    "specwatch_upstream_scrape_errors_total",
                    lambda v: bool(v),
                    2 * SCRAPE_TIMEOUT,
                    **timed_out,
                )
                assert s.value("specwatch_upstream_up", **labels) == 0
        finally:
            hung.set()


def test_broken_upstreams_are_counted_by_reason(tmp_path: Path, port: int) -> None:
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=b"<html>gateway</html>")
        server.routes["/server_info"] = Route(status=500, body=b"boom")
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as d:
            base = {"target": "sglang-0"}
            errors = "specwatch_upstream_scrape_errors_total"
            d.wait_metric(
                errors, lambda v: (v or 0) >= 2, **base, endpoint="metrics", reason="garbage"
            )
            d.wait_metric(
                errors, lambda v: (v or 0) >= 2, **base, endpoint="server_info", reason="http"
            )
            server.routes["/metrics"] = Route(body=exposition().encode())
            d.wait_metric("specwatch_upstream_up", lambda v: v == 1, **base, endpoint="metrics")
            d.wait_metric("specwatch_running_requests", lambda v: v == 61, **base)


@pytest.mark.parametrize("token_from", ["file", "env"])
def test_secrets_reach_neither_metrics_nor_logs(tmp_path: Path, port: int, token_from: str) -> None:
    """The bearer token (file or environment), /server_info's API keys and the api_key of the
    logged ServerArgs appear nowhere: not in /metrics, /, nor the daemon's debug log."""
    log = tmp_path / "server.log"
    # server_args=ServerArgs(..., api_key='sk-live-0123456789', ...)
    append(log, *wrong_algorithm_flag())
    token_file = tmp_path / "token"
    token_file.write_text(API_KEY + "\n")
    if token_from == "file":
        auth, env = ["--bearer-token-file", str(token_file)], {}
    else:
        auth, env = [], {"SPECWATCH_BEARER_TOKEN_ENV": "SGLANG_API_KEY", "SGLANG_API_KEY": API_KEY}
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode(), need_token=True)
        server.routes["/server_info"] = Route(
            body=server_info(), content_type="application/json", need_token=True
        )
        args = [
            *("--config", str(config_file(tmp_path, server.url))),
            *("--log-file", str(log), "--from-beginning", "--log-level", "debug", *auth),
        ]
        with run_daemon(args, port, env=env) as d:
            d.wait_metric("specwatch_upstream_up", lambda v: v == 1, endpoint="server_info")
            d.wait_metric("specwatch_upstream_up", lambda v: v == 1, endpoint="metrics")
            d.wait_metric(
                "specwatch_finding", lambda v: v == 1, code="eagle3_draft_with_eagle_algorithm"
            )
            pages = [page(port, "/metrics"), page(port, "/")]
        logged = d.logged
    assert f"Bearer {API_KEY}" in server.seen_auth  # the token was used...
    assert "listening on" in logged  # ...and the daemon's log was captured
    for secret in (API_KEY, "sk-live-0123456789", "Bearer"):
        assert secret not in "".join(pages) + logged


def page(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        text: str = response.read().decode()
        return text
