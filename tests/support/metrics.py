"""Reading exposition text the way Prometheus does, for assertions on what a scrape shows."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition.collector import SpecwatchCollector
from exporter.target import Target

T0 = 1_800_000_000.0
"""The time a ``Clock`` starts at."""


class Scrape:
    """Samples of one exposition, looked up by name and a subset of labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def values(self, name: str, **labels: str) -> list[float]:
        return [
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float | None:
        """The single matching value, or None when the series is absent."""
        found = self.values(name, **labels)
        assert len(found) <= 1, f"{name} {labels} matches {len(found)} series"
        return found[0] if found else None

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def scrape(port: int, host: str = "127.0.0.1") -> Scrape:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        return Scrape(resp.read().decode())


class Clock:
    """A clock a test moves by hand, so staleness is decided without waiting."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def render(targets: list[Target], clock: Callable[[], float], stale_after: float = 60) -> Scrape:
    """What a scrape of the collector over ``targets`` shows at ``clock``'s time."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(targets, stale_after, clock))
    return Scrape(generate_latest(registry).decode())
