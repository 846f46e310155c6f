"""``specwatch doctor``: one-shot diagnosis of a server, a log and/or a draft config.

Prints every finding with what was seen, why it matters and how to fix it. Exit status: 0 when
clean (info findings allowed), 1 for warnings or when a given source could not be read, 3 for
a critical finding, 2 for bad flags. ``--json`` prints one object for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from exporter.analysis.findings import CRITICAL, WARNING, DecodeSample, Finding, evaluate
from exporter.cli import UsageError
from exporter.config import check_http_url
from exporter.engines.record import StatsRecord, logged_seconds
from exporter.engines.server_config import (
    ConfigTracker,
    DraftConfigError,
    ServerConfig,
    from_draft_config,
    with_local_draft,
)
from exporter.engines.sglang import LogLine
from exporter.engines.sglang_startup import ServerArgsEvent, parse_event
from exporter.parse.pipeline import LineProcessor, iter_line_batches
from exporter.sources.upstream import UpstreamScraper, UpstreamSnapshot
from exporter.state.evidence import Evidence

EXIT_CLEAN, EXIT_WARNING, EXIT_CRITICAL = 0, 1, 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="diagnose a server, log or draft config and suggest fixes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--log-file", metavar="PATH", help="server log to read from its start")
    p.add_argument("--draft-config", metavar="PATH", help="draft config.json or its folder")
    p.add_argument("--bearer-token-file", metavar="FILE", help="API key for --url")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="per request")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=run)


class _LogSink:
    """``RecordSink`` that keeps what diagnosis needs from a whole log, read once."""

    def __init__(self) -> None:
        self.tracker = ConfigTracker()
        self.evidence = Evidence()
        self.newest: float | None = None
        self.records = 0

    def _seen(self, iso_time: str | None) -> float:
        at = logged_seconds(iso_time)
        if at is None:
            at = self.newest or 0.0
        self.newest = at if self.newest is None else max(self.newest, at)
        return at

    def on_lines(self, count: int) -> None:
        pass

    def on_record(self, record: StatsRecord) -> None:
        self.records += 1
        self.evidence.add_record(record, self._seen(record.time))

    def on_unrecognized(self, reason: str) -> None:
        self.evidence.add_unrecognized()

    def on_skipped(self, reason: str) -> None:
        pass

    def on_event(self, line: LogLine) -> None:
        self._seen(line.time)
        event = parse_event(line.message)
        if isinstance(event, ServerArgsEvent):
            self.evidence = Evidence()  # a restart: windows of the old run describe old flags
        if event is not None:
            self.tracker.observe(event, (line.dp_rank, line.tp_rank))


def read_log(path: str) -> _LogSink:
    """Run a whole log through the daemon's own line processor."""
    sink = _LogSink()
    processor = LineProcessor(sink)
    try:
        with open(path, "rb") as stream:
            for batch in iter_line_batches(stream):
                processor.process(batch)
        processor.finish()
    except OSError as exc:
        raise UsageError(f"--log-file: cannot read {path}: {exc.strerror}") from None
    return sink


@dataclass
class Diagnosis:
    """What doctor checked, the merged config, and the findings."""

    findings: list[Finding]
    config: ServerConfig
    sources: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def exit_status(self) -> int:
        severities = {f.severity for f in self.findings}
        if CRITICAL in severities:
            return EXIT_CRITICAL
        return EXIT_WARNING if WARNING in severities or self.problems else EXIT_CLEAN

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "status": self.exit_status(),
            "findings": [f.to_json_dict() for f in self.findings],
            "config": self.config.to_json_dict(),
            "sources": self.sources,
            "problems": self.problems,
        }


_ENDPOINTS = ("/metrics", "/server_info")


