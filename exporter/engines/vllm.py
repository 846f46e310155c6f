"""vLLM's periodic stats lines: the engine line and the speculative-decoding line, every era.

vLLM writes two lines per logging interval from the API-server process: the engine line
(``Engine 000: Avg prompt throughput: ..., Running: N reqs, Waiting: N reqs, ...``) and, right
after it when drafts were made, the ``SpecDecoding metrics:`` line. One decode window needs
both, so :class:`VllmParser` holds the engine line until its spec line arrives (or the next
engine line shows none is coming) and yields one :class:`StatsRecord` per interval. The spec
line names no engine: a data-parallel launch with an API server per rank writes each rank's
pair from its own process into one log, and the pairs interleave, so a spec line completes
the engine line of its own process (its ``(APIServer_DP1 pid=N)`` tag).

The spec line changed field order between releases and its per-position list uses the same
``", "`` separator as the fields, so every field is found by its own name, never by position.
A line is a stats line only when the message starts right after vLLM's own prefix
(``[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file:line] ``): a request log echoing a prompt never
becomes a record.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from exporter.engines import ending
from exporter.engines.record import (
    OLD_SPEC_FORM,
    DraftCounts,
    LogLine,
    StatsRecord,
    Unrecognized,
)
from exporter.engines.server_config import ServerConfig

NAME = "vllm"
STATS_MARKERS: tuple[bytes, ...] = (
    b"Avg generation throughput",
    b"SpecDecoding metrics:",
    b"Speculative metrics:",
)
# The engine's configuration, logged once per start: V1's "Initializing a V1 LLM engine (v...)
# with config: ...", 0.8's V0 "Initializing a V0 LLM engine", older V0 "Initializing an LLM
# engine".
EVENT_MARKERS: tuple[bytes, ...] = (b"speculative_config=", b"non-default args: ")
# Each API server's warning, at start, that it logs no stats: more than one API server
# (``--api-server-count``, or its default of one per DP rank) hand an engine's stats to one
# server a step, so none of them has the whole (``v1/metrics/loggers.py``).
STATS_OFF = "AsyncLLM created with api_server_count more than 1; disabling stats logging"
NOTICE_MARKERS: tuple[bytes, ...] = (STATS_OFF.encode(),)
# The API server's arguments, logged before the engine starts (dynamic speculation's schedule).
NON_DEFAULT_ARGS = "non-default args: "
_SCHEDULE = re.compile(r"'num_speculative_tokens_per_batch_size': (\[[\d\[\], ()]{0,2000}\])")
# Ranges a schedule may hold; more is hostile input, not a schedule.
MAX_SCHEDULE_RANGES = 64
ENGINE_CONFIG = (
    "Initializing a V1 LLM engine",
    "Initializing a V0 LLM engine",
    "Initializing an LLM engine",
)
# The spec line of each era, by its head: V1's since 0.8.3, and V0's (and 0.8.2's) before.
SPEC_HEAD = "SpecDecoding metrics: "
OLD_SPEC_HEAD = "Speculative metrics: "
# Longest per-position list kept: vLLM's k is single-digit in practice; more is hostile input.
MAX_POSITIONS = 32
# vLLM logs the spec line right after the engine line, in the same second or the next.
PAIR_SECONDS = 2.0

# Optional process tag (ANSI already stripped), level, ``MM-DD HH:MM:SS``, then the file info
# with (V1) or without (V0) its opening bracket.
_PREFIX = re.compile(
    r"(\([^()\s]+ pid=\d+\) )?[A-Z]+ (\d\d)-(\d\d) (\d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[?[\w./-]+:\d+\] "
)
# Processes with an engine line waiting for its spec line at once: one per API server of a
# data-parallel launch; more is hostile input, and the oldest is let go as a window alone.
MAX_PENDING = 64
_ENGINE_HEAD = re.compile(r"(?:Engine (\d{1,4}): |\d{1,4} Engines Aggregated: )?Avg prompt ")
_NUMBER = r"(\d+(?:\.\d+)?|nan)"
_SPEC_FIELDS: dict[str, re.Pattern[str]] = {
    "accept_length": re.compile(r"Mean acceptance length: " + _NUMBER),
    "rate": re.compile(r"Draft acceptance rate: " + _NUMBER + "%"),
    "accepted": re.compile(r"Accepted: (\d+) tokens"),
    "drafted": re.compile(r"Drafted: (\d+) tokens"),
    "per_position": re.compile(
        r"Per-position acceptance rate: ((?:\d+(?:\.\d+)?|nan)(?:, (?:\d+(?:\.\d+)?|nan))*)"
    ),
}


# Each field's name as it appears in the line, to tell a missing field from an unreadable one.
_SPEC_LABELS = {
    key: pattern.pattern.split(":", 1)[0] + ":" for key, pattern in _SPEC_FIELDS.items()
}


@dataclass(frozen=True, slots=True)
class _EngineLine:
    time: str
    seconds: float
    dp_rank: int | None
    running: int | None
    waiting: int | None
    kv_usage: float | None
    gen_throughput: float | None
    extra: dict[str, float]


class VllmParser:
    """Turns one source's cleaned lines into decode records, pairing engine and spec lines.

    One instance per log source, because the pairing is state; :meth:`flush` hands over a held
    engine line when the source ends (one-shot readers).
    """

    def __init__(self, now: datetime | None = None) -> None:
        # Process tag ("" for none) -> its engine line waiting for a spec line, oldest first.
        self._pending: dict[str, _EngineLine] = {}
        self._now = now
        self._k: int | None = None  # speculative tokens a round, from the engine's config
        self._totals: _Totals | None = None  # V0's previous lifetime totals
        # The prefix of the record that opened a server's end: vLLM's formatter repeats it on
        # each line of its traceback, whose last line names the cause.
        self._ending_prefix: str | None = None

    def feed(self, text: str) -> list[StatsRecord | Unrecognized | LogLine]:
        """Records (and drift) completed by one cleaned line, or the engine's startup line as
        an event; empty for any other line."""
        match = _PREFIX.match(text)
        if match is None:  # a traceback's own lines carry no prefix
            return [LogLine(None, None, None, text, NAME)] if ending.parse(text) else []
        message = text[match.end() :]
        tag, *stamp = match.groups()
        time = self._iso(*stamp)
        if time is None:
            return []
        prefix, self._ending_prefix = self._ending_prefix, None
        if ending.opens(message):
            self._ending_prefix = text[: match.end()]
            return [LogLine(time, None, None, message, NAME)]
        if prefix == text[: match.end()]:  # a line of that record's traceback
            self._ending_prefix = prefix
            return [LogLine(time, None, None, message, NAME)] if ending.parse(message) else []
        process = tag or ""
        if message.startswith(SPEC_HEAD):
            body = message[len(SPEC_HEAD) :]
            return [*self._spec(process, time, _spec_values(body, self._k))]
        if message.startswith(OLD_SPEC_HEAD):
            return [*self._spec(process, time, self._old_spec(message[len(OLD_SPEC_HEAD) :]))]
        if message.startswith((NON_DEFAULT_ARGS, STATS_OFF)):
            return [LogLine(time, None, None, message, NAME)]
        if message.startswith(ENGINE_CONFIG):
            spec = _SPEC_CONFIG.search(message)
            self._k = None if spec is None else int(spec.group("tokens")) or None
            self._totals = None  # V0's lifetime totals start again with the engine
            return [LogLine(time, None, None, message, NAME)]
        head = _ENGINE_HEAD.match(message)
        if head is None:
            return []
        line = _engine_line(time, head, message[head.end() - len("Avg prompt ") :])
        if isinstance(line, Unrecognized):
            return [line]
        held = self._take_pending(process)
        if len(self._pending) >= MAX_PENDING:
            held.extend(self._take_pending(next(iter(self._pending))))
        self._pending[process] = line
        return [*held]

    def flush(self) -> list[StatsRecord | Unrecognized]:
        """The held engine lines as windows of their own (the source has ended)."""
        held, self._pending = self._pending, {}
        return [_record(line) for line in held.values()]

    def _take_pending(self, process: str) -> list[StatsRecord | Unrecognized]:
        """The previous engine line of ``process``, which no spec line followed (no drafts
        that interval): a window of its own however long ago, as vLLM logged it when busy."""
        held = self._pending.pop(process, None)
        return [] if held is None else [_record(held)]

    def _old_spec(self, body: str) -> _Spec | Unrecognized | None:
        """``Speculative metrics:``: V0's lifetime totals, turned into this interval's counts
        by the difference from the previous line (none for the first: totals since an
        unknown start are no window); 0.8.2's per-interval counts as they are."""
        values = _old_spec_values(body)
        if isinstance(values, Unrecognized) or values.k is None:
            return values if isinstance(values, Unrecognized) else values.spec(self._k)
        previous, self._totals = self._totals, values
        if previous is None:
            return None
        if values.drafted < previous.drafted or values.accepted < previous.accepted:
            return values.spec(values.k)  # the counters restarted with the engine
        return values.minus(previous).spec(values.k)

    def _spec(
        self, process: str, time: str, spec: _Spec | Unrecognized | None
    ) -> list[StatsRecord | Unrecognized]:
        """The spec line completes the engine line its process logged with it into one
        window."""
        if spec is None:
            return []
        if isinstance(spec, Unrecognized):
            return [spec]
        pending = self._pending.get(process)
        if pending is not None and abs(_seconds(time) - pending.seconds) <= PAIR_SECONDS:
            del self._pending[process]
            return [_with_spec(_record(pending), spec)]
        alone = _with_spec(StatsRecord("decode", time, NAME), spec)
        return [*self._take_pending(process), alone]

    def _iso(self, month: str, day: str, clock: str) -> str | None:
        """ISO time of a stamp without a year: the latest year that puts it in the past (a
        day of clock skew allowed); None for a date no calendar has."""
        now = self._now or datetime.now(timezone.utc)
        for year in range(now.year, now.year - 5, -1):
            try:
                moment = datetime.fromisoformat(f"{year:04d}-{month}-{day}T{clock}")
            except ValueError:
                continue  # 29 February outside a leap year, or no such date at all
            if moment.replace(tzinfo=timezone.utc) <= now + timedelta(days=1):
                return moment.isoformat()
        return None


