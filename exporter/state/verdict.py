"""The daemon's verdict on one target over time: the state the judge gives now, when that
state began, and one log line each time it changes.

Whoever judges the target (a scrape, the landing page, the daemon's own check every few
seconds) hands the judgement here; the state and its start are what ``/metrics`` exports as
``specwatch_verdict`` and ``specwatch_verdict_since_timestamp_seconds``, and a change is logged
once, at WARNING or ERROR when something is wrong, with its cause and fix, so ``journalctl``
tells an on-call what the alerts tell their pager. Findings that warn or page are logged
the same way when they appear.

The newest whole judgement is kept too (``Judged``): a scrape within a few seconds of it
renders it again instead of judging anew, as Prometheus's rules are evaluated on their own
interval, not at every scrape. A node of 100 servers spent a quarter of each scrape judging.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import NamedTuple

from exporter.analysis.findings import CRITICAL, WARNING, Finding
from exporter.analysis.judge import STATE_ADVICE, STATES, Judgement, Stretch, Stretches
from exporter.engines.record import UpstreamValues
from exporter.engines.server_config import ServerConfig

log = logging.getLogger("specwatch.verdict")

_LEVELS = {"critical": logging.ERROR, "warning": logging.WARNING}
# Finding codes remembered as already told, at most (their set is fixed and small).
_MAX_TOLD = 64


class Verdict(NamedTuple):
    """The state now and when it began (seconds on the wall clock)."""

    state: str
    since: float


class Judged(NamedTuple):
    """What the judge made of a target as of ``at``: the configuration it judged by, its
    findings, its state and the verdict over time, and the two figures derived with them;
    ``inputs``, what it was judged from besides the log's windows (see ``recent``)."""

    at: float
    inputs: tuple[object, ...]
    config: ServerConfig
    findings: list[Finding]
    judgement: Judgement
    verdict: Verdict
    accept_floor: float | None  # None: not judged (drafting off nearly always)
    drafting_off_share: float | None  # None: not adaptive


class VerdictTrack:
    """One target's state over time; thread-safe."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._now: Verdict | None = None
        self._told: set[str] = set()
        self.observed_at: float | None = None  # when a judgement was last taken
        self._kept: Judged | None = None
        # The server's counters, folded per scrape (``fold_scrape``).
        self._scrapes = Stretches()
        self._scraped_at: float | None = None
        self._totals: tuple[float | None, float | None] = (None, None)
        self._counted = False

    def observe(self, judgement: Judgement, findings: Iterable[Finding], now: float) -> Verdict:
        """Take the judge's word as of ``now``: the state, since when, logged if it changed.

        The state keeps the start it had while it holds (a judgement's own ``since`` reaches
        back only as far as the windows it keeps), or an earlier one the windows show.
        """
        with self._lock:
            self.observed_at = now
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

    def fold_scrape(
        self, at: float, values: UpstreamValues, baseline: float | None
    ) -> tuple[Stretch, ...]:
        """The stretches of the server's own counters, one window per new scrape: the draft
        rounds and accepted tokens counted since the scrape before (vLLM's counters), and its
        load. Empty while the server counts no drafts (SGLang's gauge)."""
        with self._lock:
            if at != self._scraped_at:
                self._fold(at, values, baseline)
            return self._scrapes.items() if self._counted else ()

    def _fold(self, at: float, values: UpstreamValues, baseline: float | None) -> None:
        self._scraped_at = at
        drafts, accepted = values.drafts_total, values.accepted_tokens_total
        before, self._totals = self._totals, (drafts, accepted)
        if drafts is None or accepted is None or before[0] is None or before[1] is None:
            return
        rounds, taken = drafts - before[0], accepted - before[1]
        if rounds < 0 or taken < 0:
            return  # the server restarted: its counters begin again
        self._counted = True
        if rounds > 0:
            self._scrapes.add_window(at, rounds, taken, False)
        self._scrapes.add_moment(
            at, values.running_requests, values.gen_throughput, baseline, False
        )

    def keep(self, judged: Judged) -> None:
        """``judged``, the newest whole judgement (see ``recent``)."""
        with self._lock:
            if self._kept is None or judged.at >= self._kept.at:
                self._kept = judged

    def recent(self, now: float, within: float, inputs: tuple[object, ...]) -> Judged | None:
        """The kept judgement when it was taken less than ``within`` seconds before ``now``
        (never one from ``now``'s future: a clock set back judges afresh) from the same
        ``inputs``: only the log's new windows of the same run wait for the next judgement,
        not a new setup, a new scrape of the server or a new baseline."""
        with self._lock:
            kept = self._kept
        if kept is None or not 0 <= now - kept.at < within or kept.inputs != inputs:
            return None
        return kept

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
