"""``specwatch doctor``: one-shot diagnosis of a server, a log and/or a draft config.

Judges the node's state from its log (accept length collapsed or low, slower than the
non-speculative baseline, a baseline that cannot be right) by the thresholds the alert rules
use, and names causes in its configuration (findings), each with what was seen, why it
matters and how to fix it. A log holding restarts is judged by its newest server run.

Exit status: 0 nothing wrong (info findings allowed); 1 a warning, a source that could not be
read, or nothing to judge (a log without stats lines; /metrics without SGLang series and no
log); 3 a critical verdict or finding; 2 bad flags. ``--json`` prints one object for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from exporter.analysis.baseline import Baseline
from exporter.analysis.findings import (
    CRITICAL,
    SEVERITY_ORDER,
    WARNING,
    DecodeSample,
    Finding,
    Observations,
    evaluate,
)
from exporter.analysis.findings.server_life import metrics_left_off
from exporter.analysis.judge import (
    Case,
    Judgement,
    Method,
    SpeedBaseline,
    judge,
    method_of,
    one_stretch,
)
from exporter.analysis.thresholds import DEFAULT, MIN_WINDOWS, Thresholds
from exporter.analysis.verdicts import Verdict
from exporter.commands import (
    COMMANDS,
    Judging,
    add_baseline_flags,
    add_config_flag,
    add_mixin_config_flag,
    judging_options,
    mixin_thresholds,
)
from exporter.commands.usage import UsageError
from exporter.config import check_http_url
from exporter.engines import registry
from exporter.engines.draft_config import (
    DraftConfigError,
    DraftLookups,
    draft_seen,
    from_draft_config,
    with_local_draft,
)
from exporter.engines.server_config import ServerConfig
from exporter.parse.reader import ReadError, read_logs
from exporter.report.builder import ReportBuilder
from exporter.report.summary import Report, RunSummary
from exporter.report.text import run_line
from exporter.sources.upstream import UpstreamScraper
from exporter.sources.upstream_snapshot import UpstreamSnapshot

EXIT_CLEAN, EXIT_WARNING, EXIT_CRITICAL = 0, 1, 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "doctor",
        help=COMMANDS["doctor"],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--log-file", metavar="PATH", help="server log to read from its start")
    p.add_argument("--draft-config", metavar="PATH", help="draft config.json or its folder")
    p.add_argument("--bearer-token-file", metavar="FILE", help="API key for --url")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="per request")
    p.add_argument(
        "--scrape-gap",
        type=float,
        default=5.0,
        metavar="S",
        help="with --url: seconds between two /metrics scrapes when accept length comes from "
        "an engine's draft counters",
    )
    add_config_flag(p)
    p.add_argument("--target", metavar="NAME", help="with --config: the target to judge by")
    add_baseline_flags(p)
    add_mixin_config_flag(p)
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=run)


def read_log(
    path: str, judging: Judging | None = None, thresholds: Thresholds = DEFAULT
) -> ReportBuilder:
    """Run a whole log through the reader and builder ``specwatch report`` uses.

    One fold of the log for both commands: the same DP-rank sums, server runs, verdicts and
    draft-token advice, so ``doctor`` and ``report`` never disagree about a log.
    """
    judging = judging or Judging()
    builder = ReportBuilder(
        judging.baseline, judging.expected_accept_length, judging.baseline_option, thresholds
    )
    try:
        read_logs([path], builder)
    except ReadError as exc:
        raise UsageError(f"--log-file: {exc}") from None
    return builder


@dataclass
class Diagnosis:
    """What doctor checked, the merged config, the verdicts on the node and the findings."""

    findings: list[Finding]
    config: ServerConfig
    sources: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    run: RunSummary | None = None  # the newest server run of the log, when one was read
    notes: list[str] = field(default_factory=list)  # what was judged, in plain words
    baseline: Baseline | None = None  # what speed is judged against, and where it came from
    judgement: Judgement | None = None  # the node's state now (``analysis.judge``)

    def exit_status(self) -> int:
        severities = {f.severity for f in self.findings} | {v.severity for v in self.verdicts}
        if CRITICAL in severities:
            return EXIT_CRITICAL
        return EXIT_WARNING if WARNING in severities or self.problems else EXIT_CLEAN

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "status": self.exit_status(),
            "verdict": self.judgement.to_json_dict() if self.judgement else None,
            "verdicts": [v.to_json_dict() for v in self.verdicts],
            "findings": [f.to_json_dict() for f in self.findings],
            "run": self.run.to_json_dict() if self.run else None,
            "config": self.config.to_json_dict(),
            "sources": self.sources,
            "problems": self.problems,
            "notes": self.notes,
            "baseline": None if self.baseline is None else self.baseline.to_json_dict(),
        }


def base_url(url: str) -> str:
    """``--url`` checked as ``specwatch run`` checks its URLs.

    The server's base URL is what to give, and an endpoint's URL (``.../metrics``) is
    understood as it: the scraper finds each endpoint from it as the daemon does.
    """
    try:
        check_http_url(url)
    except ValueError as exc:
        raise UsageError(f"--url {url}: {exc}") from None
    return url


@dataclass(frozen=True, slots=True)
class Probe:
    """What ``--url`` found: the scrape to judge, and how it was taken."""

    snapshot: UpstreamSnapshot
    engine: str | None  # whose metric names /metrics used
    gap: float | None  # seconds between two /metrics scrapes, when counters needed two
    scraper: UpstreamScraper  # where each endpoint was found, and what was absent
    drafts: float | None = None  # draft rounds the counters counted between the two


def probe(url: str, timeout: float, token_file: str | None, gap: float) -> Probe:
    """Scrape the server as the daemon would, in the way its engine needs.

    The endpoints are found from the base URL as ``specwatch run --url`` finds them. Where
    the engine counts its drafts, its accept length is their increase between two scrapes, so
    a second one follows ``gap`` seconds later (said on stderr while waiting), also where the
    first had a gauge of the engine's newest window.
    """
    scraper = UpstreamScraper(url=base_url(url), timeout=timeout, token_file=token_file)
    snap = scraper.scrape_once()
    waited = None
    drafts = None
    values = snap.values
    if values is not None and values.drafts_total is not None:
        print(
            f"waiting {gap:g} s for a second scrape of {scraper.metrics_url}: its accept "
            "length comes from the counters' difference",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(gap)
        snap, waited = scraper.scrape_once(), gap
        first = values.drafts_total
        later = snap.values.drafts_total if snap.values is not None else None
        if first is not None and later is not None and later >= first:
            drafts = later - first
    engine = snap.values.engine if snap.values is not None else None
    return Probe(snap, engine, waited, scraper, drafts)


def diagnose(args: argparse.Namespace) -> Diagnosis:
    """Gather every source given on the command line and judge them once."""
    judging = judging_options(args)
    thresholds = mixin_thresholds(args)
    config = ServerConfig()
    diagnosis = Diagnosis([], config, baseline=judging.baseline)
    upstream: dict[str, Any] = {}
    upstream_window: DecodeSample | None = None
    found = None
    if args.url:
        found = probe(args.url, args.timeout, args.bearer_token_file, args.scrape_gap)
        snap = found.snapshot
        _check_endpoints(args.url, found, diagnosis)
        # The engine whose names /metrics used: its fix texts, and no other engine's flags.
        config = config.merged(snap.config or ServerConfig()).merged(
            ServerConfig(engine=found.engine)
        )
        upstream, upstream_window = _upstream_inputs(snap)
    log = None
    if args.log_file:
        log = read_log(args.log_file, judging, thresholds)
        config = config.merged(log.config)
    draft = args.draft_config or judging.draft_config
    if draft:
        try:
            config = config.merged(from_draft_config(draft))
        except DraftConfigError as exc:
            raise UsageError(f"--draft-config: {exc}") from None
        diagnosis.sources["draft_config"] = "ok"
    config = with_local_draft(config, DraftLookups())
    if log is not None:
        report = log.finish((args.log_file,))
        diagnosis.sources["log"] = f"{report.stats_lines} stats lines"
        diagnosis.baseline = log.baseline  # configured, or learned from drafting-off windows
        _judge_log(report, diagnosis)
        observations = replace(log.observations(config), **upstream)
    else:
        observations = Observations(config=config, **upstream)
        if found is not None:
            told = found.snapshot.config is not None and found.snapshot.config.algorithm
            source = "server" if told else "draft config"
            _judge_scrape(found, config, judging, thresholds, diagnosis, source)
    if not observations.windows and upstream_window is not None:
        observations = replace(observations, windows=(upstream_window,))
    diagnosis.findings = evaluate(observations)
    diagnosis.config = observations.config
    if (draft_note := draft_seen(observations.config)) is not None:
        diagnosis.notes.append(f"draft {draft_note}")
    return diagnosis


def _check_endpoints(url: str, found: Probe, diagnosis: Diagnosis) -> None:
    """Each endpoint as found, and a failure as a problem, but a /metrics answering 404 from
    a server whose engine serves it only when switched on: the metrics_endpoint_disabled
    finding says that one with its fix."""
    snap = found.snapshot
    left_off = snap.config is not None and metrics_left_off(snap.config) is not None
    for name, status in snap.endpoints.items():
        diagnosis.sources[name] = "ok" if status.up else f"down ({status.error})"
        disabled = name == "metrics" and snap.metrics_endpoint == "missing" and left_off
        if not status.up and not disabled:
            diagnosis.problems.append(
                f"{found.scraper.endpoints.base or url} {name}: {status.error}"
            )
    for name, why in found.scraper.absent.items():
        diagnosis.sources[name] = f"none ({why})"
    if found.engine is not None:
        how = f"; two scrapes {found.gap:g} s apart" if found.gap is not None else ""
        where = urlsplit(found.scraper.metrics_url or "").path
        diagnosis.sources["metrics"] += f" ({registry.engine(found.engine).title} at {where}{how})"


def _judge_scrape(
    found: Probe,
    config: ServerConfig,
    judging: Judging,
    thresholds: Thresholds,
    diagnosis: Diagnosis,
    source: str,
) -> None:
    """The node judged from its /metrics alone, by the rules the daemon's alerts use;
    ``source`` says where its method was read, if anything named it."""
    snap = found.snapshot
    values = snap.values
    if snap.metrics_endpoint != "ok" or values is None:
        what = "has no engine's series" if snap.metrics_endpoint == "empty" else "was not read"
        diagnosis.problems.append(
            f"nothing could be judged of the node's state: /metrics {what} and no --log-file "
            "was given"
        )
        return
    if values.accept_length_gauge and not values.running_requests:
        diagnosis.problems.append(
            "accept length not judged: the server runs no request, and its gauge keeps the "
            "last value; give --log-file to judge its history"
        )
        return
    if values.accept_length is None:
        idle = f"no draft in the {found.gap:g} s between two scrapes" if found.gap else "none"
        diagnosis.problems.append(
            f"accept length not judged: /metrics gave {idle} (an idle server, or speculation "
            "off); give --log-file to judge its history"
        )
        return
    running = None if values.running_requests is None else int(values.running_requests)
    curve = judging.baseline
    baseline = curve.at(running) if curve and running and curve.covers(running) else None
    # Adaptive speculation has drafting off (0 steps in force): one token a round by design.
    off = config.active_steps == 0
    gauge = values.accept_length_gauge
    drafts = None if gauge else found.drafts
    basis = _basis(found, gauge)
    stretch = one_stretch(
        time.time(),
        MIN_WINDOWS,
        None if off else values.accept_length,
        drafts,
        running,
        values.gen_throughput if running else None,
        baseline,
        off,
    )
    engine = config.engine or found.engine
    config = replace(config, engine=engine)
    judgement = judge(
        Case(
            stretches=(stretch,),
            method=method_of(config, source),
            expected_accept_length=judging.expected_accept_length,
            thresholds=thresholds,
            baseline=None if curve is None else SpeedBaseline(curve.kind, judging.baseline_option),
            pipelined=config.pipelined,
            probes=config.probes,
            basis=basis,
            counted=drafts is not None,
        )
    )
    diagnosis.judgement = judgement
    diagnosis.verdicts = list(judgement.verdicts)
    if off:
        diagnosis.notes.append(
            f"speculation off (adaptive): {basis} shows 0 draft steps in force, so each round "
            "yields one token by design; judged by speed, not by accept length"
        )
    else:
        rounds = f" ({drafts:,.0f} draft rounds)" if drafts is not None else ""
        diagnosis.notes.append(f"accept length {values.accept_length:.2f} from {basis}{rounds}")
    diagnosis.notes += [_method_note(judgement.method), *judgement.notes]


def _basis(found: Probe, gauge: bool) -> str:
    """Where the judged accept length came from, in the note that gives it: the counters'
    increase between the two scrapes, or the server's gauge of its newest window (all its
    /metrics had: a first scrape, or no counted round finished between the two)."""
    if not gauge and found.gap is not None:
        return f"the server's counters between two scrapes {found.gap:g} s apart"
    if found.gap is not None:
        return (
            "the server's /metrics gauge of its newest window (its counters counted no "
            f"round in the {found.gap:g} s between two scrapes)"
        )
    return "the server's /metrics gauge of its newest window"


def _method_note(method: Method) -> str:
    """Which method the node is judged as, and where that was read; or that nothing said."""
    if method.known:
        return f"method {method.algorithm}, from the {method.source or 'configuration'}"
    return (
        "method unknown: nothing read names it (/metrics does not), so only what holds for "
        "every method is judged: a collapse, the lowest floor of any method, speed; give "
        "--log-file or --draft-config to judge it by its own"
    )


def _judge_log(report: Report, diagnosis: Diagnosis) -> None:
    """The log's windows, then where its finished requests' accept lengths fall."""
    _judge_windows(report, diagnosis)
    if report.requests is not None:
        diagnosis.notes.append(report.requests.distribution_line())


def _judge_windows(report: Report, diagnosis: Diagnosis) -> None:
    """The newest run's verdicts, and what could not be judged, in plain words."""
    if report.stats_lines == 0 and not report.critical:
        diagnosis.problems.append(
            "log: no stats lines, as the server said it would not log them this run: judge "
            "it from its /metrics (doctor --url http://HOST:PORT)"
            if report.config.stats_not_logged is not None
            else "log: no stats lines at all, so nothing could be judged (is the server "
            "logging at --log-level info, and is this its log?)"
        )
        return
    run = report.newest
    diagnosis.run = run
    diagnosis.judgement = report.judgement
    diagnosis.verdicts = list(report.verdicts)
    if report.not_judged is not None:
        diagnosis.problems.append(f"log: speculation not judged: {report.not_judged}")
    diagnosis.notes.append(report.headline)
    if report.earlier_runs_differ:
        diagnosis.notes += [
            f"earlier run {run_line(earlier, report.engines_differ)}"
            for earlier in report.runs[:-1]
        ]
    if report.breakeven is not None:
        diagnosis.notes.append(f"draft tokens: {report.breakeven.explanation}")
    if report.schedule is not None:
        diagnosis.notes.append(report.schedule)


