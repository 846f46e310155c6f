"""What the demo asks the running Prometheus: its alerts, and whether it has settled."""

from __future__ import annotations

import json
import urllib.parse

from exporter.demo.configs import PROMETHEUS_JOB
from exporter.demo.loopback import fetch


def alert_states(prometheus_url: str) -> dict[str, str] | None:
    """Each active alert's state by name; None while Prometheus does not answer."""
    body = fetch(f"{prometheus_url}/api/v1/alerts")
    if body is None:
        return None
    alerts = json.loads(body).get("data", {}).get("alerts", [])
    return {alert["labels"]["alertname"]: alert["state"] for alert in alerts}


def prometheus_settled(prometheus_url: str) -> bool:
    """Prometheus has scraped the exporter, and no rule still holds the time before that.

    A rule evaluated before the first scrape sees no ``up`` series and puts SpecwatchAbsent
    in pending: a false alarm nobody watching the demo should have to puzzle over.
    """
    query = urllib.parse.quote(f'up{{job="{PROMETHEUS_JOB}"}}')
    body = fetch(f"{prometheus_url}/api/v1/query?query={query}")
    if body is None:
        return False
    results = json.loads(body).get("data", {}).get("result", [])
    if not any(result["value"][1] == "1" for result in results):
        return False
    states = alert_states(prometheus_url)
    return states is not None and "SpecwatchAbsent" not in states
