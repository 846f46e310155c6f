"""``specwatch run``: the exporter daemon."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from exporter.cli import UsageError
from exporter.commands import add_baseline_flags, baseline_flag
from exporter.config import Config, ConfigError, load_config


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("run", help="run the exporter daemon", description=__doc__)
    p.add_argument("--config", type=Path, help="YAML config file (flags win over it)")
    p.add_argument(
        "--log-file",
        dest="log_files",
        action="append",
        metavar="PATH",
        help="server log to tail; a glob follows the newest match; '-' reads stdin; repeatable",
    )
    p.add_argument("--target", dest="name", metavar="NAME", help="value of the target label")
    p.add_argument(
        "--engine",
        choices=["auto", "sglang", "vllm"],
        help="the serving engine (default auto: detected from the log or /metrics)",
    )
    p.add_argument("--metrics-url", metavar="URL", help="the server's /metrics")
    p.add_argument("--server-info-url", metavar="URL", help="the server's /server_info")
    p.add_argument("--bearer-token-file", type=Path, metavar="FILE", help="API key for upstream")
    p.add_argument("--draft-config", type=Path, metavar="PATH", help="draft config.json or dir")
    p.add_argument("--listen", metavar="HOST:PORT", help="default 0.0.0.0:9477")
    p.add_argument(
        "--from-beginning",
        action="store_const",
        const=True,
        help="replay files present at start instead of starting at their end",
    )
    add_baseline_flags(p)
    p.add_argument("--stale-after", type=float, metavar="SECONDS", help="default 60")
    p.add_argument("--web-config", type=Path, metavar="FILE", help="TLS / basic auth config")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=main)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "log_files",
        "name",
        "engine",
        "metrics_url",
        "server_info_url",
        "bearer_token_file",
        "draft_config",
        "listen",
        "from_beginning",
        "baseline_tok_s",
        "baseline_curve",
        "baseline_bench",
        "expected_accept_length",
        "stale_after",
        "web_config",
    )
    return {k: getattr(args, k) for k in keys}


def effective_config(args: argparse.Namespace) -> Config:
    try:
        return load_config(args.config, flag_overrides(args))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s level=%(levelname)s msg=%(message)s",
    )
    config = effective_config(args)
    from exporter.daemon import Daemon, serve  # heavy imports only once flags are valid

    try:
        daemon = Daemon(config)
    except ValueError as exc:  # baseline curves and files are validated here
        raise UsageError(f"{baseline_flag(args)}: {exc}") from None
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--listen {config.listen}: {exc.strerror or exc}") from None
    return serve(daemon)
