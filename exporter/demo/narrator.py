"""Successive scrapes of the exporter, told as the few lines a newcomer should read."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporter.analysis.request_share import NO_BENEFIT_ACCEPT_LENGTH
from exporter.analysis.thresholds import DEFAULT
from exporter.demo.console import say

QUIET_SECONDS = 8.0  # longer than any scenario's decode interval: the server went quiet
INFO = "specwatch_speculative_info"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def read_metrics(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str) -> float | None:
    return next((v for (n, _), v in samples.items() if n == name), None)


def findings(samples: Samples) -> set[tuple[str, str]]:
    active = set()
    for (name, labels), sample in samples.items():
        if name == "specwatch_finding" and sample == 1:
            label = dict(labels)
            active.add((label.get("code", "?"), label.get("severity", "?")))
    return active


@dataclass
class Narrator:
    """Turns successive scrapes into the lines a newcomer should read, reporting only changes."""

    started: float = field(default_factory=time.monotonic)
    collapsed: bool = False
    waiting_said: bool = False
    server: tuple[str, str, str] | None = None  # algorithm, draft model, draft tokens
    architecture: str | None = None
    findings: set[tuple[str, str]] = field(default_factory=set)
    alerts: dict[str, str] = field(default_factory=dict)

    def stamp(self) -> str:
        return f"+{time.monotonic() - self.started:4.0f}s"

    def metrics(self, samples: Samples) -> None:
        self._server(samples)  # first: a restart explains the findings that clear with it
        accept = value(samples, "specwatch_accept_length")
        drafting_off = value(samples, "specwatch_speculative_steps") == 0
        if accept is not None or (drafting_off and value(samples, THROUGHPUT) is not None):
            say(f"{self.stamp()}  {status_line(samples, accept)}")
            if accept is not None:
                self._collapse(accept, samples)
        elif not self.waiting_said:
            self.waiting_said = True
            say(f"{self.stamp()}  waiting for the server's first decode window...")
        self._findings(findings(samples))

    def _server(self, samples: Samples) -> None:
        """Announce the speculative setup when it changes (a restart with a new drafter).

        The draft's architecture is logged seconds after the server's arguments, when the
        draft weights are loaded, so it is announced on its own when it comes later.
        """
        info = next((dict(labels) for (name, labels) in samples if name == INFO), None)
        if info is None or not info.get("algorithm"):
            return  # nothing read from the server's startup yet
        setup = (
            info["algorithm"],
            info.get("draft_model") or "unknown",
            info.get("num_draft_tokens") or "?",
        )
        architecture = info.get("draft_architecture") or None
        if setup != self.server:
            started = "restarted:" if self.server is not None else "started:  "
            self.server, self.architecture = setup, architecture
            loaded = f" ({architecture})" if architecture else ""
            say(
                f"{self.stamp()}  SERVER    {started} {setup[0]} with draft {setup[1]}{loaded}, "
                f"{setup[2]} draft tokens"
            )
        elif architecture and architecture != self.architecture:
            self.architecture = architecture
            say(f"{self.stamp()}  SERVER    draft loaded: {architecture}")

    def _collapse(self, accept: float, samples: Samples) -> None:
        """A collapse as the alert sees it: only while the drafter's accept length is judged
        (its algorithm has a floor, and adaptive is not merely probing it)."""
        speedup = value(samples, "specwatch_speedup")
        speed = "" if speedup is None else f", {speedup:.2f}x the baseline"
        judged = value(samples, "specwatch_accept_length_floor") is not None
        if accept <= DEFAULT.collapsed_accept_length and judged and not self.collapsed:
            self.collapsed = True
            say(
                f"{self.stamp()}  DETECTED  speculative decoding collapsed: accept length "
                f"{accept:.2f} (no draft token accepted){speed}"
            )
        elif accept > DEFAULT.collapsed_accept_length and self.collapsed:
            self.collapsed = False
            say(f"{self.stamp()}  RECOVERED accept length {accept:.2f}{speed}")

    def _findings(self, active: set[tuple[str, str]]) -> None:
        for code, severity in sorted(active - self.findings):
            say(f"{self.stamp()}  FINDING   {code} ({severity}) is active")
        for code, _ in sorted(self.findings - active):
            say(f"{self.stamp()}  FINDING   {code} cleared")
        self.findings = active

    def prometheus_alerts(self, states: dict[str, str]) -> None:
        for name, state in sorted(states.items()):
            if self.alerts.get(name) != state:
                say(f"{self.stamp()}  ALERT     {name} is {state} in Prometheus")
        for name in sorted(set(self.alerts) - set(states)):
            say(f"{self.stamp()}  ALERT     {name} resolved in Prometheus")
        self.alerts = states


# What the status line shows after the accept length, in order: metric and how to print it.
THROUGHPUT = "specwatch_gen_throughput_tokens_per_second"
STATUS_PARTS: tuple[tuple[str, Callable[[float], str]], ...] = (
    ("specwatch_accept_ratio", lambda v: f"accept rate {v:.2f}"),
    ("specwatch_speedup", lambda v: f"speedup {v:.2f}x"),
    ("specwatch_cuda_graph", lambda v: f"cuda graph {'on' if v else 'OFF'}"),
    (THROUGHPUT, lambda v: f"{v:.0f} tok/s"),
    ("specwatch_running_requests", lambda v: f"{v:.0f} running"),
)


def status_line(samples: Samples, accept: float | None) -> str:
    """The newest window in a line; ``accept`` None: adaptive speculation has drafting off."""
    parts = [f"accept length {accept:.2f}" if accept is not None else "speculation off (adaptive)"]
    for name, show in STATUS_PARTS:
        found = value(samples, name)
        if found is not None:
            parts.append(show(found))
    share = requests_without_benefit(samples)
    if share is not None:
        parts.append(f"{share:.0%} of requests at <= {NO_BENEFIT_ACCEPT_LENGTH:g}")
    newest = value(samples, "specwatch_last_decode_timestamp_seconds")
    if newest and time.time() - newest > QUIET_SECONDS:
        parts.append(f"no new window for {time.time() - newest:.0f}s")
    return " | ".join(parts)


def requests_without_benefit(samples: Samples) -> float | None:
    """Share of the finished requests read so far at accept length <= 1.05, when the server
    logs its requests: what the window's accept length beside it does not show."""
    bound = repr(float(NO_BENEFIT_ACCEPT_LENGTH))
    low = total = 0.0
    for (name, labels), sample in samples.items():
        if name == "specwatch_request_accept_length_count":
            total += sample
        elif name == "specwatch_request_accept_length_bucket" and ("le", bound) in labels:
            low += sample
    return low / total if total else None
