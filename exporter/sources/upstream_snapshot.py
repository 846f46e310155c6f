"""What a target's upstream scraper publishes, apart from the scraper that fetches it.

The exposition, the landing page and the start-up lines read these shapes for every target;
the scraper itself (``upstream.py``: HTTP, the ``/metrics`` parsers, each engine's reader) is
imported only where a target has an upstream URL, so a daemon that follows logs alone does
not load it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.engines.record import UpstreamValues
from exporter.engines.server_config import ServerConfig

REASONS = ("timeout", "refused", "http", "garbage", "too_large", "other")
ENDPOINTS = ("metrics", "server_info")


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    """Outcome of the newest scrape of one endpoint."""

    up: bool
    duration_seconds: float
    error: str | None = None  # one-line cause when down; never contains request headers


@dataclass(frozen=True, slots=True)
class UpstreamSnapshot:
    """Everything one target's scraper knows, published as a whole."""

    endpoints: Mapping[str, EndpointStatus] = field(default_factory=dict)
    errors: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (endpoint, reason)
    dropped: Mapping[str, int] = field(default_factory=dict)  # /metrics samples, by reason
    values: UpstreamValues | None = None
    config: ServerConfig | None = None
    metrics_endpoint: str | None = None  # "ok" | "empty" | "missing" | "down" | None
    scraped_at: float | None = None  # the newest scrape, on the daemon's clock (clock.now)
