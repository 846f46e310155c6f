"""``specwatch mixin --config FILE --out DIR``: the alerts and dashboards for one setup.

Renders, from the installed package alone, what monitoring-mixins ship: the alert rules and
recording rules (``prometheus_alerts.yaml``, ``prometheus_rules.yaml``), the Grafana
dashboards (``dashboards_out/*.json``), a PrometheusRule for the Prometheus Operator
(``prometheusrule.yaml``) and the runbook the alerts link to (``runbook.md``), for the
selector, labels, thresholds and runbook location of the mixin config. Without ``--config``
the defaults give the rules and dashboards the project ships.
"""

from __future__ import annotations

import argparse

from exporter.commands import COMMANDS, path_arg
from exporter.commands.usage import UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mixin",
        help=COMMANDS["mixin"],
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument(
        "--config", type=path_arg, metavar="FILE", help="mixin config (YAML; default: shipped)"
    )
    parser.add_argument(
        "--out", type=path_arg, metavar="DIR", required=True, help="directory to write into"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The settings models and grafana-foundation-sdk: imported only by the command that needs them.
    from exporter.mixin.render import MAKE_MIXIN, render, write
    from exporter.mixin_config import load_mixin_config
    from exporter.settings import ConfigError

    try:
        config = load_mixin_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out: {args.out} is not a directory")
    try:
        # Without a config it renders exactly the repository's copy, and says so alike.
        made_by = f"specwatch mixin --config {args.config}" if args.config else MAKE_MIXIN
        written = write(render(config, made_by), args.out)
    except OSError as exc:
        raise UsageError(f"--out: cannot write {exc.filename}: {exc.strerror}") from None
    for path in written:
        print(f"wrote {path}")
    return 0
