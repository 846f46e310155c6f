"""What an engine is to specwatch: the one protocol every engine module fills.

An engine module defines ``ENGINE``, an object with these members, and the registry
(``engines/registry.py``) finds it; the pipeline, config, CLI choices, upstream scraper,
simulator and findings read the registry, so adding an engine touches its own module alone
(its tests and its column of docs/engines.md come with it). Everything is resolved once per
source or scraper (a reader is made per source, holding that source's state), never per line:
the per-line paths stay the engine's own code, with no lookup in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from exporter.engines.events import Event
from exporter.engines.record import LogLine, RequestRecord, StatsRecord, UpstreamValues
from exporter.engines.server_config import ServerConfig

if TYPE_CHECKING:
    from exporter.engines.simulation import Simulation

# A /metrics exposition: samples by metric name, each its labels and value.
Samples = Mapping[str, list[tuple[dict[str, str], float]]]


def has_any(data: bytes, needles: Iterable[bytes]) -> bool:
    """Whether one of ``needles`` occurs in ``data``: the readers' scan of a batch, or of a
    line, for markers. By ``find``, not ``in``: CPython 3.11's ``bytes.__contains__`` first
    takes its operand for an integer and formats the ``TypeError`` it then clears, which
    made a marker's scan of a short line cost 2.3 times as much (201 against 86 ns; a live
    pass of one line scanned for some 35 markers)."""
    find = data.find
    for needle in needles:  # noqa: SIM110 - any() of a generator took 1.7 times as long
        if find(needle) >= 0:
            return True
    return False


class Deliveries(Protocol):
    """Where a log reader delivers what it read (the pipeline's ``RecordSink`` is one)."""

    def on_record(self, record: StatsRecord) -> None: ...

    def on_records(self, records: Sequence[StatsRecord]) -> None: ...

    def on_unrecognized(self, reason: str) -> None: ...

    def on_skipped(self, reason: str) -> None: ...

    def on_event(self, line: LogLine) -> None: ...

    def on_fallback(self, reason: str) -> None: ...
    def on_request(self, record: RequestRecord) -> None: ...


class LogReader(Protocol):
    """One source's reader of one engine's log lines, with whatever that source's lines teach
    it (layouts learnt, a held line): two sources never share it.

    ``lines`` are a batch's lines with the envelope removed; ``blob`` the same lines each
    between two newlines, for C-speed scans; ``tidy`` says no line has terminal debris, so
    none needs cleaning.
    """

    @property
    def cuttable(self) -> bool:
        """Whether a part of a plain log can be read by another reader alone: no state
        carries across lines (see ``parse.ranges``)."""
        ...

    def read(self, lines: list[bytes], blob: bytes, tidy: bool) -> None: ...

    def read_whole(
        self, framed: bytes, tidy: bool, foreign: tuple[bytes, ...]
    ) -> tuple[int, Sequence[StatsRecord]] | None:
        """How many lines a plain batch holds (each between two newlines) and their records,
        read whole; or None to have the batch split and read line by line. ``foreign``: markers of
        lines another engine formats (its stats lines, its server's start), which the split
        batch hands to that engine's reader: a batch holding one is declined, unless the
        reader knows every line of it to be its own engine's."""
        ...

    def read_clipped(self, line: bytes) -> None:
        """The head and tail of a line over the line cap, joined: what a record carries at
        its end (a finished request's figures) can still be read."""
        ...

    def finish(self) -> None:
        """The source has ended: deliver what is still held."""
        ...


class UpstreamReader(Protocol):
    """One scraper's reader of an engine's ``/metrics``: metric names to values, keeping what
    it needs between scrapes (counters, to turn into rates over the scrape window)."""

    def claims(self, samples: Samples) -> bool:
        """Whether these samples are this engine's exposition."""
        ...

    def bounds(self, name: str) -> str | None:
        """How a sample of ``name`` that it reads can be true: ``count`` (at least 0),
        ``ratio`` (0-1) or ``accept_length`` (0, or 1 to 64); None for a name it does not
        read. The scraper drops and counts what falls outside, before any reader sees it."""
        ...

    def reads(self, name: str) -> bool:
        """Whether a family or sample named ``name`` may matter to it: the scraper parses only
        the lines some reader reads (a 1.7 MB exposition took 13 s to parse whole)."""
        ...

    def read(self, samples: Samples, at: float) -> UpstreamValues:
        """The normalised values of one scrape taken at monotonic time ``at``."""
        ...

    def reset(self) -> None:
        """The endpoint failed: the next scrape starts a new window."""
        ...


# Draft steps for a range of batch sizes: first, last (None: open-ended), steps (0: none).
BandSteps = tuple[int, int | None, int]


@runtime_checkable
class Engine(Protocol):
    """An engine: name, detection, log grammar, upstream reader, algorithms and fix texts."""

    name: str  # the value of ``engine:`` and of the ``engine`` label
    title: str  # as people write it, in fix texts and docs
    markers: tuple[bytes, ...]  # bytes every one of its stats or start-up lines carries
    # Bytes every line that starts its server run carries (some of ``markers``): what a source
    # of another engine is scanned for, batch by batch, to see it change engine.
    start_markers: tuple[bytes, ...]
    # Where under the server's base URL it serves its Prometheus exposition, in the order to
    # try (TensorRT-LLM's /prometheus/metrics: its /metrics is JSON).
    metrics_paths: tuple[str, ...]
    # Where its server answers with its arguments (SGLang's /server_info, /get_server_info
    # before 0.5.6), in the order to try; empty for a server that has none: only an engine
    # with one is asked, and a 404 from any other is no problem.
    server_info_paths: tuple[str, ...]
    # Its own names for the draft count, each with the ServerConfig field that holds it
    # (SGLang's speculative_num_steps, vLLM's num_speculative_tokens): how the start-up
    # summary says what the server drafts, in the words of the flags that set it.
    draft_settings: Mapping[str, str]
    # The flag that turns its /metrics on, where it serves none unless told (SGLang's
    # ``--enable-metrics``); None where its /metrics is always served. A 404 at /metrics from
    # such an engine's server is that switch left off; from any other, a wrong URL.
    metrics_switch: str | None

    # Fix texts by the change they name, in this engine's own flags; findings join every
    # engine's phrase: ``eagle3_algorithm``, ``speculative_tokens``, ``log_stats``,
    # ``draft_tokens`` (a template of ``count``, verified positions, or ``steps``, drafted
    # tokens); ``ngram_window`` where it serves n-gram lookup. An engine
    # whose configuration can turn CUDA graphs off says how it reads (``cuda_graphs_off``;
    # ``cuda_graphs_off_backend`` where a resolved decode backend says it) and how to restart
    # with them on (``cuda_graphs_on``), for the node it runs on alone.
    fixes: Mapping[str, str]
    # What turns its drafting off by design at times, in its own words ("adaptive"): said
    # beside "speculation off" wherever a window drafted nothing. Empty for an engine whose
    # log is not read.
    off_cause: str
    # Spellings of its metric names that it folds into the one its upstream reader reads,
    # old to new (SGLang's ``sglang:`` and ``sglang_``), applied to a scrape before any reader
    # claims it.
    metric_name_folds: Mapping[str, str]
    # Decode rounds between two of its stats lines where its configuration does not say
    # (SGLang's --decode-log-interval, 40): a line that counts no draft rounds of its own
    # covers this many batches of its running requests. None for an engine without such an
    # interval (its lines count their rounds, or it logs by time).
    decode_log_interval: int | None

    def simulation(self) -> Simulation | None:
        """How it writes a scenario's server runs as its log (``specwatch simulate``, the
        demo, the tests and benchmarks); None for an engine whose log is not read. Imported
        when asked (a method, so that a check of the protocol does not ask): the daemon and
        the other commands never load a simulator."""
        ...

    def no_accept_length(self, algorithm: str | None, started: bool) -> str:
        """Why a run of its log shows no accept length, in its words: ``algorithm`` is the
        run's speculative algorithm as its configuration named it, ``started`` whether the
        run's start was seen."""
        ...

    def owns(self, text: str) -> bool:
        """Whether the engine itself formatted this cleaned line as one of its stats or
        start-up lines (a prompt quoting its text in a request log is not)."""
        ...

    def starts(self, text: str) -> bool:
        """Whether this cleaned line, one it owns, starts a server run: where a source that
        changes engine (a node moved to another engine, the same log file) is read by it."""
        ...

    def log_reader(self, sink: Deliveries, clean: Callable[[str], str]) -> LogReader | None:
        """A reader for one source (``clean`` strips terminal debris from a line's text), or
        None when specwatch reads no log of this engine (then ``markers`` is empty)."""
        ...

    def parse_event(self, message: str) -> Event | None:
        """The start-up event in the message of one of its lines, if any. A model's load
        (``WeightsLoaded``) says ``draft`` where the engine knows its class for a draft's: the
        run's state knows no engine's class names."""
        ...

    def read_server_info(self, info: Mapping[str, Any]) -> ServerConfig | None:
        """Its server's ``/server_info`` JSON in specwatch's terms; None for an engine whose
        server has none (no ``server_info_paths``)."""
        ...

    def upstream_reader(self, prefix: str | None = None) -> UpstreamReader | None:
        """A reader for one scraper, or None when the engine exports no ``/metrics``.

        ``prefix`` is the target's ``metrics_prefix``: the start of every metric name its
        server writes, where that is not the engine's own (another server writing the same
        schema, a bridge renaming it). An engine whose names cannot carry that prefix answers
        None; None reads the engine's own names, or whatever the reader finds. The reader's
        module is imported here, when first asked: a daemon that follows logs alone never
        loads one.
        """
        ...

    def judged_as(self, algorithm: str, draft_architecture: str | None) -> str | None:
        """The neutral algorithm whose standard a run of ``algorithm`` (as its configuration
        names it) with a draft loaded as ``draft_architecture`` is judged by: a key of
        ``STANDARDS`` in ``analysis/algorithms.py`` (``EAGLE``, ``EAGLE3``, ``MTP``,
        ``DRAFT_MODEL``, ``NGRAM``, ``SUFFIX``, ``BLOCK_DRAFT``, ``UNO``, ``MEDUSA``). None for
        an algorithm it does not know (a plugin's), which is judged on speed only. Its own
        spellings stay here: the analysis knows only the neutral names."""
        ...

    def schedule(self, steps: Sequence[BandSteps], algorithm: str | None) -> str | None:
        """Draft steps by batch size in its own setting (vLLM's per-batch-size table, SGLang's
        adaptive tiers), or None where it schedules none for ``algorithm``."""
        ...