def base_url(url: str) -> str:
    """The server's base URL from ``--url``, checked as ``specwatch run`` checks its URLs.

    An endpoint's URL is refused with the base URL to give instead: doctor appends the
    endpoints itself, and ``.../metrics/metrics`` would answer 404, read as metrics disabled.
    """
    try:
        check_http_url(url)
    except ValueError as exc:
        raise UsageError(f"--url {url}: {exc}") from None
    base = url.rstrip("/")
    for endpoint in _ENDPOINTS:
        if urlsplit(base).path.endswith(endpoint):
            server = base.removesuffix(endpoint)
            raise UsageError(
                f"--url {url}: give the server's base URL ({server}), not its {endpoint}"
            )
    return base


def scrape(url: str, timeout: float, token_file: str | None) -> UpstreamSnapshot:
    base = base_url(url)
    scraper = UpstreamScraper(
        f"{base}/metrics", f"{base}/server_info", timeout=timeout, token_file=token_file
    )
    return scraper.scrape_once()


def diagnose(args: argparse.Namespace) -> Diagnosis:
    """Gather every source given on the command line and evaluate the findings once."""
    config = ServerConfig()
    sources: dict[str, str] = {}
    problems: list[str] = []
    evidence, now = Evidence(), 0.0
    upstream: dict[str, Any] = {}
    upstream_window: DecodeSample | None = None
    if args.url:
        snap = scrape(args.url, args.timeout, args.bearer_token_file)
        for name, status in snap.endpoints.items():
            sources[name] = "ok" if status.up else f"down ({status.error})"
            if not status.up and not (name == "metrics" and snap.metrics_endpoint == "missing"):
                problems.append(f"{args.url} {name}: {status.error}")
        config = config.merged(snap.config or ServerConfig())
        upstream, upstream_window = _upstream_inputs(snap)
    if args.log_file:
        log = read_log(args.log_file)
        sources["log"] = f"{log.records} stats lines"
        config = config.merged(log.tracker.config)
        evidence, now = log.evidence, log.newest or 0.0
    if args.draft_config:
        try:
            config = config.merged(from_draft_config(args.draft_config))
        except DraftConfigError as exc:
            raise UsageError(f"--draft-config: {exc}") from None
        sources["draft_config"] = "ok"
    config = with_local_draft(config)
    observations = evidence.observations(config, now, **upstream)
    if not observations.windows and upstream_window is not None:
        observations = replace(observations, windows=(upstream_window,))
    return Diagnosis(evaluate(observations), observations.config, sources, problems)


def _upstream_inputs(snap: UpstreamSnapshot) -> tuple[dict[str, Any], DecodeSample | None]:
    """Finding inputs from one scrape; its gauges stand in for a window when no log is read."""
    inputs: dict[str, Any] = {"metrics_endpoint": snap.metrics_endpoint}
    values = snap.values
    if values is None:
        return inputs, None
    inputs["upstream_busy"] = bool(values.running_requests)
    window = DecodeSample(
        accept_length=values.accept_length,
        running=None if values.running_requests is None else int(values.running_requests),
        queued=None if values.queued_requests is None else int(values.queued_requests),
    )
    return inputs, window


def render_text(diagnosis: Diagnosis) -> str:
    lines = []
    if diagnosis.sources:
        checked = ", ".join(f"{k}: {v}" for k, v in diagnosis.sources.items())
        lines.append(f"checked: {checked}")
    lines.extend(f"problem: {p}" for p in diagnosis.problems)
    if not diagnosis.findings:
        lines.append("no findings: nothing wrong was seen in what was checked.")
    for finding in diagnosis.findings:
        lines += [
            "",
            f"{finding.severity.upper()}  {finding.code}: {finding.summary}",
            f"  seen: {finding.seen}",
            f"  why:  {finding.why}",
            f"  fix:  {finding.fix}",
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if not (args.url or args.log_file or args.draft_config):
        raise UsageError("give at least one of --url, --log-file, --draft-config")
    if args.timeout <= 0:
        raise UsageError("--timeout: must be positive")
    if args.url:
        base_url(args.url)  # refuse a bad URL before reading a long log
    diagnosis = diagnose(args)
    if args.json:
        print(json.dumps(diagnosis.to_json_dict(), indent=2))
    else:
        print(render_text(diagnosis))
    sys.stdout.flush()
    return diagnosis.exit_status()
