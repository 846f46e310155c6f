"""Engine-neutral records as the parser makes them, for tests that start past the parser."""

from __future__ import annotations

from exporter.engines.record import StatsRecord


def decode(**fields: object) -> StatsRecord:
    values: dict[str, object] = dict(
        running_requests=48,
        queued_requests=32,
        token_usage=0.06,
        accept_length=1.0,
        accept_rate=0.25,
        cuda_graph=True,
        gen_throughput=600.0,
    )
    values.update(fields)
    return StatsRecord(kind="decode", **values)  # type: ignore[arg-type]
