"""A watched server as the daemon holds it: its configuration, state and baseline together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from exporter.analysis.baseline import Baseline
from exporter.config import TargetConfig
from exporter.engines.draft_config import DraftLookups, from_draft_config
from exporter.engines.server_config import ServerConfig
from exporter.parse.custom_rules import CustomRule, CustomRuleSet
from exporter.state.requests import DEFAULT_MAX_CLASSES, RequestStats
from exporter.state.target_state import DEFAULT_MAX_DP_RANKS, TargetState

if TYPE_CHECKING:
    from exporter.sources.upstream import UpstreamScraper


@dataclass
class Target:
    config: TargetConfig
    state: TargetState
    configured_baseline: Baseline | None = None
    draft: ServerConfig = field(default_factory=ServerConfig)  # from draft_config, if given
    # The draft config.json answers for the paths its server names, its tailer's and
    # scraper's alike; no other target's.
    drafts: DraftLookups = field(default_factory=DraftLookups)
    upstream: UpstreamScraper | None = None
    custom_rules: CustomRuleSet | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def baseline(self) -> Baseline | None:
        """The configured baseline (flags, config, a plain log), else the one the node learns
        from its own windows with drafting off; None until either exists."""
        return self.configured_baseline or self.state.baseline

    @classmethod
    def from_config(
        cls,
        config: TargetConfig,
        custom_rules: Sequence[CustomRule] = (),
        max_dp_ranks: int = DEFAULT_MAX_DP_RANKS,
        max_traffic_classes: int = DEFAULT_MAX_CLASSES,
    ) -> Target:
        """Build the runtime target; a bad baseline raises ``ValueError`` naming the problem."""
        baseline = None
        if config.baseline is not None:
            # Only a configured baseline pays for importing report/ (a baseline can be learnt
            # from a log); the daemon's start-up without one does not.
            from exporter.report.learn import baseline_from_options

            baseline = baseline_from_options(
                tok_s=config.baseline.tok_s,
                curve=config.baseline.curve,
                bench_file=config.baseline.bench_file,
                log=config.baseline.log,
            )
        drafts = DraftLookups()
        return cls(
            config=config,
            # Node loads feed the throughput by load band (fleet peers, drafting-off windows)
            # as well as the speedup against a baseline.
            state=TargetState(
                config.name,
                max_dp_ranks,
                node_loads=True,
                requests=RequestStats(config.request_label_header, max_traffic_classes),
                baseline=baseline,
                drafts=drafts,
            ),
            configured_baseline=baseline,
            draft=from_draft_config(config.draft_config) if config.draft_config else ServerConfig(),
            drafts=drafts,
            upstream=_scraper(config, drafts),
            custom_rules=CustomRuleSet(list(custom_rules)) if custom_rules else None,
        )


def _scraper(config: TargetConfig, drafts: DraftLookups) -> UpstreamScraper | None:
    """A scraper when the target has upstream URLs; it scrapes in its own thread once started."""
    if not (config.url or config.metrics_url or config.server_info_url):
        return None
    # Only a target with a server to scrape loads the scraper (HTTP, the /metrics parsers,
    # each engine's reader): a daemon that follows logs alone starts without it.
    from exporter.sources.upstream import UpstreamScraper

    return UpstreamScraper(
        config.metrics_url,
        config.server_info_url,
        url=config.url,
        engine=config.engine,
        interval=config.scrape_interval,
        timeout=min(10.0, config.scrape_interval),
        token_file=str(config.bearer_token_file) if config.bearer_token_file else None,
        token_env=config.bearer_token_env,
        metrics_prefix=config.metrics_prefix,
        target=config.name,
        drafts=drafts,
    )
