"""vLLM as an engine: its reader per source, start-up events, ``/metrics`` reader and fixes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from exporter.engines import ending, vllm
from exporter.engines.engine import BandSteps, Deliveries, UpstreamReader, has_any
from exporter.engines.events import (
    Event,
    ServerArgsEvent,
    SpeculationSchedule,
    StatsLoggingOff,
)
from exporter.engines.record import LogLine, StatsRecord, Unrecognized
from exporter.engines.server_config import ServerConfig

if TYPE_CHECKING:
    from exporter.engines.simulation import Simulation

_OWN_MARKERS = vllm.STATS_MARKERS + vllm.EVENT_MARKERS
# What a reader looks for: its own lines and the lines of a server's end.
_MARKERS = _OWN_MARKERS + vllm.NOTICE_MARKERS + ending.MARKERS


class VllmReader:
    """One source's vLLM lines. Its stats come in pairs (engine, then spec) that one parser
    keeps together, so a part of the log cannot be read alone."""

    cuttable = False

    def __init__(self, sink: Deliveries, clean: Callable[[str], str]) -> None:
        self._sink = sink
        self._clean = clean
        self._parser = vllm.VllmParser()

    def read(self, lines: list[bytes], blob: bytes, tidy: bool) -> None:
        if not has_any(blob, _MARKERS):
            return
        feed = self._parser.feed
        for line in lines:
            if not has_any(line, _MARKERS):
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                self._sink.on_skipped("invalid_utf8")
                continue
            self._deliver(feed(text if tidy else self._clean(text)))

    def read_whole(
        self, framed: bytes, tidy: bool, foreign: tuple[bytes, ...]
    ) -> tuple[int, list[StatsRecord]] | None:
        return None

    def read_clipped(self, line: bytes) -> None:
        """vLLM logs no record that carries figures at its end (per-request speculation
        figures are in its responses): a line over the cap is only counted."""

    def finish(self) -> None:
        """The last engine line, which no later line will pair, as a window of its own."""
        self._deliver(self._parser.flush())

    def _deliver(self, results: Sequence[StatsRecord | Unrecognized | LogLine]) -> None:
        for result in results:
            if isinstance(result, StatsRecord):
                self._sink.on_record(result)
            elif isinstance(result, Unrecognized):
                self._sink.on_unrecognized(result.reason)
            else:
                self._sink.on_event(result)


# vLLM caps a schedule's ranges at its own max batch size; an open-ended range ends here.
OPEN_END = 4096
# Its methods (``method`` in --speculative-config, as ``vllm.algorithm`` names them) by the
# neutral algorithm whose standard each is judged by: ``draft_model`` is a small draft model,
# ``suffix`` suffix decoding, ``dflash`` and ``dspark`` draft a block at a time.
JUDGED_AS = MappingProxyType(
    {
        "EAGLE": "EAGLE",
        "EAGLE3": "EAGLE3",
        "MTP": "MTP",
        "DRAFT_MODEL": "DRAFT_MODEL",
        "NGRAM": "NGRAM",
        "NGRAM_GPU": "NGRAM",
        "SUFFIX": "SUFFIX",
        "DFLASH": "BLOCK_DRAFT",
        "DSPARK": "BLOCK_DRAFT",
        "MEDUSA": "MEDUSA",
    }
)


class Vllm:
    name = vllm.NAME
    title = "vLLM"
    metrics_paths = ("/metrics",)
    server_info_paths: tuple[str, ...] = ()
    metrics_switch: str | None = None
    draft_settings = MappingProxyType({"num_speculative_tokens": "num_steps"})
    markers = _OWN_MARKERS
    start_markers = vllm.EVENT_MARKERS  # the engine's configuration and the API server's arguments
    fixes: Mapping[str, str] = {
        "eagle3_algorithm": '"method": "eagle3" in --speculative-config',
        "speculative_tokens": "num_speculative_tokens in --speculative-config",
        # Where it drafts by batch size, the setting that holds this load's count.
        "schedule_entry": "the num_speculative_tokens_per_batch_size entry of the current load",
        "draft_tokens": "num_speculative_tokens in --speculative-config to about {steps}",
        "ngram_window": (
            "a larger prompt_lookup_min (prompt_lookup_max) in --speculative-config, so only "
            "longer matches draft"
        ),
        # A count of verified positions a round (``count``), as vLLM counts it: the tokens
        # drafted (``steps``), its num_speculative_tokens.
        "draft_count": "{steps} speculative tokens",
        "log_stats": "without --disable-log-stats, at the default log level",
        "api_servers": (
            "logs no stats with more than one API server: give specwatch its URL (run --url; "
            "doctor --url) to read its /metrics, which every API server serves whole, or run "
            "--api-server-count 1"
        ),
        "cuda_graphs_off": "enforce_eager=True in vLLM's engine configuration",
        "cuda_graphs_on": "vLLM without --enforce-eager",
        "gpu_headroom": "--gpu-memory-utilization or --max-num-seqs",
        "graph_headroom": "--gpu-memory-utilization",
        "rank_lines": (
            "its 'Engine {rank:03d}:' stats lines and its (EngineCore_DP{rank} pid=...) lines"
        ),
        "drafting_off_cost": (
            "with num_speculative_tokens_per_batch_size runs PIECEWISE CUDA graphs instead of "
            "full ones on its V1 model runner, at every batch size, k = 0 too (its start-up "
            "warning 'Overriding cudagraph_mode from ... to PIECEWISE'): run it with "
            "VLLM_USE_V2_MODEL_RUNNER=1 to keep full graphs, or give this batch size a k above "
            "0 in the schedule, or serve this load without speculation"
        ),
    }

    off_cause = "per-batch-size schedule"
    metric_name_folds: Mapping[str, str] = {}
    decode_log_interval: int | None = None  # its lines count their draft rounds

    def simulation(self) -> Simulation:
        # Only the simulator pays for importing it; the daemon and other commands do not.
        from exporter.engines.vllm_sim import SIMULATION

        return SIMULATION

    def no_accept_length(self, algorithm: str | None, started: bool) -> str:
        """A start seen without a speculative method says it does not speculate; 0.8.3 and
        0.8.4 lines carry no accept length of their own."""
        if started and algorithm is None:
            return (
                "vLLM logs one only while it speculates, and its engine configuration has no "
                "speculative_config"
            )
        return (
            "a vLLM 0.8.3 or 0.8.4 line gives one only with the engine's configuration line, "
            "which names its speculative tokens"
        )

    def owns(self, text: str) -> bool:
        return vllm.is_own_line(text)

    def starts(self, text: str) -> bool:
        return vllm.starts_engine(text)

    def log_reader(self, sink: Deliveries, clean: Callable[[str], str]) -> VllmReader:
        return VllmReader(sink, clean)

    def read_server_info(self, info: Mapping[str, Any]) -> ServerConfig | None:
        return None

    def parse_event(self, message: str) -> Event | None:
        """The engine configuration line: vLLM's start, the same restart as SGLang's
        ``server_args`` in other names; the API servers' word that no stats are logged."""
        if message.startswith(vllm.STATS_OFF):
            return StatsLoggingOff(message[:200])
        schedule = vllm.speculation_schedule(message)
        if schedule is not None:
            return SpeculationSchedule(schedule)
        config = vllm.engine_config(message)
        return None if config is None else ServerArgsEvent(config)

    def upstream_reader(self, prefix: str | None = None) -> UpstreamReader:
        """vLLM's counter schema under ``prefix`` (llama.cpp, Ray Serve), or found."""
        from exporter.engines.vllm_upstream import VllmUpstream  # see Engine.upstream_reader

        return VllmUpstream(prefix)

    def judged_as(self, algorithm: str, draft_architecture: str | None) -> str | None:
        """Its methods as its configuration names them (every model's ``*_mtp`` is MTP)."""
        return JUDGED_AS.get(vllm.algorithm(algorithm))

    def schedule(self, steps: Sequence[BandSteps], algorithm: str | None) -> str | None:
        """Dynamic speculative decoding's table, for every method."""
        table = [[first, OPEN_END if last is None else last, count] for first, last, count in steps]
        return (
            f'vLLM: "num_speculative_tokens_per_batch_size": {json.dumps(table)} in '
            "--speculative-config (num_speculative_tokens caps each entry)"
        )


ENGINE = Vllm()
