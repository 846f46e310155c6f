"""Command lines and config files for the demo's Prometheus and Alertmanager.

Both are told to act within seconds (1 s scrapes, ``DEMO_FOR`` on every rule), since a
newcomer watches the demo for minutes, not the hours an on-call rotation allows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from exporter.demo.loopback import Ports

REPO = Path(__file__).resolve().parents[2]
# The default mixin rendering: recording rules, then the alerts that read them.
RULE_FILES = (REPO / "alerts" / "prometheus_rules.yaml", REPO / "alerts" / "prometheus_alerts.yaml")
ALERTMANAGER_EXAMPLE = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
DEMO_FOR = "10s"  # the shipped rules wait minutes before firing; the demo cannot
# A firing alert is held this long after its condition clears. Like the shipped 5 minutes, it
# must outlast the low-accept alert's two-minute recency window: the collapse page's inhibition
# covers its warning twin until that twin has resolved, so a recovery opens no ticket.
DEMO_KEEP_FIRING = "130s"
PROMETHEUS_JOB = "specwatch"  # the job name the shipped rules select


def alertmanager_argv(binary: str, workdir: Path, webhook: int, listen: int) -> list[str]:
    """The shipped example config, delivering to the demo's webhook within seconds, served on
    port ``listen``.

    Its routes and inhibitions are kept as they are, so the demo shows what an on-call would
    get from them: the page, the ticket, and the twin alert held back.
    """
    config = demo_alertmanager_config(f"http://127.0.0.1:{webhook}/")
    return [
        binary,
        f"--config.file={_config_file(workdir / 'alertmanager.yml', config)}",
        f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address=127.0.0.1:{listen}",
        "--cluster.listen-address=",
    ]


def prometheus_argv(binary: str, workdir: Path, ports: Ports) -> list[str]:
    """Scrape the exporter under the shipped rules' job name, alert to the demo's Alertmanager,
    serve on ``ports.prometheus``."""
    rules = workdir / "specwatch-rules.yaml"
    demo_rules(rules)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [
                {"static_configs": [{"targets": [f"127.0.0.1:{ports.alertmanager}"]}]}
            ]
        },
        "scrape_configs": [
            {
                "job_name": PROMETHEUS_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{ports.exporter}"]}],
            }
        ],
    }
    return [
        binary,
        f"--config.file={_config_file(workdir / 'prometheus.yml', config)}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{ports.prometheus}",
        "--rules.alert.resend-delay=2s",
    ]


def demo_alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """``deploy/alertmanager/alertmanager.yml`` with every receiver posting to ``webhook_url``."""
    config: dict[str, Any] = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    config["route"].update(group_wait="1s", group_interval="2s")
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = webhook_url
    return config


def demo_rules(target: Path) -> None:
    """The project's rules in one file, every ``for`` cut to ``DEMO_FOR`` and every
    ``keep_firing_for`` to ``DEMO_KEEP_FIRING``."""
    groups = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    rules = {"groups": groups}
    for group in groups:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = DEMO_FOR
            if "keep_firing_for" in rule:
                rule["keep_firing_for"] = DEMO_KEEP_FIRING
    target.write_text(yaml.safe_dump(rules, sort_keys=False))


def _config_file(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path
