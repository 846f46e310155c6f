"""The landing page ``/``: per target, what an on-call wants to know first.

The verdict on the node first (its state, since when, and the fix), then whether each log
path is followed (and why not), how old the newest decode window is, and the active
findings: enough to tell a sidecar pointed at the wrong file from an idle server without
reading ``/metrics``. Built per request from the same snapshots the collector renders.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone

from exporter import __version__
from exporter.analysis.algorithms import off_cause
from exporter.analysis.baseline import SOURCE_WORDS
from exporter.analysis.judge import STATES
from exporter.clock import now as clock_now
from exporter.engines.record import drafting_off
from exporter.engines.server_config import ServerConfig
from exporter.exposition.collector import TargetView, judged
from exporter.exposition.insight import Insight
from exporter.exposition.setup import setup_lines
from exporter.exposition.watched import Watched
from exporter.sources.tail.health import explain
from exporter.state.target_state import LatestDecode


def _state(reason: str) -> str:
    return explain(reason) if reason in ("ok", "waiting") else f"NOT FOLLOWED: {explain(reason)}"


def landing_page(
    targets: Sequence[Watched],
    stale_after: float,
    clock: Callable[[], float] = clock_now,
    view: Callable[[Watched], TargetView | None] | None = None,
) -> bytes:
    """The page, from each target's render for ``/metrics`` when ``view`` gives it (so
    clients polling the page cost little more than a scrape), else judged here."""
    now = clock()
    sections = "".join(
        _target_section(t, now, stale_after, view(t) if view is not None else None) for t in targets
    )
    return (
        "<!doctype html><html><head><title>specwatch</title></head><body>"
        f"<h1>specwatch {html.escape(__version__)}</h1>"
        "<p>Prometheus exporter for speculative decoding.</p>"
        '<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li></ul>'
        f"<h2>Targets</h2>{sections}</body></html>"
    ).encode()


def _speculation(config: ServerConfig, fresh: Iterable[LatestDecode]) -> str:
    """What the node's speculation is doing now, in words: off under adaptive speculation is
    its own state, not an accept length of 1.00."""
    if any(drafting_off(window.record) for window in fresh):
        return f"; speculation off ({off_cause(config.engine)}): plain decoding at this load"
    if config.adaptive and config.steps_now is not None:
        return f"; adaptive speculation drafting {config.steps_now} steps"
    return ""


def _accept_now(fresh: Iterable[LatestDecode]) -> str:
    """The fresh windows' accept length: one rank's, or the mean and lowest of several; a
    window with drafting off has none, as on /metrics."""
    lengths = [
        length
        for w in fresh
        if (length := w.record.accept_length) is not None and not drafting_off(w.record)
    ]
    if not lengths:
        return ""
    if len(lengths) == 1:
        return f"; accept length {lengths[0]:.2f}"
    mean = sum(lengths) / len(lengths)
    return f"; accept length {mean:.2f} (lowest DP rank {min(lengths):.2f})"


def _speed_now(target: Watched, insight: Insight) -> str:
    """The speedup now, with where its baseline came from."""
    if insight.speedup is None or target.baseline is None:
        return ""
    source = SOURCE_WORDS.get(target.baseline.kind, target.baseline.kind)
    return f"; {insight.speedup:.2f}x the baseline ({source})"


def _verdict(insight: Insight) -> str:
    """The node's state first: what, since when, on what, and the fix when something is
    wrong (the words of the daemon's log line for it)."""
    judgement, verdict = insight.judgement, insight.verdict
    if judgement is None or verdict is None:
        return ""
    since = datetime.fromtimestamp(verdict.since, tz=timezone.utc)
    text = (
        f"<p><strong>Verdict: {html.escape(verdict.state)}</strong> "
        f"({html.escape(STATES[verdict.state])}) since {since:%Y-%m-%d %H:%M:%S} UTC: "
        f"{html.escape(judgement.head)}. {html.escape(judgement.judged_on())}</p>"
    )
    told = judgement.verdict
    if told is not None:
        text += f"<p>Seen: {html.escape(told.seen)}</p><p>Fix: {html.escape(told.fix)}</p>"
    elif judgement.notes:
        text += f"<p>{html.escape('; '.join(judgement.notes))}.</p>"
    return text


def _target_section(
    target: Watched, now: float, stale_after: float, view: TargetView | None
) -> str:
    if view is None:
        view = judged(target, now, stale_after)
    snap, fresh, insight = view.snap, view.fresh, view.insight
    findings = insight.findings
    logs = (
        "".join(
            f"<li><code>{html.escape(path)}</code>: {html.escape(_state(reason))}</li>"
            for path, reason in sorted(snap.log_sources.items())
        )
        or "<li>no log configured</li>"
    )
    if snap.last_decode_at is None:
        window = "no decode window seen yet"
        values = insight.fallback
        if values is not None and values.accept_length is not None:
            basis = (
                "gauge of its newest window"
                if values.accept_length_gauge
                else "counters since the scrape before"
            )
            window = f"accept length {values.accept_length:.2f} from the server's /metrics {basis}"
    else:
        age = max(0.0, now - snap.last_decode_at)
        shown = "" if age < stale_after else f" (stale: older than {stale_after:g} s, not exported)"
        window = f"newest decode window {age:.0f} s ago{shown}"
        window += _accept_now(fresh.values())
        window += _speed_now(target, insight)
        window += _speculation(insight.config, fresh.values())
    active = (
        "".join(
            f"<li>{html.escape(f.severity)} <code>{html.escape(f.code)}</code>: "
            f"{html.escape(f.summary)}</li>"
            for f in findings
        )
        or "<li>none</li>"
    )
    setup = "".join(
        f"<li>{html.escape(what)}: {html.escape(words)}</li>" for what, words in setup_lines(target)
    )
    return (
        f"<h3>{html.escape(target.name)}</h3>"
        f"{_verdict(insight)}"
        f"<p>Found:</p><ul>{setup}</ul>"
        f"<p>Logs:</p><ul>{logs}</ul>"
        f"<p>{window}</p>"
        f"<p>Active findings:</p><ul>{active}</ul>"
    )