# ``SpeculativeConfig(method='eagle', model='...', num_spec_tokens=3)`` since 0.8 (``model=None``
# for n-grams); V0's ``SpeculativeConfig(draft_model='...', num_spec_tokens=5)`` before, where a
# draft model of ``[ngram]`` means n-gram lookup.
_SPEC_CONFIG = re.compile(
    r"speculative_config=SpeculativeConfig\((?:method='(?P<method>[\w.-]{1,64})', "
    r"model=(?:'(?P<model>[^'\s]{0,512})'|None)|draft_model='(?P<draft>[^'\s]{0,512})'), "
    r"num_spec_tokens=(?P<tokens>\d{1,3})\)"
)
_EAGER = re.compile(r"\benforce_eager=(True|False)\b")
_SERVED_MODEL = re.compile(r"\bserved_model_name=([^,\s]{1,512})(?:,|$)")


def is_own_line(text: str) -> bool:
    """Whether vLLM itself wrote this cleaned line as a stats or engine-configuration line.

    Engine detection asks this instead of looking for a marker anywhere: another engine's
    request log may echo a prompt that quotes vLLM's text, and must not switch the source.
    """
    match = _PREFIX.match(text)
    if match is None:
        return False
    message = text[match.end() :]
    return (
        message.startswith((SPEC_HEAD, OLD_SPEC_HEAD, NON_DEFAULT_ARGS, *ENGINE_CONFIG))
        or _ENGINE_HEAD.match(message) is not None
    )


