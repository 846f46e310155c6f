"""TensorRT-LLM as an engine: specwatch scrapes its metrics and reads no log of it.

Its log has no stats line of a stable format to read (iteration stats go to ``/metrics`` as
JSON and to ``/prometheus/metrics``), so it has no markers and no log reader; the speculative
setup comes from its config-info metric instead of start-up lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from exporter.engines.engine import BandSteps, Deliveries, LogReader, UpstreamReader
from exporter.engines.events import Event
from exporter.engines.server_config import ServerConfig

if TYPE_CHECKING:
    from exporter.engines.simulation import Simulation


# Its decoding types, as its config-info metric names them, by the neutral algorithm whose
# standard each is judged by.
JUDGED_AS = MappingProxyType(
    {
        "EAGLE": "EAGLE",
        "EAGLE3": "EAGLE3",
        "MTP": "MTP",
        "NGRAM": "NGRAM",
        "DRAFT_MODEL": "DRAFT_MODEL",
        "DRAFTTARGET": "DRAFT_MODEL",  # as it spells it, before its reader renames it
        "MEDUSA": "MEDUSA",
    }
)


class Trtllm:
    name = "trtllm"
    title = "TensorRT-LLM"
    metrics_paths = ("/prometheus/metrics",)  # its /metrics is JSON
    server_info_paths: tuple[str, ...] = ()
    metrics_switch: str | None = None
    draft_settings = MappingProxyType({"max_draft_len": "num_steps"})
    markers: tuple[bytes, ...] = ()
    start_markers: tuple[bytes, ...] = ()
    fixes: Mapping[str, str] = {
        "eagle3_algorithm": "decoding_type: Eagle3 in speculative_config",
        "speculative_tokens": "max_draft_len in speculative_config",
        "draft_tokens": "max_draft_len in speculative_config to about {steps}",
        "log_stats": (
            "return_perf_metrics: true and enable_iter_perf_stats: true, scraped at "
            "/prometheus/metrics (specwatch reads no TensorRT-LLM log)"
        ),
    }

    off_cause = ""
    metric_name_folds: Mapping[str, str] = {}
    decode_log_interval: int | None = None  # no log of it is read

    def simulation(self) -> Simulation | None:
        return None  # its log is not read, so none is written

    def no_accept_length(self, algorithm: str | None, started: bool) -> str:
        return "specwatch reads no TensorRT-LLM log"

    def owns(self, text: str) -> bool:
        return False

    def starts(self, text: str) -> bool:
        return False

    def log_reader(self, sink: Deliveries, clean: Callable[[str], str]) -> LogReader | None:
        return None

    def read_server_info(self, info: Mapping[str, Any]) -> ServerConfig | None:
        return None

    def parse_event(self, message: str) -> Event | None:
        return None

    def upstream_reader(self, prefix: str | None = None) -> UpstreamReader | None:
        """Its own names only: a bridge that renames them writes another schema."""
        # Imported when asked: see Engine.upstream_reader.
        from exporter.engines.trtllm_upstream import PREFIX, TrtllmUpstream

        return TrtllmUpstream() if prefix in (None, PREFIX) else None

    def judged_as(self, algorithm: str, draft_architecture: str | None) -> str | None:
        """Its ``decoding_type`` as its config-info metric names it, any case (DraftTarget is
        DRAFT_MODEL once ``trtllm_upstream`` has read it)."""
        return JUDGED_AS.get(algorithm.upper())

    def schedule(self, steps: Sequence[BandSteps], algorithm: str | None) -> str | None:
        """TensorRT-LLM drafts ``max_draft_len`` at every batch size."""
        return None


ENGINE = Trtllm()
