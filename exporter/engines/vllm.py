"""vLLM's periodic stats lines: the engine line and the speculative-decoding line, every era.

vLLM writes two lines per logging interval from the API-server process: the engine line
(``Engine 000: Avg prompt throughput: ..., Running: N reqs, Waiting: N reqs, ...``) and, right
after it when drafts were made, the ``SpecDecoding metrics:`` line. One decode window needs
both, so :class:`VllmParser` holds the engine line until its spec line arrives (or the next
engine line shows none is coming) and yields one :class:`StatsRecord` per interval.

The spec line changed field order between releases and its per-position list uses the same
``", "`` separator as the fields, so every field is found by its own name, never by position.
A line is a stats line only when the message starts right after vLLM's own prefix
(``[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file:line] ``): a request log echoing a prompt never
becomes a record.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from exporter.engines import ending
from exporter.engines.record import DraftCounts, LogLine, StatsRecord, Unrecognized

NAME = "vllm"
STATS_MARKERS: tuple[bytes, ...] = (b"Avg generation throughput", b"SpecDecoding metrics:")
# The engine's configuration, logged once per start ("Initializing a V1 LLM engine ...").
EVENT_MARKERS: tuple[bytes, ...] = (b"speculative_config=",)
ENGINE_CONFIG = "Initializing a V1 LLM engine"
# Longest per-position list kept: vLLM's k is single-digit in practice; more is hostile input.
MAX_POSITIONS = 32
# An engine line held longer than this (in logged time) before the next one is not shown: the
# server went idle (vLLM then logs at DEBUG) and an old interval must not pass for a new one.
MAX_PENDING_SECONDS = 60.0
# vLLM logs the spec line right after the engine line, in the same second or the next.
PAIR_SECONDS = 2.0

# Optional process tag (ANSI already stripped), level, ``MM-DD HH:MM:SS``, then the file info
# with (V1) or without (V0) its opening bracket.
_PREFIX = re.compile(
    r"(?:\([^()\s]+ pid=\d+\) )?[A-Z]+ (\d\d)-(\d\d) (\d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[?[\w./-]+:\d+\] "
)
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
        self._pending: _EngineLine | None = None
        self._now = now

    def feed(self, text: str) -> list[StatsRecord | Unrecognized | LogLine]:
        """Records (and drift) completed by one cleaned line, or the engine's startup line as
        an event; empty for any other line."""
        match = _PREFIX.match(text)
        if match is None:  # a traceback's own lines carry no prefix
            return [LogLine(None, None, None, text, NAME)] if ending.parse(text) else []
        message = text[match.end() :]
        time = self._iso(*match.groups())
        if time is None:
            return []
        if ending.opens(message):
            return [LogLine(time, None, None, message, NAME)]
        if message.startswith("SpecDecoding metrics: "):
            return [*self._spec(time, message[len("SpecDecoding metrics: ") :])]
        if message.startswith(ENGINE_CONFIG):
            return [LogLine(time, None, None, message, NAME)]
        head = _ENGINE_HEAD.match(message)
        if head is None:
            return []
        line = _engine_line(time, head, message[head.end() - len("Avg prompt ") :])
        if isinstance(line, Unrecognized):
            return [line]
        held = self._take_pending(_seconds(time))
        self._pending = line
        return [*held]

    def flush(self) -> list[StatsRecord | Unrecognized]:
        """The held engine line as a window of its own (the source has ended)."""
        held, self._pending = self._pending, None
        return [] if held is None else [_record(held)]

    def _take_pending(self, now_seconds: float) -> list[StatsRecord | Unrecognized]:
        """The previous engine line, which no spec line followed (no drafts that interval)."""
        held, self._pending = self._pending, None
        if held is None or now_seconds - held.seconds > MAX_PENDING_SECONDS:
            return []
        return [_record(held)]

    def _spec(self, time: str, body: str) -> list[StatsRecord | Unrecognized]:
        """The spec line completes the engine line logged with it into one window."""
        spec = _spec_values(body)
        if isinstance(spec, Unrecognized):
            return [spec]
        seconds = _seconds(time)
        if self._pending is not None and abs(seconds - self._pending.seconds) <= PAIR_SECONDS:
            record = _record(self._pending)
            self._pending = None
            return [_with_spec(record, spec)]
        alone = _with_spec(StatsRecord("decode", time, NAME), spec)
        return [*self._take_pending(seconds), alone]

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


_SPEC_CONFIG = re.compile(
    r"speculative_config=SpeculativeConfig\(method='([\w.-]{1,64})', "
    r"model='([^'\s]{0,512})', num_spec_tokens=(\d{1,3})\)"
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
        message.startswith(("SpecDecoding metrics: ", ENGINE_CONFIG))
        or _ENGINE_HEAD.match(message) is not None
    )


def engine_config_args(message: str) -> dict[str, object] | None:
    """The engine's speculative setup as SGLang's argument names, for the shared config.

    vLLM drafts ``num_spec_tokens`` in a chain: SGLang's ``num_steps`` with top-k 1, and
    ``num_draft_tokens`` counting the verified positions, one more. ``enforce_eager`` is
    SGLang's ``disable_cuda_graph``. None for a line that is not vLLM's engine configuration.
    """
    if not message.startswith(ENGINE_CONFIG):
        return None
    args: dict[str, object] = {}
    eager = _EAGER.search(message)
    if eager is not None:
        args["disable_cuda_graph"] = eager.group(1) == "True"
    served = _SERVED_MODEL.search(message)
    if served is not None:
        args["served_model_name"] = served.group(1)
    spec = _SPEC_CONFIG.search(message)
    if spec is not None:
        method, model, tokens = spec.group(1), spec.group(2), int(spec.group(3))
        args.update(
            speculative_algorithm=algorithm(method),
            speculative_draft_model_path=model or None,
            speculative_num_steps=tokens,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=tokens + 1,
        )
    return args


def algorithm(method: str) -> str:
    """vLLM's method as specwatch names it: every model's MTP (``deepseek_mtp``,
    ``qwen3_next_mtp``, plain ``mtp``) is MTP; the rest upper-cased (``eagle3`` is EAGLE3)."""
    lowered = method.lower()
    return "MTP" if lowered == "mtp" or lowered.endswith("_mtp") else method.upper()


def _engine_line(time: str, head: re.Match[str], body: str) -> _EngineLine | Unrecognized:
    """The engine line's values by field name; unknown fields are ignored."""
    values: dict[str, float] = {}
    try:
        for piece in body.rstrip(" .").split(", "):
            name, _, raw = piece.partition(": ")
            key = _ENGINE_FIELDS.get(name)
            if key is not None and raw:
                values[key] = _number(raw)
    except ValueError:
        return Unrecognized("bad_value")
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
    """``12.5 tokens/s``, ``3 reqs``, ``31.6%`` -> the number; garbage raises ValueError."""
    value = float(raw.split(" ", 1)[0].rstrip("%"))
    if not math.isfinite(value):
        raise ValueError(raw)
    return value


