"""What a simulated server does, in no engine's words, and how an engine writes it as its log.

A scenario (``simulate/scenarios.py``) is a node's server runs: each a ``Deployment`` (what
it was started with) and a ``Behaviour`` (what its traffic does). An engine whose log
specwatch reads brings a ``Simulation`` (its ``simulation``) that writes those runs as its
server would log them: start-up block, stats lines, requests, endings. ``simulate/`` picks
the engine from the registry and stamps, wraps and paces the lines; it never knows whose
they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Deployment:
    """What a server run was started with, in specwatch's terms: each engine's simulation
    spells it in its own flags."""

    algorithm: str  # a neutral one (``analysis/algorithms.py``): each engine spells it
    draft_model_path: str | None  # None: a drafter without a model (NGRAM)
    # The class a draft checkpoint declares; None for a drafter without a model of its own
    # (NGRAM) or the target's own layers (MTP), which each engine loads as a class of its own.
    draft_architecture: str | None
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int = 48
    enable_metrics: bool = True
    log_requests: str | None = None  # finished requests logged as "text" or "json"; None: not
    # Adaptive speculation with the engine's default tiers: drafting off at high load.
    adaptive: bool = False
    max_running_requests: int = 48  # the engine's own cap for speculative decoding when unset


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What the traffic looks like once the server is up: the values the stats lines carry."""

    accept_length: float  # mean per stats window (1.00 = no draft token accepted)
    accept_jitter: float  # standard deviation of the per-window accept length
    running: int
    queued: int
    gen_throughput: float  # tokens/s at `running`, the mean over windows
    # Share of requests (one class of traffic) that accept no draft token; the others make up
    # the window's accept length.
    no_benefit_share: float = 0.0
    # Adaptive speculation that has given up on the drafter: drafting off, with a probe of
    # one draft step every this many windows (its accept length is ``accept_length``).
    probe_every: int | None = None

    @property
    def step_seconds(self) -> float:
        """Wall time of one draft+verify round, which is what ties throughput to accept length."""
        return self.running * self.accept_length / self.gen_throughput


@dataclass(frozen=True, slots=True)
class Phase:
    """A server run: its flags, its traffic, and how many seconds of traffic it lasts."""

    deployment: Deployment
    behaviour: Behaviour
    traffic_seconds: float | None = None  # None: until the end of the log


class SimulatedLine(Protocol):
    """A line before it has a time: lines are made on a simulated clock and stamped only
    when written, so the same sequence serves a reproducible file and a live, paced log."""

    @property
    def offset(self) -> float:
        """Seconds since the first line of the log."""
        ...

    @property
    def stream(self) -> str:
        """``stdout`` or ``stderr``: what a container runtime records it under."""
        ...

    @property
    def ready(self) -> bool:
        """Whether this line says the server is ready to serve: a live log writes every
        line up to it at once, back-dated, and paces the rest."""
        ...

    def render(self, moment: datetime) -> str:
        """The line as the engine prints it at ``moment``."""
        ...


class Simulation(Protocol):
    """How an engine writes a scenario's server runs as its log."""

    # Each way its releases wrote their lines (``simulate --format-version``), with what
    # marks it; and the one written unless told.
    formats: Mapping[str, str]
    default_format: str

    def base_time(self, fmt: str) -> datetime:
        """The fixed start of a reproducible log in ``fmt``: the same seed, the same bytes."""
        ...

    def cannot(self, phase: Phase) -> str | None:
        """Why this engine's server cannot do what ``phase`` does, in its words (a flag it
        lacks, lines it never writes); None when it can."""
        ...

    def lines(self, phases: Sequence[Phase], *, seed: int, fmt: str) -> Iterator[SimulatedLine]:
        """The runs' lines in time order from 0, endless when the last run's traffic is."""
        ...

    def window_seconds(self, phase: Phase) -> float:
        """Simulated seconds between two of its stats lines in ``phase``: what a live log's
        pace in stats lines per second is turned into."""
        ...
