"""The daemon's verdict on one target over time: the state the judge gives now, when that
state began, and one log line each time it changes.

Whoever judges the target (a scrape, the landing page, the daemon's own check every few
seconds) hands the judgement here; the state and its start are what ``/metrics`` exports as
``specwatch_verdict`` and ``specwatch_verdict_since_timestamp_seconds``, and a change is logged
once, at WARNING or ERROR when something is wrong, with its cause and fix, so ``journalctl``
tells an on-call what the alerts tell their pager. Findings that warn or page are logged
the same way when they appear.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import NamedTuple

from exporter.analysis.findings import CRITICAL, WARNING, Finding
from exporter.analysis.judge import STATE_ADVICE, STATES, Judgement

log = logging.getLogger("specwatch.verdict")

_LEVELS = {"critical": logging.ERROR, "warning": logging.WARNING}
# Finding codes remembered as already told, at most (their set is fixed and small).
_MAX_TOLD = 64


class Verdict(NamedTuple):
    """The state now and when it began (seconds on the wall clock)."""

    state: str
    since: float


class VerdictTrack:
    """One target's state over time; thread-safe."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._now: Verdict | None = None
        self._told: set[str] = set()

    def observe(self, judgement: Judgement, findings: Iterable[Finding], now: float) -> Verdict:
        """Take the judge's word as of ``now``: the state, since when, logged if it changed.

        The state keeps the start it had while it holds (a judgement's own ``since`` reaches
        back only as far as the windows it keeps), or an earlier one the windows show.
        """
        with self._lock:
            before = self._now
            since = judgement.since if judgement.since is not None else now
            changed = before is None or before.state != judgement.state
            if not changed and before is not None:
                since = min(before.since, since)
            self._now = Verdict(judgement.state, since)
            fresh = self._fresh_findings(findings)
        if changed and not (before is None and judgement.state == "no_decode"):
            _log_state(self._target, judgement, before)
        for finding in fresh:
            _log_finding(self._target, finding)
        return Verdict(judgement.state, since)

    def current(self) -> Verdict | None:
        with self._lock:
            return self._now

    def _fresh_findings(self, findings: Iterable[Finding]) -> list[Finding]:
        """The warning and critical findings not told while they last held."""
        serious = {f.code: f for f in findings if f.severity in (CRITICAL, WARNING)}
        fresh = [f for code, f in serious.items() if code not in self._told]
        self._told = set(list(serious)[:_MAX_TOLD])
        return fresh


def _log_state(target: str, judgement: Judgement, before: Verdict | None) -> None:
    severity = STATES[judgement.state]
    level = _LEVELS.get(severity, logging.INFO)
    was = f" (was {before.state})" if before is not None else ""
    verdict = judgement.verdict
    if verdict is not None:
        detail = f"{verdict.seen} Cause: {verdict.why} Fix: {verdict.fix}"
    else:
        notes = "; ".join(judgement.notes)
        detail = f"{notes + '. ' if notes else ''}{STATE_ADVICE[judgement.state]}."
    log.log(
        level,
        "target %s: verdict %s%s: %s. %s %s",
        target,
        judgement.state,
        was,
        judgement.head,
        judgement.judged_on(),
        detail,
    )


def _log_finding(target: str, finding: Finding) -> None:
    log.log(
        _LEVELS[finding.severity],
        "target %s: finding %s: %s. Seen: %s Fix: %s",
        target,
        finding.code,
        finding.summary,
        finding.seen,
        finding.fix,
    )
