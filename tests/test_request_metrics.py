"""From a log's finished-request lines to what /metrics shows: the distribution, the counters,
the traffic classes and the finding, and never a request's text."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from exporter.config import TargetConfig
from exporter.sources.tail import FileTailer
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.metrics import Scrape, render
from tests.support.requests import OUTPUT, PROMPT, RID, finish_line
from tests.support.tailing import FAST

HEADER = "x-smg-routing-key"


@contextmanager
def watched(log: Path, label: str | None = None, classes: int = 8) -> Iterator[Target]:
    """The daemon's path from ``log`` to its target, one tailer pass per ``poll``."""
    config = TargetConfig(name="node", log_files=[str(log)], request_label_header=label)
    target = Target.from_config(config, max_traffic_classes=classes)
    tailer = FileTailer(str(log), LogFeed(target.state), **FAST)
    tailer.poll()
    try:
        yield target
        tailer.poll()
    finally:
        tailer.stop()


def _scrape(log: Path, lines: list[str], label: str | None = None, classes: int = 8) -> Scrape:
    log.touch()
    with watched(log, label, classes) as target:
        append(log, *lines)
    return render([target], time.time)


def hidden_share_log(json_format: bool = False) -> list[str]:
    """A node whose windows average 2.4 while 15 of its 100 requests accept nothing."""
    lines = [decode_line(2.4, time_text=f"2026-02-23 00:14:{s:02d}") for s in range(10)]
    for i in range(100):
        length = 1.0 + 1 / 40 if i % 20 < 3 else 2.6
        lines.append(finish_line(length, 40, json_format=json_format, level=i % 4))
    return lines


def test_the_histogram_and_counters_count_each_request(tmp_path: Path) -> None:
    scrape = _scrape(tmp_path / "server.log", hidden_share_log())

    assert scrape.value("specwatch_requests_finished_total", target="node") == 100
    assert scrape.value("specwatch_requests_speculative_total", target="node") == 100
    assert scrape.value("specwatch_requests_no_draft_accepted_total", target="node") == 15
    bucket = "specwatch_request_accept_length_bucket"
    assert scrape.value(bucket, target="node", le="1.0") == 0
    assert scrape.value(bucket, target="node", le="1.05") == 15
    assert scrape.value(bucket, target="node", le="2.5") == 15
    assert scrape.value(bucket, target="node", le="3.0") == 100
    assert scrape.value("specwatch_request_accept_length_count", target="node") == 100


def test_a_hidden_share_is_named_while_the_average_looks_healthy(tmp_path: Path) -> None:
    scrape = _scrape(tmp_path / "server.log", hidden_share_log(json_format=True))

    assert scrape.value("specwatch_finding", target="node", code="requests_without_benefit") == 1


def test_a_node_whose_requests_all_benefit_has_no_finding(tmp_path: Path) -> None:
    lines = [decode_line(2.4, time_text=f"2026-02-23 00:14:{s:02d}") for s in range(10)]
    lines += [finish_line(1.6 + (i % 10) / 10, 40) for i in range(100)]

    scrape = _scrape(tmp_path / "server.log", lines)

    assert scrape.value("specwatch_finding", target="node", code="requests_without_benefit") is None
    assert scrape.value("specwatch_requests_no_draft_accepted_total", target="node") == 0


def test_no_request_text_id_or_header_value_reaches_metrics(tmp_path: Path) -> None:
    headers = {HEADER: "tenant-a", "x-secret": "opaque-token-123"}
    lines = [finish_line(2.0, 30, level=level, headers=headers) for level in range(4)]
    lines += [finish_line(2.0, 30, level=3, json_format=True, headers=headers)]

    text = _scrape(tmp_path / "server.log", lines, label=HEADER).text

    for secret in (PROMPT, OUTPUT, RID, "Lake Bled", "4111", "opaque-token-123", "x-secret"):
        assert secret not in text


def test_traffic_classes_are_bounded_and_only_label_shaped(tmp_path: Path) -> None:
    lines = [
        finish_line(2.0, 30, json_format=True, headers={HEADER: value})
        for value in ("tenant-a", "tenant-b", "tenant-c", "tenant-a", "no spaces please")
    ]
    lines.append(finish_line(2.0, 30))  # no header logged

    scrape = _scrape(tmp_path / "server.log", lines, label=HEADER, classes=2)

    count = "specwatch_request_accept_length_count"
    classes = {"tenant-a": 2, "tenant-b": 1, "other": 1, "none": 2}
    for name, expected in classes.items():
        assert scrape.value(count, target="node", traffic_class=name) == expected
    assert scrape.value(count, target="node", traffic_class="tenant-c") is None


def test_a_server_that_does_not_log_its_requests_costs_no_request_series(tmp_path: Path) -> None:
    scrape = _scrape(tmp_path / "server.log", [decode_line(2.4)])

    assert not {
        name for name in scrape.names() if "_request_accept" in name or "requests_f" in name
    }
    assert not {name for name in scrape.names() if name.startswith("specwatch_requests_")}
    assert scrape.value("specwatch_accept_length", target="node") == 2.4
