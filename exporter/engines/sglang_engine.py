"""SGLang as an engine: its reader per source, start-up events, ``/metrics`` reader and fixes.

A busy SGLang node logs hundreds of thousands of stats lines, so the reader has three ways in
(see bench/): a long tidy batch read whole by column (``sglang_chunk``), a stats line read
from raw bytes in the layout learnt from the previous line of its kind, and, for every other
line, the text parser that defines the result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from exporter.engines import ending
from exporter.engines.batch import StatsBatch
from exporter.engines.engine import BandSteps, Deliveries, UpstreamReader, has_any
from exporter.engines.events import Event
from exporter.engines.record import LogLine, StatsRecord, Unrecognized
from exporter.engines.server_config import ServerConfig
from exporter.engines.sglang import (
    DECODE_LOG_INTERVAL,
    EVENT_MARKERS,
    NAME,
    STATS_KINDS,
    STATS_MARKERS,
    SGLangLines,
    classify,
)
from exporter.engines.sglang_chunk import ChunkReader
from exporter.engines.sglang_config import from_server_info
from exporter.engines.sglang_requests import (
    REQUEST_HEADS,
    REQUEST_MARKERS,
    is_request_record,
    read_request,
    request_lines,
)
from exporter.engines.sglang_startup import (
    MTP_CLASSES,
    SERVER_ARGS_FORMS,
    opens_server_args,
    parse_event,
)

if TYPE_CHECKING:
    from exporter.engines.simulation import Simulation

# A startup/config message names its subject within its first words ("Load weight end. ...",
# "The server is fired up ..."). Request logs and access lines, which may echo user text,
# only reach a marker much later ("Receive: obj=GenerateReqInput(text='..."), so they are
# never mistaken for events.
EVENT_MARKER_WINDOW = 20
# Batches this long are read whole by the chunk reader; shorter ones (a live server's lines,
# a few per wake-up) cost less line by line than the chunk reader's fixed cost per batch.
CHUNK_MIN_LINES = 32
# A bulk batch this long is read whole whatever its count of lines, which the chunk reader
# takes as it reads: a separate count was a pass over every byte. A shorter one is counted.
CHUNK_MIN_BYTES = 16 << 10

_OWN_MARKERS = STATS_MARKERS + EVENT_MARKERS
# What a reader looks for: its own lines and the lines of a server's end.
_ALL_MARKERS = _OWN_MARKERS + ending.MARKERS
# Lines other than stats lines that must be read one by one.
_LINE_MARKERS = EVENT_MARKERS + ending.MARKERS
# The same among the message heads of lines that all have the plain prefix: there only a
# message's start opens a server's end, so the causes' words (``out of memory``, ``Error: ``),
# which a request or access line may quote anywhere, need no line-by-line read.
_HEAD_MARKERS = EVENT_MARKERS + tuple(start.encode() for start in ending.OPENERS)
_EVENT_TEXT = re.compile("|".join(re.escape(marker.decode()) for marker in EVENT_MARKERS))
_EVENT_SCAN = EVENT_MARKER_WINDOW + max(map(len, EVENT_MARKERS))
# What the chunk reader keeps of other lines' messages: enough for every head marker and for
# both finished-request heads.
_MESSAGE_HEAD = max(_EVENT_SCAN, *map(len, _HEAD_MARKERS + REQUEST_HEADS))
# Characters of a line that hold a finished-request record's head (its prefix and form).
_REQUEST_HEAD = 160


class SGLangReader:
    """One source's SGLang lines: records, drift and start-up events, in order."""

    cuttable = True  # no state carries across SGLang's lines that a reader must have seen

    def __init__(self, sink: Deliveries, clean: Callable[[str], str]) -> None:
        self._sink = sink
        self._clean = clean
        self._lines = SGLangLines()  # this source's learnt layouts and prefixes
        self._chunk = ChunkReader(self._lines, message_head=_MESSAGE_HEAD)

    def finish(self) -> None:
        """Nothing is held between SGLang's lines."""

    def read(self, lines: list[bytes], blob: bytes, tidy: bool) -> None:
        if len(lines) >= CHUNK_MIN_LINES:
            found = self._chunk_records(blob) if tidy else "debris"
            if not isinstance(found, str):
                _, records, heads = found
                self._sink.on_records(records)
                self._requests(blob, heads)
                return
            self._sink.on_fallback(found)  # read line by line below, counted by reason
        handle = self._handle
        if len(lines) <= 2:  # a live pass's line or two: each read for its first marker,
            for line in lines:  # which is the first of those in the batch that it holds
                find = line.find  # (``find``, not ``in``: see ``engine.has_any``)
                for marker in _ALL_MARKERS:
                    if find(marker) >= 0:
                        handle(line, tidy, marker)
                        break
            self._requests(blob)
            return
        find = blob.find
        markers = tuple(marker for marker in _ALL_MARKERS if find(marker) >= 0)
        if markers:
            for line in lines:
                for marker in markers:
                    if line.find(marker) >= 0:
                        handle(line, tidy, marker)
                        break
        self._requests(blob)

    def read_whole(
        self, framed: bytes, tidy: bool, foreign: tuple[bytes, ...]
    ) -> tuple[int, Sequence[StatsRecord]] | None:
        """The chunk reader's count of lines and records; None leaves the batch to
        :meth:`read`, which counts why the chunk reader did not take it. A batch whose every
        line has SGLang's own prefix (the chunk reader's message heads) holds no line of
        another engine, whose lines start otherwise (``[`` opens no vLLM line): ``foreign``
        markers in it are quoted text, and it costs no scan for them."""
        if not tidy:
            return None
        if len(framed) < CHUNK_MIN_BYTES and framed.count(b"\n") <= CHUNK_MIN_LINES:
            return None  # fewer than CHUNK_MIN_LINES lines, each between two newlines
        found = self._chunk_records(framed)
        if isinstance(found, str):
            return None
        count, records, heads = found
        if heads is None and has_any(framed, foreign):
            return None
        self._requests(framed, heads)
        return count, records

    def read_clipped(self, line: bytes) -> None:
        """A finished request's figures are at the end of its line, which was kept."""
        record = read_request(line, clipped=True)
        if record is not None:
            self._sink.on_request(record)

    def _requests(self, blob: bytes, heads: bytes | None = None) -> None:
        """Finished requests (``--log-requests``) among a batch framed by newlines. They are
        not windows, so their order among the batch's stats records does not matter. Only the
        lines a marker was found in are looked at: a server that does not log requests costs
        two C scans of the batch, and one that does costs nothing per other line. ``heads``:
        the message heads of a batch whose every line has the plain prefix (the chunk
        reader's), where a request record must start: the batch is scanned only for the
        markers of the forms whose head one of them starts."""
        markers = REQUEST_MARKERS
        if heads is not None:
            forms = zip(REQUEST_HEADS, REQUEST_MARKERS, strict=True)
            markers = tuple(marker for head, marker in forms if head in heads)
        times = self._chunk.stamps()
        for line in request_lines(blob, markers):
            record = read_request(line, times=times)
            if record is not None:
                self._sink.on_request(record)

    def _chunk_records(self, blob: bytes) -> tuple[int, StatsBatch, bytes | None] | str:
        """A tidy batch's count of lines and records read in one pass (the hot path, see
        bench/), with the other lines' message heads when every line has the plain prefix
        (else None); or why not (one of ``sglang_chunk.FALLBACKS``): the chunk reader cannot
        read it exactly as line by line (a startup event among them, a line the line reader
        would count as invalid UTF-8, a layout not learnt yet or not readable by column)."""
        ascii = blob.isascii()
        if not ascii and not _valid_utf8(blob):
            return "invalid_utf8"
        found = self._chunk.read(blob, ascii)
        if isinstance(found, str):
            return found
        _, _, heads = found
        text, markers = (blob, _LINE_MARKERS) if heads is None else (heads, _HEAD_MARKERS)
        return "events" if has_any(text, markers) else found

    def _handle(self, line: bytes, tidy: bool, marker: bytes) -> None:
        """Dispatch one line that carries ``marker``.

        A stats line in the layout learnt from the previous line of its kind is read straight
        from its bytes (the hot path, see bench/); any other line is decoded, cleaned (unless
        ``tidy``) and read as text, which defines the result.
        """
        kind = STATS_KINDS.get(marker)
        result: StatsRecord | Unrecognized | LogLine | None = None
        text = ""
        if kind is not None and tidy and line.isascii():
            result = self._lines.read_stats_line(kind, line)
        if result is None:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                self._sink.on_skipped("invalid_utf8")
                return
            text = text if tidy else self._clean(text)
            result = self._lines.classify(text)
        if isinstance(result, StatsRecord):
            self._sink.on_record(result)
        elif isinstance(result, Unrecognized):
            self._sink.on_unrecognized(result.reason)
        elif result is not None:
            if is_event(result.message) or ending.opens(result.message):
                self._sink.on_event(result)
        elif marker in ending.MARKERS and ending.parse(text) is not None:
            self._sink.on_event(LogLine(None, None, None, text, NAME))  # a traceback's own lines
        elif text.startswith(BARE_RESET):  # logged before SGLang's logging is set up
            self._sink.on_event(LogLine(None, None, None, text, NAME))


