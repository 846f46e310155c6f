"""The normalised records that engine parsers produce and everything downstream consumes.

Keeping one small, engine-neutral shape here is what lets the tailer, the daemon state, the
report and the simulator's round-trip tests agree without knowing any log format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import lru_cache, partial
from types import MappingProxyType
from typing import Any, NamedTuple

from exporter.engines.server_config import ServerConfig


@dataclass(frozen=True, slots=True)
class DraftCounts:
    """A window's speculation counts, where the engine logs them (vLLM): draft tokens proposed
    and accepted (the bonus token excluded), draft rounds, and the share of rounds whose first
    ``i + 1`` drafts were all accepted, by position ``i``."""

    draft_tokens: int
    accepted_tokens: int
    drafts: int | None = None
    accept_rate_by_position: tuple[float, ...] | None = None


class StatsRecord(NamedTuple):
    """One scheduler stats line (decode or prefill window): the fields `specwatch parse` prints.

    A field the line does not carry stays ``None``: absence is information (an old SGLang
    without ``accept rate``, a non-speculative server) and must not be faked as zero.

    A tuple, not a dataclass: a busy node logs hundreds of thousands of these, and a tuple is
    built in C (``tuple.__new__``) at a fraction of a generated ``__init__``'s cost (see bench/).
    Records are never changed after they are read; ``_replace`` makes a changed copy.
    """

    kind: str  # "decode" | "prefill"
    time: str | None = None
    engine: str = "sglang"
    dp_rank: int | None = None
    tp_rank: int | None = None
    pp_rank: int | None = None  # the pipeline stage (SGLang's --pp-size), where it names one
    running_requests: int | None = None
    queued_requests: int | None = None
    token_usage: float | None = None
    accept_length: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    gen_throughput: float | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    input_throughput: float | None = None
    # One field for what only some engines log, so the others pay one default per record.
    draft_counts: DraftCounts | None = None
    extra: Mapping[str, Any] = MappingProxyType({})  # shared, so read-only

    def to_json_dict(self) -> dict[str, Any]:
        """The record's own keys first; extras are flattened after them and never override."""
        data = self._asdict()
        extra = data.pop("extra")
        if self.kind == "decode":
            for key in ("new_tokens", "cached_tokens", "input_throughput"):
                data.pop(key)
        counts = data.pop("draft_counts")
        if counts is not None:  # flattened; engines that do not log them keep their shape
            data.update({k: v for k, v in asdict(counts).items() if v is not None})
        for key, value in extra.items():
            data.setdefault(key, value)
        return data


# The draft steps adaptive speculation had in force when a decode window was logged (in
# ``extra``): the decode line does not say, the run's adaptive lines before it do.
SPEC_STEPS = "spec_steps"
# A window logged in a form older than any per-batch-size schedule of the engine's (vLLM V0's
# ``Speculative metrics:``, 0.8's lines without a mean acceptance length), in ``extra``.
OLD_SPEC_FORM = "old_spec_form"


def drafting_off(record: StatsRecord) -> bool:
    """Adaptive speculation had drafting off (steps 0) for this window: every round was a
    plain decode step, so its accept length of 1.00 says nothing about the drafter."""
    return record.extra.get(SPEC_STEPS) == 0


def drafting_off_count(records: Sequence[StatsRecord]) -> int:
    """How many of ``records`` :func:`drafting_off` holds for; a batch's records seldom carry
    any ``extra``, and those without are passed over at C speed."""
    return sum(map(drafting_off, [record for record in records if record.extra]))


def with_steps(
    records: Sequence[StatsRecord],
    steps: int | None,
    adaptive: bool | None,
    schedule: tuple[tuple[int, int, int], ...] | None = None,
    most: int | None = None,
) -> Sequence[StatsRecord]:
    """``records`` with each decode window stamped with the draft steps in force; as they are
    when speculation is not adaptive. A schedule by batch size (vLLM's dynamic speculation)
    gives each window the steps of its running requests, at ``most`` the configured count.
    Before any adaptive line told the steps, a window of exactly one token a round (1.00) is
    taken for drafting off: adaptive turns a drafter that accepts nothing off within a few
    batches."""
    if steps is None and not adaptive:
        return records
    stamped = []
    for record in records:
        now = steps
        if schedule is not None and record.running_requests is not None:
            now = scheduled_steps(schedule, record.running_requests, most)
        elif now is None and record.accept_length is not None and record.accept_length <= 1.0:
            now = 0
        if record.kind == "decode" and now is not None:
            record = record._replace(extra={**record.extra, SPEC_STEPS: now})
        stamped.append(record)
    return stamped


