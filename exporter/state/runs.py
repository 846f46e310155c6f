"""Where one server run ends and the next begins, and the configuration of the current one.

A log (or a live tail) can span restarts with other flags or another draft. The daemon, ``doctor``
and ``report`` must all cut at the same place, or one of them judges a healthy run by the
windows of a broken one. An engine states its arguments once per start (SGLang's
``server_args=ServerArgs(...)``, vLLM's engine configuration line, both a ``ServerArgsEvent``),
so that line, and nothing else, begins a run.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import replace

from exporter.engines import registry
from exporter.engines.draft_config import DraftLookups, with_local_draft
from exporter.engines.events import (
    AdaptiveSteps,
    Event,
    MaxRunningReset,
    MemoryPlan,
    ServerArgsEvent,
    SpeculationSchedule,
    StatsLoggingOff,
    WeightsLoaded,
)
from exporter.engines.record import LogLine, StatsRecord, with_steps
from exporter.engines.server_config import ServerConfig


class RunTracker:
    """Startup events folded into the current run's configuration; thread-safe as its parts."""

    def __init__(self, drafts: DraftLookups | None = None) -> None:
        self._config = ConfigTracker(drafts)
        self.starts = 0  # starts seen: more than one means restarts
        self.step_changes = 0  # times adaptive speculation changed the draft steps, all runs

    @property
    def config(self) -> ServerConfig:
        return self._config.config

    def stamped(self, records: Sequence[StatsRecord]) -> Sequence[StatsRecord]:
        """Decode windows stamped with the draft steps the current run has in force for them
        (adaptive speculation's choice, or vLLM's schedule by running requests)."""
        config = self._config.config
        return with_steps(
            records, config.active_steps, config.adaptive, config.schedule, config.num_steps
        )

    def observe(self, line: LogLine) -> bool:
        """Apply one startup/config line; ``True`` when it starts a new server run."""
        engine = registry.BY_NAME.get(line.engine)
        event = engine.parse_event(line.message) if engine is not None else None
        if event is None:
            return False
        before = self._config.config.active_steps
        self._config.observe(event, (line.dp_rank, line.pp_rank, line.tp_rank))
        if isinstance(event, AdaptiveSteps) and before is not None and event.steps != before:
            self.step_changes += 1
        if isinstance(event, ServerArgsEvent):
            self.starts += 1
            return True
        return False


# Schedulers of one server whose load order is followed; hostile logs could name millions.
MAX_RANKS = 1024


class ConfigTracker:
    """Folds startup events from one log into a :class:`ServerConfig`, thread-safe.

    A model's weights loaded (``WeightsLoaded``) are logged by every scheduler rank, first the
    target's then the draft's (scheduler init order), so the order is counted per rank; a class
    the engine knows for a draft's is the draft's whatever the order. A new start
    (``ServerArgsEvent``) means the server restarted: everything learnt before is dropped,
    because the new run may use other flags or another draft.
    """

    def __init__(self, drafts: DraftLookups | None = None) -> None:
        self._lock = threading.Lock()
        self._drafts = drafts or DraftLookups()  # the target's, else this log's own
        self._config = ServerConfig()
        self._loads: dict[Hashable, int] = {}
        self._reset_seen = False  # SGLang's "Max running requests is reset" before its args
        self._schedule: tuple[tuple[int, int, int], ...] | None = None  # for the next start

    @property
    def config(self) -> ServerConfig:
        return self._config

    def observe(self, event: Event, rank: Hashable = None) -> None:
        """Apply one event; ``rank`` identifies the logging scheduler (e.g. ``(dp, tp)``)."""
        with self._lock:
            if isinstance(event, ServerArgsEvent):
                config = with_local_draft(event.config, self._drafts)
                if self._schedule is not None:
                    config = replace(config, adaptive=True, schedule=self._schedule)
                if config.max_running_requests_set and self._reset_seen:  # chosen after all
                    config = replace(config, max_running_requests_set=False)
                self._config, self._loads, self._schedule = config, {}, None
                self._reset_seen = False
            elif isinstance(event, WeightsLoaded):
                self._config = self._with_weights(event, rank)
            elif isinstance(event, MemoryPlan) and event.max_running_requests is not None:
                self._config = replace(
                    self._config, max_running_requests=event.max_running_requests
                )
            elif isinstance(event, MaxRunningReset):
                # SGLang 0.5 resolves its arguments, and says so, before it logs them.
                self._reset_seen = True
                self._config = replace(
                    self._config, max_running_requests=event.value, max_running_requests_set=False
                )
            elif isinstance(event, AdaptiveSteps):
                self._config = _with_steps(self._config, event)
            elif isinstance(event, StatsLoggingOff):
                self._config = replace(self._config, stats_not_logged=event.reason)
            elif isinstance(event, SpeculationSchedule):
                # Logged before the engine's own start line, which would forget it: kept for it.
                self._schedule = event.ranges
                self._config = replace(self._config, adaptive=True, schedule=event.ranges)

    def _with_weights(self, event: WeightsLoaded, rank: Hashable) -> ServerConfig:
        seen = self._loads.get(rank, 0)
        if rank in self._loads or len(self._loads) < MAX_RANKS:
            self._loads[rank] = seen + 1  # beyond the bound, only the engine's word tells
        if seen >= 1 or event.draft:
            return replace(self._config, draft_architecture=event.model_class)
        return replace(self._config, target_architecture=event.model_class)


def _with_steps(config: ServerConfig, event: AdaptiveSteps) -> ServerConfig:
    off_ema = config.off_ema_accept
    if event.steps == 0 and event.ema_accept is not None:
        off_ema = event.ema_accept
    return replace(
        config,
        adaptive=True,
        active_steps=event.steps,
        candidate_steps=event.candidates or config.candidate_steps,
        off_ema_accept=off_ema,
    )