def starts_engine(text: str) -> bool:
    """Whether vLLM itself wrote this cleaned line as a server's start: the API server's
    arguments (logged before its engine starts, with the speculation schedule) or an engine's
    configuration."""
    match = _PREFIX.match(text)
    return match is not None and text.startswith((NON_DEFAULT_ARGS, *ENGINE_CONFIG), match.end())


def engine_config(message: str) -> ServerConfig | None:
    """The engine's speculative setup as specwatch's ``ServerConfig``; None for a line that is
    not vLLM's engine configuration.

    vLLM drafts ``num_spec_tokens`` in a chain: that many draft steps with top-k 1, and one
    more verified position a round. ``enforce_eager`` turns its CUDA graphs off.
    """
    if not message.startswith(ENGINE_CONFIG):
        return None
    config = ServerConfig(engine=NAME)
    eager = _EAGER.search(message)
    if eager is not None:
        config = replace(config, disable_cuda_graph=eager.group(1) == "True")
    served = _SERVED_MODEL.search(message)
    if served is not None:
        config = replace(config, served_model=served.group(1))
    spec = _SPEC_CONFIG.search(message)
    if spec is not None:
        method, model, tokens = spec["method"], spec["model"], int(spec["tokens"])
        if method is None:  # V0 names the draft model only
            method = "ngram" if spec["draft"] == "[ngram]" else "draft_model"
            model = None if spec["draft"] == "[ngram]" else spec["draft"]
        config = replace(
            config,
            algorithm=algorithm(method),
            draft_model_path=model or None,
            num_steps=tokens,
            eagle_topk=1,
            num_draft_tokens=tokens + 1,
        )
    return config