def scheduled_steps(
    schedule: tuple[tuple[int, int, int], ...], batch: int, most: int | None
) -> int:
    """The speculative tokens vLLM drafts at ``batch`` requests: its range's count, in a gap
    the previous range's, past the last the last's, before the first none; never more than
    the configured count (vLLM's own lookup)."""
    steps = 0
    for first, _, count in schedule:
        if batch < first:
            break
        steps = count
    return steps if most is None else min(steps, most)


# StatsRecord._make without its Python frame or length check, callable from C (``map``): for
# rows that hold every field in order by construction (the chunk reader's, the range reader's).
record_from_row = partial(tuple.__new__, StatsRecord)


def logged_seconds(time: str | None) -> float | None:
    """Seconds of a logged local time, read as UTC whatever the zone it was logged in.

    Only differences between a log's own times are used, and UTC has no daylight-saving jump
    to fake an hour of silence (or a negative one) in them. A time in the parsers' own form
    (``2026-02-23T00:14:33``) is its minute's seconds, read once a minute, plus its second: a
    report reads the time of every logged second, and ``fromisoformat`` costs several times
    that.
    """
    if not time:
        return None
    whole = _WHOLE_SECOND.fullmatch(time)
    if whole is None:
        return _iso_seconds(time)
    minute = _minute_seconds(whole[1])  # None for no date (a 30th of February): nor is the time
    return None if minute is None else minute + int(whole[2])


# A text this matches is a time if and only if its minute is, and reads as the minute's
# seconds plus its own.
_WHOLE_SECOND = re.compile(r"(\d{4}-\d\d-\d\dT(?:[01]\d|2[0-3]):[0-5]\d):([0-5]\d)", re.ASCII)


@lru_cache(maxsize=64)
def _minute_seconds(minute: str) -> float | None:
    return _iso_seconds(minute)


def _iso_seconds(time: str) -> float | None:
    try:
        return datetime.fromisoformat(time).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


class RequestRecord(NamedTuple):
    """One finished request's speculation figures, where an engine logs them (SGLang's
    ``--log-requests``). Never its text, ids or prompt: only numbers, and the few logged header
    values that look like labels, from which the state keeps the one it is configured to use.

    ``accept_length`` is None for a finished request without figures (no speculation, no
    verify round). ``clipped``: the line was over the line cap and only its head and tail
    were read.
    """

    time: str | None
    accept_length: float | None
    accept_rate: float | None
    verify_rounds: int | None
    completion_tokens: int | None
    clipped: bool = False
    headers: tuple[tuple[str, str], ...] = ()


class Unrecognized:
    """Marker for a line that looks like a stats line but yields no usable record.

    Counted as format drift (``specwatch_log_unrecognized_stats_lines_total``) instead of
    vanishing silently.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unrecognized({self.reason!r})"


@dataclass(slots=True, frozen=True)
class LogLine:
    """One engine-formatted line that is not a stats line: its prefix read (``time`` is ISO 8601
    as logged, no zone; ranks where the engine names them), the message after it, and the
    engine that wrote it, whose event reader finds start-up events in the message."""

    time: str | None
    dp_rank: int | None
    tp_rank: int | None
    message: str
    engine: str
    pp_rank: int | None = None


@dataclass(frozen=True, slots=True)
class UpstreamValues:
    """An engine's ``/metrics`` at one scrape, normalised; ``None`` where it has no such value."""

    accept_length: float | None = None
    running_requests: float | None = None
    queued_requests: float | None = None
    gen_throughput: float | None = None
    token_usage: float | None = None
    cuda_graph_share: float | None = None  # decode passes with CUDA graph since the last scrape
    engine: str | None = None  # the engine whose metric names the exposition used
    served_model: str | None = None  # the model_name label of the engine's series
    # From counters over the scrape window, where the engine has them (vLLM).
    accept_rate: float | None = None
    accept_rate_by_position: tuple[float, ...] | None = None
    # Which of the engine's counters disagreed over the window (each in range, together
    # impossible): its accept length or ratio is then None.
    disagreement: str | None = None
    # The accept length is the engine's own gauge of its newest window (SGLang's last logged
    # window, TensorRT-LLM's last iteration), not its counters over the scrape window: on a
    # first scrape, or where no counted round finished in the window though the node decoded.
    accept_length_gauge: bool = False
    # Each busy DP rank's accept-length gauge (its ``dp_rank`` label, "" without one), as
    # the engine holds it: unrounded, where its log line prints two decimals (SGLang).
    accept_length_by_rank: tuple[tuple[str, float], ...] = ()
    # The engine's own speculation counters, summed over its ranks, exported as they are.
    drafts_total: float | None = None
    draft_tokens_total: float | None = None
    accepted_tokens_total: float | None = None
    # Draft tokens accepted at each position (0 = first), summed over ranks, as counted.
    accepted_by_position: tuple[float, ...] | None = None
    # What the exposition says of the server's speculation (TensorRT-LLM's config info).
    config: ServerConfig | None = None
