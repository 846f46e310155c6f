"""The repository's copy of the default rendering: ``make mixin`` (``python -m exporter.mixin``).

Without ``--out`` the default rendering is written where the repository keeps it
(``alerts/``, ``dashboards/``, ``deploy/kubernetes/base/``, and for the jsonnet face
``specwatch-mixin/rendered.json``); ``--check`` only reports (exit 1)
when those files are stale. ``--config FILE --out DIR`` renders like ``specwatch mixin``.
Only meaningful in a checkout: an installed package has no repository to write into.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from exporter.mixin.jsonnet import LIBRARY_NAME, LIBRARY_PATH
from exporter.mixin.render import DASHBOARDS_OUT, DASHBOARDS_V2_OUT, render, write
from exporter.mixin_config import MixinConfig, load_mixin_config
from exporter.settings import ConfigError

REPO = Path(__file__).resolve().parents[2]
# Where the repository keeps the default rendering of each output file.
COMMITTED: dict[str, str] = {
    "prometheus_alerts.yaml": "alerts/prometheus_alerts.yaml",
    "prometheus_rules.yaml": "alerts/prometheus_rules.yaml",
    "prometheusrule.yaml": "deploy/kubernetes/base/prometheusrule.yaml",
    "runbook.md": "alerts/runbook.md",
    LIBRARY_NAME: LIBRARY_PATH,
}


def committed_path(name: str) -> Path:
    """Where the repository keeps the default rendering of output file ``name``."""
    if name.startswith(DASHBOARDS_OUT + "/"):
        return REPO / "dashboards" / name.removeprefix(DASHBOARDS_OUT + "/")
    if name.startswith(DASHBOARDS_V2_OUT + "/"):
        # Beside dashboards/, not in it: provisioning loads every file of that folder, and
        # the same uid twice would be one dashboard too many.
        return REPO / "dashboards-v2" / name.removeprefix(DASHBOARDS_V2_OUT + "/")
    return REPO / COMMITTED[name]


def committed_files() -> dict[Path, str]:
    """Every file the repository keeps of the default rendering, with its text."""
    return {committed_path(name): text for name, text in render(MixinConfig()).items()}


def stale_files() -> list[Path]:
    """Committed files that differ from the default rendering."""
    return [
        path
        for path, text in committed_files().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make mixin", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", type=Path, metavar="FILE", help="mixin config (YAML)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="default: the repository")
    parser.add_argument("--check", action="store_true", help="fail if the repository is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"{path.relative_to(REPO)} is out of date: run make mixin")
        return 1 if stale else 0
    if args.config is not None and args.out is None:
        print(
            "make mixin: --out: required with --config (the repository keeps the defaults)",
            file=sys.stderr,
        )
        return 2
    try:
        config = load_mixin_config(args.config)
    except ConfigError as exc:
        print(f"specwatch mixin: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        written = write(render(config), args.out)
    else:
        files = committed_files()
        for path, text in files.items():
            path.write_text(text, encoding="utf-8")
        written = list(files)
    for path in written:
        print(f"wrote {path}")
    return 0