def algorithm(method: str) -> str:
    """vLLM's method as specwatch names it: every model's MTP (``deepseek_mtp``,
    ``qwen3_next_mtp``, plain ``mtp``) is MTP; the rest upper-cased (``eagle3`` is EAGLE3)."""
    lowered = method.lower()
    return "MTP" if lowered == "mtp" or lowered.endswith("_mtp") else method.upper()


def _engine_line(time: str, head: re.Match[str], body: str) -> _EngineLine | Unrecognized:
    """The engine line's values by field name; unknown fields are ignored."""
    values: dict[str, float] = {}
    devices: dict[str, float] = {}  # KV cache usage by device: GPU, or CPU, XPU, TPU alone
    try:
        for piece in body.rstrip(" .").split(", "):
            name, _, raw = piece.partition(": ")
            key = _ENGINE_FIELDS.get(name)
            if key is not None and raw:
                values[key] = _number(raw)
            elif name.endswith(" KV cache usage") and raw:
                devices[name.split(" ", 1)[0]] = _number(raw)
    except ValueError:
        return Unrecognized("bad_value")
    # V0 logs "GPU ..., CPU KV cache usage" (the CPU swap space); V1 names the device it runs on.
    if "kv_usage" not in values and len(devices) == 1:
        values["kv_usage"] = devices.popitem()[1]
    if "gen_throughput" not in values:
        return Unrecognized("no_fields")
    engine = head.group(1)
    running = values.pop("running", None)
    waiting = values.pop("waiting", None)
    kv = values.pop("kv_usage", None)
    for key in ("prefix_cache_hit_rate",):
        if key in values:
            values[key] /= 100  # every ratio specwatch keeps is 0..1
    return _EngineLine(
        time=time,
        seconds=_seconds(time),
        dp_rank=None if engine is None else int(engine),
        running=None if running is None else int(running),
        waiting=None if waiting is None else int(waiting),
        kv_usage=None if kv is None else kv / 100,
        gen_throughput=values.pop("gen_throughput"),
        extra=values,
    )


# vLLM field name -> record or extra key. V0 called the queue "Pending"; both name the same.
_ENGINE_FIELDS = {
    "Avg prompt throughput": "prompt_throughput",
    "Avg generation throughput": "gen_throughput",
    "Running": "running",
    "Waiting": "waiting",
    "Pending": "waiting",
    "GPU KV cache usage": "kv_usage",
    "Prefix cache hit rate": "prefix_cache_hit_rate",
    "Preemptions": "preemptions",
}


