"""What specwatch found of a watched server, in a few lines: engine, algorithm, draft count in
the engine's own terms, where the draft's kind was read, each endpoint found or refused, and
the baseline with its source.

The first question of anyone who has just pointed specwatch at a server is whether it found
what they meant: the daemon logs these lines when they change and the landing page shows
them, so a wrong URL or a missing baseline is seen in the first minute, not at the first page.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from exporter.analysis.baseline import SOURCE_WORDS
from exporter.engines import registry
from exporter.engines.draft_config import draft_seen
from exporter.engines.server_config import ServerConfig
from exporter.exposition.families import bounded
from exporter.exposition.insight import merged_config
from exporter.exposition.watched import Watched
from exporter.redact import url_without_secrets
from exporter.sources.upstream_snapshot import EndpointStatus, UpstreamSnapshot

if TYPE_CHECKING:
    from exporter.sources.upstream import UpstreamScraper

_UP = EndpointStatus(True, 0.0)


def setup_lines(target: Watched) -> list[tuple[str, str]]:
    """(what, as found) pairs, in the order an operator checks them."""
    upstream = target.upstream.snapshot() if target.upstream is not None else None
    config = merged_config(target, upstream)
    if config.algorithm is not None:  # the server's text: a 1 MB one made a 2 MB log line
        config = replace(config, algorithm=bounded(config.algorithm))
    engine = _engine(target, config, upstream)
    lines = [
        ("engine", _engine_words(target, engine)),
        ("speculation", _speculation(config, engine)),
    ]
    # Whether the draft's kind was read from its files here or only the algorithm is known.
    if (draft := draft_seen(config)) is not None:
        lines.append(("draft", draft))
    if target.upstream is not None:
        lines += _endpoints(target.upstream, upstream)
    lines.append(("baseline", _baseline(target)))
    return lines


def _engine(target: Watched, config: ServerConfig, upstream: UpstreamSnapshot | None) -> str | None:
    if target.config.engine != "auto":
        return target.config.engine
    values = upstream.values if upstream is not None else None
    return config.engine or target.state.engine or (values.engine if values is not None else None)


def _engine_words(target: Watched, engine: str | None) -> str:
    if engine is None:
        return "not known yet: told by the log's first stats or start-up lines, or /metrics"
    how = "configured" if target.config.engine != "auto" else "detected"
    return f"{registry.engine(engine).title} ({how})"


def _speculation(config: ServerConfig, engine: str | None) -> str:
    """The algorithm and draft count as the engine's own flags name them."""
    if config.algorithm is None and config.num_steps is None:
        return "not known yet: told by the server's start-up lines or its server info"
    algorithm = config.algorithm or "algorithm not known"
    settings = registry.engine(engine).draft_settings if engine is not None else {}
    terms = [
        f"{name}={value}"
        for name, field in settings.items()
        if (value := getattr(config, field)) is not None
    ]
    if not terms and config.num_steps is not None:
        terms = [f"{config.num_steps} draft steps"]
    return f"{algorithm}, {', '.join(terms)}" if terms else algorithm


def _endpoints(
    scraper: UpstreamScraper, snapshot: UpstreamSnapshot | None
) -> list[tuple[str, str]]:
    """Each endpoint: where it answered, why it does not, or why it is not asked."""
    asked = snapshot is not None and snapshot.scraped_at is not None
    found = snapshot.endpoints if snapshot is not None else {}
    lines = []
    for name, url, candidates in (
        ("metrics", scraper.metrics_url, scraper.endpoints.metrics),
        ("server_info", scraper.server_info_url, scraper.endpoints.server_info),
    ):
        if not candidates:
            continue
        status = found.get(name)
        shown = url_without_secrets(url or candidates[0])
        if not asked:
            words = f"not asked yet ({shown})"
        elif name in scraper.absent:
            words = f"none: {scraper.absent[name]}"
        elif status is None and not found.get("metrics", _UP).up:
            words = "not asked while the server does not answer"
        elif status is None:
            words = "not asked: this engine serves none"
        elif status.up:
            words = f"found at {shown}"
        else:
            words = f"REFUSED at {shown}: {status.error}"
        lines.append((name, words))
    return lines


def _baseline(target: Watched) -> str:
    baseline = target.baseline
    if baseline is None:
        return (
            "none configured: speed is judged once one is learned from this node's windows "
            "with drafting off, or against the fleet's plain peers in Prometheus (the mixin's "
            "rules); until then only accept length"
        )
    return f"{baseline.describe()}, {SOURCE_WORDS.get(baseline.kind, baseline.kind)}"


def setup_text(target: Watched) -> str:
    """The lines as one log line."""
    return "; ".join(f"{what}: {words}" for what, words in setup_lines(target))