# SGLang resolves its arguments, and warns of the cap it chose, before its logger has a
# format: the line has no prefix, and comes just before ``server_args=``.
BARE_RESET = "Max running requests is reset to "


def is_event(message: str) -> bool:
    """An event marker that starts within the first EVENT_MARKER_WINDOW characters."""
    found = _EVENT_TEXT.search(message, 0, _EVENT_SCAN)
    return found is not None and found.start() <= EVENT_MARKER_WINDOW


def _valid_utf8(blob: bytes) -> bool:
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# The algorithms SGLang's adaptive speculation serves, and the batch sizes its default config
# keys its tiers by (``--speculative-adaptive-config``).
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
ADAPTIVE_TIERS = (1, 8, 32, 64)

# Its algorithms (``--speculative-algorithm``, upper-cased) by the neutral algorithm whose
# standard each is judged by. NEXTN is the model's own MTP layers, which its server arguments
# show as EAGLE (rewritten before they are logged); FROZEN_KV_MTP drafts with them too;
# STANDALONE is a small draft model; DFLASH and DSPARK draft a block at a time.
JUDGED_AS = MappingProxyType(
    {
        "EAGLE": "EAGLE",
        "EAGLE3": "EAGLE3",
        "NEXTN": "MTP",
        "FROZEN_KV_MTP": "MTP",
        "STANDALONE": "DRAFT_MODEL",
        "NGRAM": "NGRAM",
        "DFLASH": "BLOCK_DRAFT",
        "DSPARK": "BLOCK_DRAFT",
        "UNO": "UNO",
    }
)


