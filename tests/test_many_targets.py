"""One daemon watching many targets: threads and memory grow by a stated amount per target."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.sources.scrape_pool import MAX_WORKERS
from tests.support.daemon import run_daemon
from tests.support.fake_sglang import Route, exposition, fake_sglang, server_info
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.proc import MEMORY_LIMIT_MIB, rss_mib, threads
from tests.support.waiting import PROCESS_TIMEOUT

pytestmark = pytest.mark.e2e

TARGETS = 60


def test_threads_are_a_few_for_every_log_plus_a_bounded_scrape_pool(
    tmp_path: Path, port: int
) -> None:
    """A thread per target and per upstream made 200 targets 405 threads and 136 MB; a
    tailer thread per log, 100 logs 105 threads taking turns at the interpreter lock."""
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=exposition().encode())
        server.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
        lines = ["targets:"]
        logs = []
        for number in range(TARGETS):
            log = tmp_path / f"node-{number}.log"
            append(log, decode_line(2.5))
            logs.append(log)
            lines += [
                f"  - name: node-{number}",
                f"    log_files: [{log}]",
                f"    metrics_url: {server.url}/metrics",
                f"    server_info_url: {server.url}/server_info",
                "    scrape_interval: 1",
            ]
        config = tmp_path / "specwatch.yaml"
        config.write_text("\n".join(lines) + "\n")
        with run_daemon(["--config", str(config)], port) as daemon:
            for log in logs:
                append(log, decode_line(2.5))
            last = f"node-{TARGETS - 1}"
            # Sixty targets coming up on a loaded machine: a process's time, not a scrape's.
            daemon.wait_metric(
                "specwatch_log_lines_total", lambda v: v == 1, PROCESS_TIMEOUT, target=last
            )
            daemon.wait_metric(
                "specwatch_upstream_up",
                lambda v: v == 1,
                PROCESS_TIMEOUT,
                target=last,
                endpoint="metrics",
            )
            # The server's own few (the deadline keeper and the one tail loop among them) and
            # the scrape pool; loopback addresses need no name lookup threads.
            assert threads(daemon.proc.pid) <= 10 + MAX_WORKERS
            assert rss_mib(daemon.proc.pid) < MEMORY_LIMIT_MIB
