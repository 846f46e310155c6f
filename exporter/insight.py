"""What specwatch understands about a target beyond its newest window, per scrape.

The merged server configuration (log over ``/server_info``, the draft's own config on top),
the active findings, and the upstream gauges that may stand in for the log. Computed from
thread-safe parts (the state's tracker and evidence, the scraper's published snapshot) so a
scrape never waits on a tailer or on the upstream server.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.findings import Finding, evaluate
from exporter.server_config import ServerConfig, with_local_draft
from exporter.target import Target
from exporter.upstream import UpstreamSnapshot, UpstreamValues


@dataclass(frozen=True, slots=True)
class Insight:
    config: ServerConfig
    findings: list[Finding]
    upstream: UpstreamSnapshot | None
    fallback: UpstreamValues | None  # upstream gauges to export; None while the log is fresh


def server_config(target: Target, upstream: UpstreamSnapshot | None) -> ServerConfig:
    """The log describes the run that wrote it, so it wins over a scrape of ``/server_info``;
    a configured draft ``config.json`` is the most direct word on the draft."""
    config = ServerConfig()
    if upstream is not None and upstream.config is not None:
        config = upstream.config
    config = config.merged(target.state.tracker.config).merged(target.draft)
    return with_local_draft(config)


def inspect(target: Target, now: float, log_is_fresh: bool, stale_after: float) -> Insight:
    """Everything the collector renders beyond the log windows, as of ``now``."""
    upstream = target.upstream.snapshot() if target.upstream is not None else None
    config = server_config(target, upstream)
    inputs = {}
    fallback = None
    if upstream is not None and upstream.scraped_at is not None:
        inputs = {
            "metrics_endpoint": upstream.metrics_endpoint,
            "cuda_graph_share": upstream.values.cuda_graph_share if upstream.values else None,
            "upstream_busy": bool(upstream.values and upstream.values.running_requests),
        }
        max_age = max(stale_after, 2 * target.config.scrape_interval)
        if not log_is_fresh and now - upstream.scraped_at < max_age:
            fallback = upstream.values
    observations = target.state.evidence.observations(config, now, **inputs)
    observations = replace(observations, log_watched=bool(target.config.log_files))
    return Insight(config, evaluate(observations), upstream, fallback)