class SGLang:
    name = NAME
    title = "SGLang"
    metrics_paths = ("/metrics",)
    server_info_paths = ("/server_info", "/get_server_info")
    metrics_switch: str | None = "--enable-metrics"
    draft_settings = MappingProxyType(
        {
            "speculative_num_steps": "num_steps",
            "speculative_eagle_topk": "eagle_topk",
            "speculative_num_draft_tokens": "num_draft_tokens",
        }
    )
    # A finished-request line tells SGLang too: its request log may have a file of its own
    # (--log-requests-target).
    markers = _OWN_MARKERS + REQUEST_MARKERS
    start_markers = tuple(opening.encode() for opening, _ in SERVER_ARGS_FORMS)
    fixes: Mapping[str, str] = {
        "eagle3_algorithm": "--speculative-algorithm EAGLE3",
        "speculative_tokens": "--speculative-num-steps",
        # Fewer drafts a round, in its count of verified positions (``count``).
        "draft_tokens": "--speculative-num-draft-tokens to about {count}",
        "ngram_window": "--speculative-ngram-max-trie-depth",
        # Its block drafters run one draft step, their block set by a flag of their own:
        # DFLASH's is the verify window (the drafted tokens and the target's one), DSPARK's
        # the drafted tokens (gamma).
        "dflash_block": "--speculative-dflash-block-size {count}",
        "dspark_block": "--speculative-dspark-block-size {steps}",
        "log_stats": (
            f"--log-level info and the default --decode-log-interval {DECODE_LOG_INTERVAL}"
        ),
        "cuda_graphs_off": "disable_cuda_graph=True in the server arguments",
        "cuda_graphs_off_backend": (
            "the decode backend of cuda_graph_config is 'disabled' in the server arguments "
            "(SGLang 0.5.23)"
        ),
        "cuda_graphs_on": (
            "the server without --disable-cuda-graph, and from SGLang 0.5.23 without "
            "--disable-decode-cuda-graph or --cuda-graph-backend-decode=disabled (the "
            "torch_native and flex_attention attention backends turn decode graphs off too)"
        ),
        "rank_lines": "its [DP{rank} ...] prefix",
        "gpu_headroom": "--mem-fraction-static or --max-running-requests",
        # Its running-request cap, and the largest decode batch it captures in a CUDA graph.
        "running_cap": "--max-running-requests",
        # The cap it picks itself when none is given: what the capped finding blames.
        "running_cap_default": (
            "lowers the cap to 48 for EAGLE when --max-running-requests is unset"
        ),
        "graph_batch_cap": "--cuda-graph-max-bs (--cuda-graph-max-bs-decode from SGLang 0.5.23)",
        "graph_headroom": (
            "--mem-fraction-static (0.8, then 0.7) or --cuda-graph-max-bs "
            "(--cuda-graph-max-bs-decode from 0.5.23)"
        ),
        "drafting_off_cost": (
            "runs the draft model's extend every round at 0 steps, to keep its cache warm: "
            "start it with SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 to skip that (the "
            "draft's cache is then cold when the load drops and drafting resumes, and accepts "
            "less until it warms), or turn drafting off at a higher load (the batch-size tier "
            "of candidate_steps [0] in --speculative-adaptive-config), or serve this load "
            "without speculation"
        ),
    }

    off_cause = "adaptive"
    # Its /metrics names are written sglang: or sglang_ (by release): read as one.
    metric_name_folds: Mapping[str, str] = {"sglang:": "sglang_"}
    decode_log_interval: int | None = DECODE_LOG_INTERVAL

    def simulation(self) -> Simulation:
        # Only the simulator pays for importing it; the daemon and other commands do not.
        from exporter.engines.sglang_sim.writer import SIMULATION

        return SIMULATION

    def no_accept_length(self, algorithm: str | None, started: bool) -> str:
        if algorithm is not None:
            return "SGLang logs one only while it speculates"
        return "SGLang logs one only while it speculates, and its arguments name no " + (
            "--speculative-algorithm"
        )

    def owns(self, text: str) -> bool:
        if is_request_record(text[:_REQUEST_HEAD].encode()):
            return True
        result = classify(text)
        if isinstance(result, LogLine):
            return is_event(result.message)
        return result is not None

    def starts(self, text: str) -> bool:
        return opens_server_args(text) and self.owns(text)

    def log_reader(self, sink: Deliveries, clean: Callable[[str], str]) -> SGLangReader:
        return SGLangReader(sink, clean)

    def parse_event(self, message: str) -> Event | None:
        return parse_event(message)

    def read_server_info(self, info: Mapping[str, Any]) -> ServerConfig | None:
        return from_server_info(info)

    def upstream_reader(self, prefix: str | None = None) -> UpstreamReader | None:
        """SGLang's names (either spelling, see ``sources.upstream``); no other prefix."""
        from exporter.engines.sglang_upstream import SGLangUpstream  # see Engine.upstream_reader

        return SGLangUpstream() if prefix in (None, "sglang_", "sglang:") else None

    def judged_as(self, algorithm: str, draft_architecture: str | None) -> str | None:
        """Its names, case aside (``--speculative-algorithm eagle3`` is EAGLE3); an EAGLE run
        whose draft loaded as a NextN/MTP class is the model's MTP layers (NEXTN)."""
        judged = JUDGED_AS.get(algorithm.upper())
        architecture = draft_architecture or ""
        if judged in ("EAGLE", "EAGLE3") and any(part in architecture for part in MTP_CLASSES):
            return "MTP"
        return judged

    def schedule(self, steps: Sequence[BandSteps], algorithm: str | None) -> str | None:
        """Adaptive speculation's ``candidate_steps`` per batch-size tier, for the algorithms
        it serves (EAGLE and EAGLE3; NEXTN/MTP runs as EAGLE)."""
        if algorithm not in ADAPTIVE_ALGORITHMS:
            return None
        tiers: dict[str, list[int]] = {}
        for first, _, count in steps:
            tier = str(max(t for t in ADAPTIVE_TIERS if t <= max(first, 1)))
            if count not in tiers.setdefault(tier, []):
                tiers[tier].append(count)
        config = {tier: {"candidate_steps": sorted(counts)} for tier, counts in tiers.items()}
        return (
            "SGLang: --speculative-adaptive --speculative-adaptive-config FILE, FILE holding "
            f"{json.dumps(config)}"
        )


ENGINE = SGLang()
