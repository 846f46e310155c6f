"""What the exposition reads of a watched server, as a protocol.

The daemon's ``Target`` (wiring, built from the config) satisfies it structurally; naming only
the parts rendered here keeps the exposition below the wiring, so a scrape's code cannot reach
the config loader, the daemon or the commands (an import-linter contract holds this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from exporter.analysis.baseline import Baseline
from exporter.engines.draft_config import DraftLookups
from exporter.engines.server_config import ServerConfig
from exporter.parse.custom_rules import CustomRuleSet
from exporter.state.target_state import TargetState

if TYPE_CHECKING:
    from exporter.sources.upstream import UpstreamScraper


class WatchedSettings(Protocol):
    """The configured settings a scrape renders or judges by."""

    @property
    def engine(self) -> str: ...
    @property
    def log_files(self) -> Sequence[str]: ...
    @property
    def scrape_interval(self) -> float: ...
    @property
    def expected_accept_length(self) -> float | None: ...
    @property
    def served_model(self) -> str | None: ...
    @property
    def hardware(self) -> str | None: ...


class Watched(Protocol):
    """One watched server: its settings, state, baseline, draft and upstream scraper."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> WatchedSettings: ...
    @property
    def state(self) -> TargetState: ...
    @property
    def baseline(self) -> Baseline | None: ...
    @property
    def draft(self) -> ServerConfig: ...
    @property
    def drafts(self) -> DraftLookups: ...
    @property
    def upstream(self) -> UpstreamScraper | None: ...
    @property
    def custom_rules(self) -> CustomRuleSet | None: ...