def _seconds(time: str) -> float:
    """Seconds of an ISO time the parser built itself (so always valid), read as UTC."""
    return datetime.fromisoformat(time).replace(tzinfo=timezone.utc).timestamp()


def _number(raw: str) -> float:
    """``12.5 tokens/s``, ``3 reqs``, ``31.6%`` -> the number; garbage raises ValueError, as
    does a negative number: no field of the line (a throughput, a count, a usage) can be one."""
    value = float(raw.split(" ", 1)[0].rstrip("%"))
    if not math.isfinite(value) or value < 0:
        raise ValueError(raw)
    return value


def _record(line: _EngineLine) -> StatsRecord:
    return StatsRecord(
        "decode",
        line.time,
        NAME,
        line.dp_rank,
        None,
        None,
        line.running,
        line.waiting,
        line.kv_usage,
        gen_throughput=line.gen_throughput,
        extra=dict(line.extra),
    )


@dataclass(frozen=True, slots=True)
class _Spec:
    accept_length: float | None
    accept_rate: float | None
    counts: DraftCounts
    # Logged in a form from before vLLM scheduled draft tokens by batch size: V0's, 0.8.3 and
    # 0.8.4's without a mean, 0.8.5's mean without the bonus token.
    old: bool


def _with_spec(record: StatsRecord, spec: _Spec) -> StatsRecord:
    return record._replace(
        accept_length=spec.accept_length,
        accept_rate=spec.accept_rate,
        draft_counts=spec.counts,
        extra={**record.extra, OLD_SPEC_FORM: 1} if spec.old else record.extra,
    )


def _spec_values(body: str, k: int | None = None) -> _Spec | Unrecognized:
    """Record fields from a ``SpecDecoding metrics:`` body, found field by field (the order
    changed); ``k``, the configured speculative tokens, for the lines that log no rounds."""
    found = {key: pattern.search(body) for key, pattern in _SPEC_FIELDS.items()}
    raw = {key: match.group(1) for key, match in found.items() if match is not None}
    if any(key not in raw and label in body for key, label in _SPEC_LABELS.items()):
        return Unrecognized("bad_value")  # a field named but unreadable: drift, not a guess
    if "accepted" not in raw or "drafted" not in raw:
        return Unrecognized("no_fields")
    accepted, drafted = int(raw["accepted"]), int(raw["drafted"])
    if accepted > drafted:
        return Unrecognized("bad_value")
    positions = _positions(raw.get("per_position"))
    if positions is not None and len(positions) > MAX_POSITIONS:
        return Unrecognized("bad_value")
    logged = _finite(raw.get("accept_length"))
    drafts = _drafts(accepted, drafted, positions, k, logged)
    length = _accept_length(logged, accepted, drafts, positions)
    rate = accepted / drafted if drafted else None  # vLLM's own rate is nan then
    # 0.8.3 and 0.8.4 log no mean; 0.8.5 one without the bonus token.
    old = logged is None or _without_bonus(logged, positions)
    return _Spec(length, rate, DraftCounts(drafted, accepted, drafts, positions), old)


def _positions(raw: str | None) -> tuple[float, ...] | None:
    if raw is None:
        return None
    values = tuple(float(value) for value in raw.split(", "))
    return None if any(math.isnan(value) for value in values) else values


