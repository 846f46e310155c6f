"""A watched server as the daemon holds it: its configuration, state and baseline together."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.baseline import Baseline
from exporter.config import TargetConfig
from exporter.state import TargetState


@dataclass
class Target:
    config: TargetConfig
    state: TargetState
    baseline: Baseline | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @classmethod
    def from_config(cls, config: TargetConfig) -> Target:
        """Build the runtime target; a bad baseline raises ``ValueError`` naming the problem."""
        baseline = None
        if config.baseline is not None:
            baseline = Baseline.from_options(
                tok_s=config.baseline.tok_s,
                curve=config.baseline.curve,
                bench_file=config.baseline.bench_file,
            )
        return cls(config=config, state=TargetState(config.name), baseline=baseline)
