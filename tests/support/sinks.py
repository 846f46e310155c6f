"""A ``RecordSink`` that keeps everything the line processor tells it, in order."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.engines.record import LogLine, RequestRecord, StatsRecord
from exporter.parse.pipeline import RecordSink


@dataclass
class ListSink(RecordSink):
    """Counts lines and keeps records, reasons and events; ``order`` interleaves them."""

    lines: int = 0
    records: list[StatsRecord] = field(default_factory=list)
    unrecognized: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    events: list[LogLine] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def on_lines(self, count: int) -> None:
        self.lines += count

    def on_record(self, record: StatsRecord) -> None:
        self.records.append(record)
        self.order.append(f"record:{record.kind}")

    def on_unrecognized(self, reason: str) -> None:
        self.unrecognized.append(reason)

    def on_skipped(self, reason: str) -> None:
        self.skipped.append(reason)

    def on_event(self, line: LogLine) -> None:
        self.events.append(line)
        self.order.append("event")

    def on_request(self, record: RequestRecord) -> None:
        self.requests.append(record)