def _drafts(
    accepted: int,
    drafted: int,
    positions: tuple[float, ...] | None,
    k: int | None,
    logged: float | None = None,
) -> int | None:
    """Draft rounds, which vLLM counts but logs only through what it derives from them.

    Every round proposes 1 to ``k`` tokens, so there were drafted / k to drafted rounds. Of
    those counts, the true one is the count ``n`` that prints as vLLM printed: its mean
    acceptance length ``1 + accepted / n`` to two decimals, each per-position rate
    ``count_i / n`` to three, with whole ``count_i`` that sum to ``accepted`` (each accepted
    token is counted at its position once) and never grow with the position. n-gram and
    suffix drafts are often shorter than ``k``, so drafted / k alone is wrong for them.
    Where several counts fit, the one nearest to what the numbers say; with nothing accepted
    they say nothing, and the fewest rounds stand (drafted / k).
    """
    width = len(positions) if positions else k
    fewest = -(-drafted // width) if width else None
    if not accepted:
        return fewest
    low, high = max(fewest or 1, 1), max(drafted, 1)
    bonus = None if logged is None or _without_bonus(logged, positions) else logged
    if bonus is not None and bonus - 1 > 0.005:
        low = max(low, math.ceil(accepted / (bonus - 1 + 0.005 + 1e-9)))
        high = min(high, math.floor(accepted / (bonus - 1 - 0.005 - 1e-9)))
    share = sum(positions) if positions else 0.0
    guess = (
        accepted / share if share > 0 else accepted / (bonus - 1) if bonus and bonus > 1 else None
    )
    if guess is None or high < low:
        return fewest if guess is None else max(fewest or 1, round(guess))
    fit = _nearest_fit(guess, low, high, accepted, positions, bonus)
    return max(fewest or 1, round(guess)) if fit is None else fit


# Round counts tried, nearest to the estimate first; past these the estimate stands. Where the
# numbers are loose (a rate of 0.001 is 0.0005 to 0.0015) counts that fit lie all around the
# estimate; where they are tight the estimate is within a few rounds of the count. A line
# that no count nearby prints as (drift, or a hostile line) costs at most this many tries.
_MAX_CANDIDATES = 2048


def _nearest_fit(
    guess: float,
    low: int,
    high: int,
    accepted: int,
    positions: tuple[float, ...] | None,
    mean: float | None,
) -> int | None:
    """The round count in ``low..high`` nearest to ``guess`` (the lower of two as near) that
    prints as vLLM printed the line, or None when none of the nearest tried does."""
    for rounds in _outward(guess, low, high):
        if _prints_as(rounds, accepted, positions, mean):
            return rounds
    return None


def _outward(guess: float, low: int, high: int) -> Iterator[int]:
    """``low..high`` by distance from ``guess``, the lower first at equal distance; at most
    ``_MAX_CANDIDATES`` of them."""
    below = min(max(math.floor(guess), low - 1), high)
    above = below + 1
    for _ in range(_MAX_CANDIDATES):
        down = below >= low
        up = above <= high
        if not down and not up:
            return
        if down and (not up or guess - below <= above - guess):
            yield below
            below -= 1
        else:
            yield above
            above += 1


def _prints_as(
    rounds: int, accepted: int, positions: tuple[float, ...] | None, mean: float | None
) -> bool:
    """Whether ``rounds`` rounds print the line as vLLM printed it: the mean (``%.2f``) and
    each per-position rate (``{:.3f}``) of whole counts that sum to ``accepted`` and never
    grow with the position. Formatted as vLLM formats, so a count on a rounding boundary is
    told right."""
    if mean is not None and f"{1 + accepted / rounds:.2f}" != f"{mean:.2f}":
        return False
    if not positions:
        return True
    least = most = 0
    ceiling = rounds
    for rate in positions:
        counts = _counts_printing(rate, rounds, ceiling)
        if counts is None:
            return False
        least += counts[0]
        most += counts[1]
        ceiling = counts[1]
    return least <= accepted <= most


def _counts_printing(rate: float, rounds: int, ceiling: int) -> tuple[int, int] | None:
    """The fewest and most whole counts, at most ``ceiling``, whose share of ``rounds``
    prints as ``rate`` does (``{:.3f}``), or None. The shares that print alike are one
    interval holding ``rate``, so the counts are too: the count nearest to ``rate`` on either
    side is in it if any is, and its ends are within a count of where arithmetic puts them
    (formatting decides each one, a few calls whatever the number of rounds)."""
    printed = f"{rate:.3f}"

    def prints(count: int) -> bool:
        return f"{count / rounds:.3f}" == printed

    exact = rate * rounds
    anchor = next(
        (
            c
            for c in (min(math.floor(exact), ceiling), math.ceil(exact))
            if 0 <= c <= ceiling and prints(c)
        ),
        None,
    )
    if anchor is None:
        return None
    first = min(anchor, max(0, math.ceil((rate - 0.0005) * rounds)))
    while first > 0 and prints(first - 1):
        first -= 1
    while not prints(first):
        first += 1
    last = max(anchor, min(ceiling, math.floor((rate + 0.0005) * rounds)))
    while last < ceiling and prints(last + 1):
        last += 1
    while not prints(last):
        last -= 1
    return first, last


def _accept_length(
    logged: float | None, accepted: int, drafts: int | None, positions: tuple[float, ...] | None
) -> float | None:
    """The mean accept length, the bonus token included. Lines without a mean (0.8.3,
    0.8.4) give one from their counts and the rounds."""
    if logged is not None:
        return logged + 1 if _without_bonus(logged, positions) else logged
    if drafts:
        return 1 + accepted / drafts
    return 1.0 if accepted == 0 else None  # nothing accepted: the target's own token only


def _without_bonus(logged: float, positions: tuple[float, ...] | None) -> bool:
    """vLLM 0.8.5 logged accepted drafts per round without the bonus token (0.9 added it): the
    per-position rates sum to that, so a logged mean nearer their sum than one more is 0.8.5's."""
    share = sum(positions) if positions else None
    return share is not None and abs(logged - share) < abs(logged - 1 - share)


_OLD_FIELDS: dict[str, re.Pattern[str]] = {
    "k": re.compile(r"Number of speculative tokens: (\d+)"),
    "accepted": re.compile(r"Number of accepted tokens: (\d+)"),
    "drafted": re.compile(r"Number of draft tokens: (\d+)"),
}


@dataclass(frozen=True, slots=True)
class _Totals:
    """The counts of a ``Speculative metrics:`` line: V0's lifetime totals (with ``k``), or
    0.8.2's counts of one interval."""

    k: int | None
    accepted: int
    drafted: int

    def minus(self, earlier: _Totals) -> _Totals:
        return _Totals(self.k, self.accepted - earlier.accepted, self.drafted - earlier.drafted)

    def spec(self, k: int | None) -> _Spec | None:
        """The window these counts make; None for an interval without drafts."""
        if not self.drafted:
            return None
        drafts = self.drafted // k if k else None  # V0 proposes k tokens every round
        length = _accept_length(None, self.accepted, drafts, None)
        counts = DraftCounts(self.drafted, self.accepted, drafts, None)
        return _Spec(length, self.accepted / self.drafted, counts, old=True)


def _old_spec_values(body: str) -> _Totals | Unrecognized:
    raw = {key: pattern.search(body) for key, pattern in _OLD_FIELDS.items()}
    accepted, drafted, k = raw["accepted"], raw["drafted"], raw["k"]
    if accepted is None or drafted is None:
        return Unrecognized("no_fields")
    totals = _Totals(None if k is None else int(k[1]) or None, int(accepted[1]), int(drafted[1]))
    if totals.accepted > totals.drafted or (totals.k or 0) > MAX_POSITIONS:
        return Unrecognized("bad_value")
    return totals


def _finite(raw: str | None) -> float | None:
    if raw is None:
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def speculation_schedule(message: str) -> tuple[tuple[int, int, int], ...] | None:
    """``num_speculative_tokens_per_batch_size`` of a ``non-default args`` line, or None.

    Only that one list is evaluated (a literal of digits, brackets and commas, bounded), never
    the rest of a line that also carries the user's other arguments.
    """
    if not message.startswith(NON_DEFAULT_ARGS):
        return None
    found = _SCHEDULE.search(message)
    if found is None:
        return None
    try:
        value = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, list | tuple) or not 0 < len(value) <= MAX_SCHEDULE_RANGES:
        return None
    ranges = []
    for entry in value:
        if not (isinstance(entry, list | tuple) and len(entry) == 3):
            return None
        if not all(isinstance(n, int) and 0 <= n < 1 << 20 for n in entry):
            return None
        ranges.append((entry[0], entry[1], entry[2]))
    return tuple(sorted(ranges))
