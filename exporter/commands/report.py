"""``specwatch report``: a human summary of a log, optionally with an HTML page of charts."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from exporter.commands import (
    COMMANDS,
    add_baseline_flags,
    add_mixin_config_flag,
    judging_options,
    mixin_thresholds,
)
from exporter.commands.usage import UsageError
from exporter.engines.server_config import ServerConfig
from exporter.parse.reader import Progress, ReadError, total_size
from exporter.report import build_report
from exporter.report.text import render_text


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "report",
        help=COMMANDS["report"],
        description=__doc__,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="log files in order ('-' = stdin)")
    add_baseline_flags(p)
    p.add_argument(
        "--url",
        metavar="URL",
        help="the server's base URL: its setup (algorithm, draft, draft count) from its server "
        "info or /metrics, where the log does not say it",
    )
    p.add_argument("--html", type=Path, metavar="OUT", help="also write a page with charts")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_mixin_config_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    judging = judging_options(args)
    thresholds = mixin_thresholds(args)
    if args.html is not None:
        # Imported only for a page: its module and charts are no cost of every report.
        from exporter.report.html import MissingExtra, require_matplotlib

        try:
            require_matplotlib()  # fail before a long read, not after it
        except MissingExtra as exc:
            raise UsageError(str(exc)) from None
    try:
        report = build_report(
            args.files,
            judging.baseline,
            judging.expected_accept_length,
            Progress(total_size(args.files)),
            judging.baseline_option,
            thresholds=thresholds,
        )
    except ReadError as exc:
        raise UsageError(str(exc)) from None
    if args.url:
        report = replace(report, config=_server_setup(args.url).merged(report.config))
    if args.json:
        print(json.dumps(report.to_json_dict(), indent=2))
    else:
        sys.stdout.write(render_text(report))
    if args.html is not None:
        from exporter.report.html import render_html

        _write_html(args.html, render_html(report))
    return 0


def _write_html(path: Path, page: str) -> None:
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--html: cannot write {path}: {exc.strerror}") from None
    print(f"HTML report written to {path}", file=sys.stderr)


def _server_setup(url: str) -> ServerConfig:
    """What the server at ``url`` says of its setup, found as ``run --url`` finds it; the log's
    own start lines win over it (they describe the run that wrote the log). An endpoint that
    does not answer is said on stderr, and the report goes on from the log alone."""
    from exporter.config import check_http_url
    from exporter.sources.upstream import UpstreamScraper

    try:
        check_http_url(url)
    except ValueError as exc:
        raise UsageError(f"--url {url}: {exc}") from None
    snap = UpstreamScraper(url=url, timeout=5.0).scrape_once()
    for name, status in snap.endpoints.items():
        if not status.up:
            print(f"specwatch report: --url {name}: {status.error}", file=sys.stderr)
    return snap.config or ServerConfig()