def _upstream_inputs(snap: UpstreamSnapshot) -> tuple[dict[str, Any], DecodeSample | None]:
    """Finding inputs from one scrape; its gauges stand in for a window when no log is read."""
    inputs: dict[str, Any] = {"metrics_endpoint": snap.metrics_endpoint}
    values = snap.values
    if values is None:
        return inputs, None
    inputs["upstream_busy"] = bool(values.running_requests)
    off = snap.config is not None and snap.config.active_steps == 0
    window = DecodeSample(
        accept_length=None if off else values.accept_length,
        running=None if values.running_requests is None else int(values.running_requests),
        queued=None if values.queued_requests is None else int(values.queued_requests),
        drafting_off=off,
    )
    return inputs, window


def render_text(diagnosis: Diagnosis) -> str:
    lines = []
    if diagnosis.sources:
        checked = ", ".join(f"{k}: {v}" for k, v in diagnosis.sources.items())
        lines.append(f"checked: {checked}")
    if diagnosis.baseline is not None:
        lines.append(f"baseline: {diagnosis.baseline.describe()}")
    lines.extend(f"problem: {p}" for p in diagnosis.problems)
    lines.extend(f"judged: {note}" for note in diagnosis.notes)
    if not (diagnosis.findings or diagnosis.verdicts or diagnosis.problems):
        lines.append("nothing wrong: no verdict or finding holds for what was checked.")
    items: list[Verdict | Finding] = [*diagnosis.verdicts, *diagnosis.findings]
    for item in sorted(items, key=lambda i: SEVERITY_ORDER[i.severity]):
        lines += [
            "",
            f"{item.severity.upper()}  {item.code}: {item.summary}",
            f"  seen: {item.seen}",
            f"  why:  {item.why}",
            f"  fix:  {item.fix}",
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if not (args.url or args.log_file or args.draft_config):
        raise UsageError("give at least one of --url, --log-file, --draft-config")
    if args.timeout <= 0:
        raise UsageError("--timeout: must be positive")
    if not 0.5 <= args.scrape_gap <= 60:
        raise UsageError("--scrape-gap: must be 0.5 to 60 seconds")
    if args.url:
        base_url(args.url)  # refuse a bad URL before reading a long log
    diagnosis = diagnose(args)
    if args.json:
        print(json.dumps(diagnosis.to_json_dict(), indent=2))
    else:
        print(render_text(diagnosis))
    sys.stdout.flush()
    return diagnosis.exit_status()