def _record(line: _EngineLine) -> StatsRecord:
    return StatsRecord(
        "decode",
        line.time,
        NAME,
        line.dp_rank,
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


def _with_spec(record: StatsRecord, spec: _Spec) -> StatsRecord:
    return record._replace(
        accept_length=spec.accept_length,
        accept_rate=spec.accept_rate,
        draft_counts=spec.counts,
    )


def _spec_values(body: str) -> _Spec | Unrecognized:
    """Record fields from a spec line body, found field by field (the order changed)."""
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
    length = _finite(raw.get("accept_length"))
    if length is None and accepted == 0 and drafted > 0:
        length = 1.0  # nothing accepted: every round yielded the target's own token only
    rate = accepted / drafted if drafted else None  # vLLM's own rate is nan then
    counts = DraftCounts(drafted, accepted, _drafts(drafted, positions), positions)
    return _Spec(length, rate, counts)


def _positions(raw: str | None) -> tuple[float, ...] | None:
    if raw is None:
        return None
    values = tuple(float(value) for value in raw.split(", "))
    return None if any(math.isnan(value) for value in values) else values


def _drafts(drafted: int, positions: tuple[float, ...] | None) -> int | None:
    """Draft rounds: every round proposes k tokens, k being the per-position list's length."""
    if not positions:
        return None
    return round(drafted / len(positions))


def _finite(raw: str | None) -> float | None:
    if raw is None:
        return None
    value = float(raw)
    return value if math.isfinite(value) else None
