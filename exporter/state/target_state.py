"""Per-target state: what the log has told us so far, and an immutable snapshot of it.

Parsers and tailers write here from their own threads; the collector only ever reads a
snapshot. Doing the work on write and copying on read keeps every scrape cheap and lets
concurrent scrapes run without blocking the tailer for long.
"""

from __future__ import annotations

import bisect
import functools
import operator
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress

from exporter import clock
from exporter.analysis.baseline import Baseline
from exporter.analysis.findings import Interleaving
from exporter.analysis.node import all_speak_for_node, speaks_for_node
from exporter.engines import ending
from exporter.engines.draft_config import DraftLookups
from exporter.engines.record import LogLine, StatsRecord, drafting_off, drafting_off_count
from exporter.engines.server_config import ServerConfig
from exporter.state.evidence import Evidence
from exporter.state.requests import RequestStats
from exporter.state.runs import RunTracker
from exporter.state.speed import SpeedCounters
from exporter.state.streams import StreamWatch
from exporter.state.verdict import VerdictTrack

# Upper bounds of `specwatch_accept_length_windows`.
ACCEPT_LENGTH_BUCKETS: tuple[float, ...] = (1.0, 1.05, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
# DP ranks that get their own per-window series (config ``max_dp_ranks``): each costs 8 series,
# and past a few dozen ranks an on-call reads the node's totals, not one line per rank.
DEFAULT_MAX_DP_RANKS = 32
# Folded ranks are remembered to count them; more distinct ranks than this are hostile input.
MAX_FOLDED_DP_RANKS = 4096
# Speculation counts a window may carry (vLLM logs them), summed into exported counters.
SPECULATION_COUNTS = ("drafts", "draft_tokens", "accepted_tokens")
_DP_RANK = operator.attrgetter("dp_rank")


@dataclass(frozen=True, slots=True)
class LatestDecode:
    """The newest decode stats of one DP rank and when specwatch saw them (wall clock): when
    it read them, or when their file was last written if that is earlier."""

    record: StatsRecord
    observed_at: float
    # Verified positions a round in force when the window was logged: derived figures divide
    # by the setup of the window's own run, never by a restarted server's new one.
    draft_tokens: int | None = None


@dataclass(frozen=True)
class TargetSnapshot:
    """Everything the collector renders for one target, copied under the lock."""

    name: str
    windows: dict[int | None, LatestDecode]
    last_decode_at: float | None
    # When specwatch read the server's end (a crash) in its log, or when that file was last
    # written if earlier; None while the run serves.
    ended_at: float | None
    decode_windows: dict[bool, int]
    accept_length_buckets: tuple[int, ...]
    accept_length_sum: float
    accept_length_count: int
    drafting_off_windows: int
    adaptive_step_changes: int
    log_lines: int
    stats_lines: dict[str, int]
    unrecognized: int
    rotations: int
    truncations: int
    skipped: dict[str, int]
    read_errors: int
    # Sums of the windows' speculation counts, only for counts some window has carried.
    speculation: dict[str, int]
    engine: str | None  # the engine of the newest stats line
    log_sources: dict[str, str]  # configured path -> SourceReason of its newest pass
    folded_dp_ranks: int
    generated_tokens: float
    # Node moments at or below / above the baseline; None without a baseline to judge by.
    windows_vs_baseline: dict[str, int] | None
    # Long batches read line by line instead of whole, by reason (see engines.sglang_chunk).
    chunk_fallbacks: dict[str, int]
    # Two servers' lines in one of its logs (``state.streams``): no window is one server's.
    interleaving: Interleaving | None = None

    def fresh_windows(self, now: float, stale_after: float) -> dict[int | None, LatestDecode]:
        """Windows young enough to be shown as current (younger than ``stale_after``); none
        while two servers write one log: the newest window is either's, in turn."""
        if self.interleaving is not None:
            return {}
        return {k: w for k, w in self.windows.items() if now - w.observed_at < stale_after}


class TargetState:
    """Mutable state of one watched server; every method is thread-safe."""

    def __init__(
        self,
        name: str,
        max_dp_ranks: int = DEFAULT_MAX_DP_RANKS,
        node_loads: bool = True,
        requests: RequestStats | None = None,
        baseline: Baseline | None = None,
        drafts: DraftLookups | None = None,
    ) -> None:
        """``node_loads``: whether the evidence keeps the node loads that
        ``Evidence.recent_speedup`` compares with a baseline (not needed without one).
        ``requests``: the finished requests' distribution (thread-safe on its own).
        ``drafts``: the target's draft-config answers, shared with its scraper."""
        self.name = name
        self.requests = requests or RequestStats()
        self._lock = threading.Lock()
        self._windows: dict[int | None, LatestDecode] = {}
        # A restart was read and the new run has logged no window yet: the old run's windows
        # stand until it does, then all go, not only the ranks the new run logs again.
        self._windows_of_old_run = False
        self._max_dp_ranks = max_dp_ranks
        self._folded: set[int] = set()
        self._last_decode_at: float | None = None
        self._ended_at: float | None = None
        self._decode_windows = {True: 0, False: 0}
        self._speed = SpeedCounters(baseline)
        self._baseline = baseline
        # The judge's state now and since when, told once per change (``state.verdict``).
        self.verdict = VerdictTrack(name)
        self._buckets = [0] * len(ACCEPT_LENGTH_BUCKETS)
        self._accept_sum = 0.0
        self._accept_count = 0
        self._drafting_off_windows = 0  # adaptive had drafting off: not in the accept figures
        self._log_lines = 0
        self._stats_lines: Counter[str] = Counter({"decode": 0, "prefill": 0})
        self._unrecognized = 0
        self._rotations = 0
        self._truncations = 0
        self._skipped: Counter[str] = Counter()
        self._fallbacks: Counter[str] = Counter()
        self._read_errors = 0
        self._speculation: dict[str, int] = {}
        self._engine: str | None = None
        self._log_sources: dict[str, str] = {}
        self._node_loads = node_loads
        self._speculating = False  # this server run drafts (see ``_speculative``)
        # Configuration from startup lines and recent windows for findings; both thread-safe.
        self.tracker = RunTracker(drafts)
        self.evidence = self._new_evidence()
        self._streams: list[StreamWatch] = []  # one per log source

    def watch_streams(self) -> StreamWatch:
        """A new log source's watch over the servers writing it."""
        watch = StreamWatch()
        with self._lock:
            self._streams.append(watch)
        return watch

    def interleaving(self) -> Interleaving | None:
        """Two servers' lines in one of the target's logs, as the first source showing it
        saw them; None while each log is one server's."""
        with self._lock:
            watches = list(self._streams)
        return _first_seen(watches)

    # --- log events -------------------------------------------------------------------------
    def add_lines(self, count: int) -> None:
        with self._lock:
            self._log_lines += count

    def add_record(self, record: StatsRecord, observed_at: float | None = None) -> None:
        """Count a stats line and, for decode lines, make it the current window."""
        self.add_records((record,), observed_at)

    def add_records(
        self,
        records: Sequence[StatsRecord],
        observed_at: float | None = None,
        times: Sequence[float] | None = None,
    ) -> None:
        """Count stats lines read together, exactly as ``add_record`` on each in turn would.

        One clock read, one lock and a few C-speed passes per batch instead of a dozen calls
        per line: a daemon catching up on a long log takes half a million records.
        ``observed_at``: when they were written at the latest (a log file's mtime after the
        read); now by default. Freshness is measured from it. ``times``: each record's own
        time, none later than ``observed_at`` (a backlog dated by its logged times), where
        known.
        """
        if not records:
            return
        now = clock.now() if observed_at is None else observed_at
        config = self.tracker.config
        records = self.tracker.stamped(records)
        decodes = [record for record in records if record.kind == "decode"]
        decode_times = times
        if times is not None:
            if len(decodes) < len(records):
                decode_times = list(compress(times, [r.kind == "decode" for r in records]))
            now = decode_times[-1] if decode_times else times[-1]
        self.evidence.interval = config.decode_log_interval
        loads = self.evidence.add_records(records, now, decodes, decode_times)
        with self._lock:
            self._stats_lines["decode"] += len(decodes)
            self._stats_lines["prefill"] += len(records) - len(decodes)  # the only other kind
            self._engine = records[-1].engine
            if decodes:
                self._count_windows(decodes)
                self._speed.add(decodes)
                self._speed.judge(loads, self._speculative(config, decodes))
                self._count_speculation(decodes)
                folded = self._set_windows(decodes, now, config.draft_tokens_now)
                if folded:
                    self._skipped["too_many_ranks"] += folded

    def restore_window(self, record: StatsRecord, observed_at: float) -> None:
        """Adopt a window read back from an existing file at start, without counting it.

        ``observed_at`` is the file's mtime, so a log that stopped long ago stays stale.
        """
        if record.kind != "decode":
            return
        config = self.tracker.config
        [record] = self.tracker.stamped((record,))
        self.evidence.add_record(record, observed_at)
        with self._lock:
            self._engine = record.engine
            self._set_windows((record,), observed_at, config.draft_tokens_now)

    def _set_windows(
        self, decodes: Sequence[StatsRecord], observed_at: float, draft_tokens: int | None
    ) -> int:
        """Make the newest decode of each rank its window; the number of decodes left without
        one because their DP rank is past the first ``max_dp_ranks``.

        All share ``observed_at``, so only each rank's last decode can become its window; ranks
        are taken in the order they first appear, which decides who gets the last free slots.
        """
        # Lines repeating another scheduler's figures (TP ranks but 0, later pipeline stages)
        # are left out.
        if all_speak_for_node(decodes):  # a DP-attention node's lines: no call per line
            newest = dict(zip(map(_DP_RANK, decodes), decodes, strict=True))
        else:
            newest = {r.dp_rank: r for r in decodes if speaks_for_node(r)}
        if newest and self._windows_of_old_run:
            self._windows.clear()
            self._windows_of_old_run = False
        folded = 0
        placed = False
        for key, record in newest.items():
            if self._folds(key):
                folded += sum(1 for r in decodes if r.dp_rank == key)
                continue
            placed = True
            current = self._windows.get(key)
            if current is None or observed_at >= current.observed_at:
                self._windows[key] = LatestDecode(record, observed_at, draft_tokens)
        known = observed_at > clock.UNKNOWN  # a date that cannot be true is not exported
        if (
            placed
            and known
            and (self._last_decode_at is None or observed_at > self._last_decode_at)
        ):
            self._last_decode_at = observed_at
        return folded

    def _folds(self, key: int | None) -> bool:
        """Whether a new DP rank finds every window taken: counted in the totals already, it gets
        no series of its own (see docs/deployment.md, series per node)."""
        if key is None or key in self._windows or len(self._windows) < self._max_dp_ranks:
            return False
        if len(self._folded) < MAX_FOLDED_DP_RANKS:
            self._folded.add(key)
        return True

    def _count_windows(self, decodes: Sequence[StatsRecord]) -> None:
        if len(decodes) == 1:  # a live pass's one window: as below, without the lists
            self._count_window(decodes[0])
            return
        graphs = [record.cuda_graph for record in decodes]
        self._decode_windows[True] += graphs.count(True)
        self._decode_windows[False] += graphs.count(False)
        off = drafting_off_count(decodes)
        self._drafting_off_windows += off
        values = [
            v
            for record in decodes
            if (v := record.accept_length) is not None and not (off and drafting_off(record))
        ]
        if not values:
            return
        # Added one by one in order, as a float sum is order-sensitive (``sum`` may not be).
        self._accept_sum = functools.reduce(operator.add, values, self._accept_sum)
        self._accept_count += len(values)
        # ``<=`` is false for NaN, as for any value above the last bound: no bucket.
        kept = [v for v in values if v <= ACCEPT_LENGTH_BUCKETS[-1]]
        if len(kept) < len(ACCEPT_LENGTH_BUCKETS):  # a live read's few: each finds its bucket
            for value in kept:  # bucket i holds bounds[i-1] < v <= bounds[i]
                self._buckets[bisect.bisect_left(ACCEPT_LENGTH_BUCKETS, value)] += 1
            return
        ordered = sorted(kept)
        below = 0  # values in the buckets before: bucket i holds bounds[i-1] < v <= bounds[i]
        for index, bound in enumerate(ACCEPT_LENGTH_BUCKETS):
            upto = bisect.bisect_right(ordered, bound, below)
            self._buckets[index] += upto - below
            below = upto

    def _count_window(self, record: StatsRecord) -> None:
        """``_count_windows`` of one window."""
        if record.cuda_graph is not None:
            self._decode_windows[record.cuda_graph] += 1
        off = bool(record.extra) and drafting_off(record)
        self._drafting_off_windows += off
        value = record.accept_length
        if value is None or off:
            return
        self._accept_sum += value
        self._accept_count += 1
        if value <= ACCEPT_LENGTH_BUCKETS[-1]:  # false for NaN, as above the last bound
            self._buckets[bisect.bisect_left(ACCEPT_LENGTH_BUCKETS, value)] += 1

    def _speculative(self, config: ServerConfig, decodes: Sequence[StatsRecord]) -> bool:
        """Whether the run drafts: its arguments name an algorithm, or a window of it (these
        or earlier ones) carried speculation figures. Under the lock."""
        if not self._speculating:
            self._speculating = config.algorithm is not None or any(
                r.accept_length is not None or r.draft_counts is not None for r in decodes
            )
        return self._speculating

    @property
    def engine(self) -> str | None:
        """The engine of the newest stats line, without a snapshot: the start-up summary asks
        for it every second, and a snapshot copies the whole state under its lock."""
        return self._engine

    @property
    def baseline(self) -> Baseline | None:
        """What speed is judged against: the configured baseline, else one learned from this
        node's windows with drafting off (once a band has enough of them)."""
        with self._lock:
            return self._speed.baseline

    def band_sums(self) -> list[tuple[str, int, int, float]]:
        """Each mode's bands that hold windows: the mode, the band's index, its windows and
        their throughput's sum, read under the lock (what a scrape exports of them, for a
        tenth of the price of a copy of every band)."""
        with self._lock:
            return [
                (mode, index, band.windows, band.tok_s_sum)
                for mode, speed in self._speed.bands.items()
                for index, band in enumerate(speed.bands)
                if band.windows
            ]

    def _count_speculation(self, decodes: Sequence[StatsRecord]) -> None:
        counts = [c for record in decodes if (c := record.draft_counts) is not None]
        for count in counts:  # one by one: the order names first appear is the export order
            for name in SPECULATION_COUNTS:
                value = getattr(count, name)
                if value is not None:
                    self._speculation[name] = self._speculation.get(name, 0) + value

    def add_unrecognized(self) -> None:
        self.evidence.add_unrecognized()
        with self._lock:
            self._unrecognized += 1

    def add_event(self, line: LogLine, observed_at: float | None = None) -> None:
        """A startup/config line: update the server configuration the findings rest on; a
        line of the server's end: remember it for the findings, and when it was written
        (``observed_at``, as for ``add_records``; now by default).

        A new ``server_args`` line is a restart; windows of the old run no longer describe the
        server, so the findings evidence starts afresh.
        """
        if self.tracker.observe(line):
            self.evidence = self._new_evidence()
            with self._lock:
                self._speed.restart()
                self._speculating = False
                self._windows_of_old_run = bool(self._windows)
        end = ending.parse(line.message, line.time)
        if end is not None:
            if self.evidence.ending is None:
                with self._lock:
                    at = clock.now() if observed_at is None else observed_at
                    self._ended_at = at if at > clock.UNKNOWN else None
            self.evidence.add_ending(end)

    def _new_evidence(self) -> Evidence:
        return Evidence(
            started_at=clock.now(), node_loads=self._node_loads, baseline=self._baseline
        )

    def add_skipped(self, reason: str) -> None:
        with self._lock:
            self._skipped[reason] += 1

    def add_fallback(self, reason: str) -> None:
        with self._lock:
            self._fallbacks[reason] += 1

    def add_rotation(self) -> None:
        with self._lock:
            self._rotations += 1

    def add_truncation(self) -> None:
        with self._lock:
            self._truncations += 1

    def add_read_error(self) -> None:
        with self._lock:
            self._read_errors += 1

    def set_log_source(self, path: str, reason: str) -> None:
        """Whether a configured log path is followed (``ok``) or what stands in the way."""
        with self._lock:
            self._log_sources[path] = reason

    # --- reading ----------------------------------------------------------------------------
    def log_sources(self) -> dict[str, str]:
        """Each configured log path's reason, without the cost of a whole snapshot."""
        with self._lock:
            return dict(self._log_sources)

    def _windows_vs_baseline(self) -> dict[str, int] | None:
        """The speed counters by label, under the lock; ``drafting_off`` for a server that
        can turn drafting off (from 0, so its first increase is seen) or did."""
        speed = self._speed
        if not speed.judged:
            return None
        counts = {"at_or_below": speed.at_or_below, "above": speed.above}
        if self.tracker.config.adaptive or speed.drafting_off:
            counts["drafting_off"] = speed.drafting_off
        return counts

    def snapshot(self) -> TargetSnapshot:
        with self._lock:
            cumulative, running = [], 0
            for count in self._buckets:
                running += count
                cumulative.append(running)
            return TargetSnapshot(
                name=self.name,
                windows=dict(self._windows),
                last_decode_at=self._last_decode_at,
                ended_at=self._ended_at if self.evidence.ending is not None else None,
                decode_windows=dict(self._decode_windows),
                accept_length_buckets=tuple(cumulative),
                accept_length_sum=self._accept_sum,
                accept_length_count=self._accept_count,
                drafting_off_windows=self._drafting_off_windows,
                adaptive_step_changes=self.tracker.step_changes,
                log_lines=self._log_lines,
                stats_lines=dict(self._stats_lines),
                unrecognized=self._unrecognized,
                rotations=self._rotations,
                truncations=self._truncations,
                skipped=dict(self._skipped),
                read_errors=self._read_errors,
                speculation=dict(self._speculation),
                engine=self._engine,
                log_sources=dict(self._log_sources),
                folded_dp_ranks=len(self._folded),
                generated_tokens=self._speed.generated_tokens,
                windows_vs_baseline=self._windows_vs_baseline(),
                chunk_fallbacks=dict(self._fallbacks),
                interleaving=_first_seen(self._streams),
            )


def _first_seen(watches: Sequence[StreamWatch]) -> Interleaving | None:
    """What the first of the sources that shows two servers saw."""
    return next((seen for watch in watches if (seen := watch.interleaving()) is not None), None)
