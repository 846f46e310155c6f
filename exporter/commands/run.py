"""``specwatch run``: the exporter daemon."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING, Any

from exporter.commands import COMMANDS, add_baseline_flags, add_config_flag, baseline_flag, path_arg
from exporter.commands.usage import UsageError
from exporter.config import Config, load_config
from exporter.engines import registry
from exporter.runtime import starting
from exporter.settings import ConfigError

if TYPE_CHECKING:
    from exporter.daemon import Daemon


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("run", help=COMMANDS["run"], description=__doc__)
    add_config_flag(p)
    p.add_argument(
        "--log-file",
        dest="log_files",
        action="append",
        metavar="PATH",
        help="server log to tail; a glob follows the newest match; '-' reads stdin (specwatch "
        "exits with status 1 when it ends); repeatable",
    )
    p.add_argument(
        "--log-missing-grace",
        type=float,
        metavar="SECONDS",
        help="how long a log path may not exist before it is reported missing (default 60)",
    )
    p.add_argument("--target", dest="name", metavar="NAME", help="value of the target label")
    p.add_argument(
        "--engine",
        type=str.lower,  # SGLang, vLLM, TensorRT-LLM as their projects write them
        choices=["auto", *registry.NAMES],
        help="the serving engine (default auto: detected from the log or /metrics)",
    )
    p.add_argument(
        "--url",
        metavar="URL",
        help="the server's base URL, e.g. http://127.0.0.1:30000: its /metrics and server info "
        "are found from it",
    )
    p.add_argument(
        "--metrics-url", metavar="URL", help="the server's metrics URL, where not found from --url"
    )
    p.add_argument(
        "--metrics-prefix",
        metavar="PREFIX",
        help="the start of the server's metric names when not its engine's own "
        "(llamacpp:, ray_vllm_; default: found in the exposition)",
    )
    p.add_argument(
        "--server-info-url",
        metavar="URL",
        help="the server's /server_info, where not found from --url",
    )
    p.add_argument(
        "--bearer-token-file",
        type=path_arg,
        metavar="FILE",
        help="file holding the server's API key, sent as a bearer token to its endpoints",
    )
    p.add_argument(
        "--draft-config", type=path_arg, metavar="PATH", help="the draft's config.json or folder"
    )
    # exporter-toolkit's names too, which scripts written for Go exporters pass.
    p.add_argument(
        "--listen",
        "--web.listen-address",
        metavar="HOST:PORT",
        help="address to serve on (default 0.0.0.0:9477)",
    )
    p.add_argument(
        "--from-beginning",
        action="store_const",
        const=True,
        help="replay files present at start instead of starting at their end",
    )
    add_baseline_flags(p)
    p.add_argument(
        "--request-label-header",
        metavar="NAME",
        help="a header the server logs with each finished request; its value splits the "
        "per-request accept-length histogram by traffic class",
    )
    p.add_argument(
        "--stale-after",
        type=float,
        metavar="SECONDS",
        help="age after which a decode window is no longer exported as current (default 60)",
    )
    p.add_argument(
        "--web-config",
        "--web.config.file",
        dest="web_config",
        type=path_arg,
        metavar="FILE",
        help="TLS and basic auth, in the Prometheus exporter-toolkit format",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="level of specwatch's own log lines (default info)",
    )
    p.set_defaults(func=main)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "log_files",
        "log_missing_grace",
        "name",
        "engine",
        "url",
        "metrics_url",
        "metrics_prefix",
        "server_info_url",
        "bearer_token_file",
        "draft_config",
        "listen",
        "from_beginning",
        "baseline_tok_s",
        "baseline_curve",
        "baseline_bench",
        "baseline_log",
        "expected_accept_length",
        "request_label_header",
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
    with starting():
        daemon = _daemon(args)
    from exporter.daemon import serve

    return serve(daemon)


def _daemon(args: argparse.Namespace) -> Daemon:
    """The daemon the flags and config describe, or the usage error that names the key."""
    config = effective_config(args)
    from exporter.daemon import Daemon  # heavy imports only once flags are valid

    try:
        return Daemon(config)
    except ValueError as exc:  # baseline curves and files are validated here
        raise UsageError(f"{baseline_flag(args)}: {exc}") from None
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--listen {config.listen}: {exc.strerror or exc}") from None
