"""Reading exposition text the way Prometheus does, for assertions on what a scrape shows."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """Samples of one exposition, looked up by name and a subset of labels."""

    def __init__(self, text: str) -> None:
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
