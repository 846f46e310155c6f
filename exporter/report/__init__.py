"""``specwatch report``: what a log says about speculation, after the fact.

The tool an engineer runs after a benchmark instead of grepping the log: one streaming pass
(:mod:`.reader`) through a :class:`~.builder.ReportBuilder` folds records into a
:class:`~.summary.Report`, rendered for the terminal (:mod:`.text`), as JSON, or as a page
with charts (:mod:`.html`, optional extra).
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.analysis.baseline import Baseline
from exporter.analysis.thresholds import DEFAULT, Thresholds
from exporter.report.builder import ReportBuilder
from exporter.report.reader import Progress, read_logs
from exporter.report.summary import Report


def build_report(
    paths: Sequence[str],
    baseline: Baseline | None = None,
    expected_accept_length: float | None = None,
    progress: Progress | None = None,
    thresholds: Thresholds = DEFAULT,
) -> Report:
    """Read ``paths`` once, in order, and fold them into one report."""
    builder = ReportBuilder(baseline, expected_accept_length, thresholds)
    try:
        read_logs(paths, builder, progress)
    finally:
        if progress is not None:
            progress.close()
    return builder.finish(tuple(paths))
