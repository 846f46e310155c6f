"""A baseline learned from a log of the same model served *without* speculation.

The node's own past is the honest baseline nobody benchmarks: a log from before speculation
was switched on, or a canary's. Its decode windows are folded into node moments exactly as
the report folds them (DP ranks summed), then by load band
(:mod:`~exporter.analysis.plain_speed`). A log that speculates cannot stand for plain
decoding, so one is refused with the evidence: the run's arguments name an algorithm, or a
window carries an accept length or draft counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.analysis.baseline import OWN_LOG, Baseline, BaselineError
from exporter.analysis.node import NodeMoments
from exporter.analysis.plain_speed import MIN_BAND_WINDOWS, LearnedPoint, PlainSpeed
from exporter.engines.record import LogLine, StatsRecord, logged_seconds
from exporter.parse.pipeline import RecordSink
from exporter.parse.reader import ReadError, read_logs
from exporter.state.runs import RunTracker


class PlainLogSink(RecordSink):
    """Folds a log's decode windows into plain speed by band; notes the first sign of
    speculation, which makes the log unfit."""

    def __init__(self) -> None:
        self.speed = PlainSpeed()
        self.decode_windows = 0
        self.speculative: str | None = None  # why the log is not one of plain decoding
        self._runs = RunTracker()
        self._node = NodeMoments()

    def on_lines(self, count: int) -> None:
        return None

    def on_record(self, record: StatsRecord) -> None:
        self.on_records((record,))

    def on_records(self, records: Sequence[StatsRecord]) -> None:
        decodes = [record for record in records if record.kind == "decode"]
        if not decodes:
            return
        self.decode_windows += len(decodes)
        if self.speculative is None:
            self.speculative = _speculation_seen(decodes)
        times = [logged_seconds(record.time) for record in decodes]
        for moment in self._node.add(decodes, times):
            self.speed.add(moment.running, moment.throughput)

    def on_unrecognized(self, reason: str) -> None:
        return None

    def on_skipped(self, reason: str) -> None:
        return None

    def on_event(self, line: LogLine) -> None:
        if self._runs.observe(line):
            self._flush()
        algorithm = self._runs.config.algorithm
        if self.speculative is None and algorithm:
            self.speculative = (
                f"its server arguments name a speculative algorithm ({algorithm}) at "
                f"{line.time or 'its start'}"
            )

    def finish(self) -> None:
        self._flush()

    def _flush(self) -> None:
        moment = self._node.flush()
        if moment is not None:
            self.speed.add(moment.running, moment.throughput)


def _speculation_seen(decodes: Sequence[StatsRecord]) -> str | None:
    for record in decodes:
        if record.accept_length is not None or record.draft_counts is not None:
            return (
                f"its decode window at {record.time or 'an unstamped line'} carries "
                "speculation figures (an accept length or draft counts)"
            )
    return None


@dataclass(frozen=True)
class LearnedLog:
    """What a plain log says: its bands with enough windows, and all it read."""

    paths: tuple[str, ...]
    points: list[LearnedPoint]
    decode_windows: int
    speed: PlainSpeed


def learn_log(paths: Sequence[str], minimum: int = MIN_BAND_WINDOWS) -> LearnedLog:
    """Read ``paths`` as one plain server's log; ``BaselineError`` for a speculative log, one
    that cannot be read, or one with no band of ``minimum`` windows."""
    sink = PlainLogSink()
    try:
        read_logs(paths, sink)
    except (ReadError, OSError) as exc:
        raise BaselineError(f"cannot read {exc}") from None
    sink.finish()
    names = ", ".join(paths)
    if sink.speculative is not None:
        raise BaselineError(
            f"{names} is a log of a server with speculative decoding ({sink.speculative}); a "
            "baseline must come from the same model served without it"
        )
    points = sink.speed.points(minimum)
    if not points:
        raise BaselineError(
            f"{names}: {sink.decode_windows} decode windows, and no load band has the "
            f"{minimum} a baseline point needs"
        )
    return LearnedLog(tuple(paths), points, sink.decode_windows, sink.speed)


def baseline_from_log(path: str | Path, minimum: int = MIN_BAND_WINDOWS) -> Baseline:
    """``--baseline-log FILE``: the curve of a plain log, limited to the bands it covers."""
    learned = learn_log([str(path)], minimum)
    source = f"learned from {Path(path).name}, served without speculation"
    baseline = learned.speed.baseline(OWN_LOG, source, minimum)
    assert baseline is not None  # learn_log refused a log without a band
    return baseline


def baseline_from_options(
    tok_s: float | None = None,
    curve: str | None = None,
    bench_file: str | Path | None = None,
    log: str | Path | None = None,
) -> Baseline | None:
    """The configured baseline, a log's among its forms; more than one is an error."""
    if log is None:
        return Baseline.from_options(tok_s, curve, bench_file)
    if any(value is not None for value in (tok_s, curve, bench_file)):
        raise BaselineError("at most one baseline may be given, got log and another")
    return baseline_from_log(log)
