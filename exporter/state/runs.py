"""Where one server run ends and the next begins, and the configuration of the current one.

A log (or a live tail) can span restarts with other flags or another draft. The daemon, ``doctor``
and ``report`` must all cut at the same place, or one of them judges a healthy run by the
windows of a broken one. An engine states its arguments once per start (SGLang's
``server_args=ServerArgs(...)``, vLLM's engine configuration line, both a ``ServerArgsEvent``),
so that line, and nothing else, begins a run.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.engines import registry
from exporter.engines.events import AdaptiveSteps, ServerArgsEvent
from exporter.engines.record import LogLine, StatsRecord, with_steps
from exporter.engines.server_config import ConfigTracker, ServerConfig


class RunTracker:
    """Startup events folded into the current run's configuration; thread-safe as its parts."""

    def __init__(self) -> None:
        self._config = ConfigTracker()
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
