"""A broken or slow upstream never hurts the daemon: /metrics stays fast, reasons are counted."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from tests.daemon import run_daemon
from tests.test_upstream import Route, exposition, fake_sglang


def timed_scrape(port: int) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        response.read()
    return time.monotonic() - started


def config_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "specwatch.yaml"
    path.write_text(
        "targets:\n"
        "  - name: sglang-0\n"
        f"    metrics_url: {url}/metrics\n"
        f"    server_info_url: {url}/server_info\n"
        "    scrape_interval: 1\n"
    )
    return path


def test_slow_upstream_times_out_while_metrics_answer_fast(tmp_path: Path, port: int) -> None:
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode(), delay=3.0)
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as d:
            labels = {"target": "sglang-0", "endpoint": "metrics", "reason": "timeout"}
            d.wait_metric("specwatch_upstream_scrape_errors_total", lambda v: bool(v), **labels)
            durations = sorted(timed_scrape(port) for _ in range(20))
            assert durations[-1] < 0.5, durations
            s = d.scrape()
            assert s.value("specwatch_upstream_up", target="sglang-0", endpoint="metrics") == 0
            assert s.value("specwatch_accept_length", target="sglang-0") is None


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
