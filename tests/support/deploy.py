"""The config a shipped deploy command line runs with, read by specwatch's own parser and loader."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import build_parser
from exporter.commands.run import flag_overrides
from exporter.config import Config, load_config
from tests.support.tools import REPO

DEPLOY = REPO / "deploy"
EXAMPLE = DEPLOY / "specwatch.example.yaml"


def parse_specwatch_argv(argv: list[str]) -> argparse.Namespace:
    """Parse a deploy file's ``specwatch ...`` argument list with the real CLI parser.

    argparse exits (status 2) on an unknown flag or a bad value; that becomes a test failure
    naming the command line instead of a bare SystemExit.
    """
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"specwatch rejects {argv}: exit {exc.code}")


def effective_config(argv: list[str], config_file: Path | None) -> Config:
    """The config ``specwatch <argv>`` would run with, ``--config`` read from ``config_file``.

    The path inside argv is where the file lands in a container or on a host; the test passes
    the repository file that is installed there. The environment is left out on purpose.
    """
    args = parse_specwatch_argv(argv)
    assert args.command == "run", f"deploy files start the daemon, not {args.command!r}"
    assert (args.config is None) == (config_file is None), f"--config in {argv} vs {config_file}"
    return load_config(config_file, flag_overrides(args), environ={})


def log_dirs_of(config: Config) -> set[str]:
    """The deepest fixed directory of each log path: what must be mounted, not a single file.

    For a glob that is the part before the first wildcard's path component.
    """
    dirs = set()
    for target in config.targets:
        for pattern in target.log_files:
            if pattern != "-":
                fixed = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
                dirs.add(fixed.rsplit("/", 1)[0] or "/")
    return dirs


# The Prometheus Operator's CRD schemas, reduced to the fields the manifests use.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        },
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "action": {"enum": ["replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep"]},
    },
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https"]},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": _RELABEL},
        "metricRelabelings": {"type": "array", "items": _RELABEL},
    },
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}},
}


def _operator_schema(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "metadata": {"type": "object", "required": ["name"]},
            "spec": spec,
        },
    }


def _monitor_schema(endpoints_key: str) -> dict[str, Any]:
    """PodMonitor and ServiceMonitor differ only in the name of their endpoint list."""
    return _operator_schema(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", endpoints_key],
            "properties": {
                "selector": _SELECTOR,
                "jobLabel": {"type": "string"},
                # the operator's per-scrape cap on samples (both monitor kinds have it)
                "sampleLimit": {"type": "integer", "minimum": 0},
                endpoints_key: {"type": "array", "minItems": 1, "items": _ENDPOINT},
            },
        }
    )


OPERATOR_SCHEMAS = {
    "PodMonitor": _monitor_schema("podMetricsEndpoints"),
    "ServiceMonitor": _monitor_schema("endpoints"),
    "PrometheusRule": _operator_schema(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "labels": _LABELS,
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": ["string", "integer"]},
                                        "for": _DURATION,
                                        "keep_firing_for": _DURATION,
                                        "labels": _LABELS,
                                        "annotations": _LABELS,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        }
    ),
}
