"""What the watched server was configured to do, from whichever source tells it.

Three sources describe the same server: the ``server_args=ServerArgs(...)`` startup line and
``Load weight end`` lines in the log, SGLang's ``/server_info`` JSON, and the draft model's own
``config.json``. Findings need one merged view, and must work when any one of them is missing
(a server without a metrics endpoint; a sidecar started after the server: no startup lines).

Only non-secret, whitelisted fields are kept: the server's API key never enters this object.
"""

from __future__ import annotations

import errno
import hashlib
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from exporter.engines.events import (
    AdaptiveSteps,
    Event,
    MaxRunningReset,
    MemoryPlan,
    ServerArgsEvent,
    SpeculationSchedule,
    StatsLoggingOff,
    WeightsLoaded,
)
from exporter.redact import drop_secrets
from exporter.smallfile import FileRefused, read_small_file


class DraftConfigError(ValueError):
    """The draft config path names no readable draft ``config.json``; ``reason`` is one of
    ``DRAFT_CONFIG_REASONS``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


DRAFT_CONFIG_REASONS = (
    "absent",  # nothing at the path here (a hub id, or a volume this container lacks)
    "permission",
    "name_too_long",
    "bad_name",  # a NUL byte, or text no file name can hold (a lone surrogate)
    "not_regular",
    "too_large",
    "invalid",  # not a JSON object
    "io",  # any other error of the file system
)
# Linux's PATH_MAX; a longer path cannot name a file, and is not worth a system call.
MAX_PATH_CHARS = 4096
_SHOWN_PATH_CHARS = 200
_ERRNO_REASONS = {
    errno.ENOENT: "absent",
    errno.ENOTDIR: "absent",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.ENAMETOOLONG: "name_too_long",
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The speculative-decoding relevant configuration; ``None`` means "not known yet"."""

    engine: str | None = None  # the engine whose start line told this configuration
    algorithm: str | None = None
    draft_model_path: str | None = None
    served_model: str | None = None  # the name clients ask for (SGLang and vLLM served_model_name)
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    disable_cuda_graph: bool | None = None
    # SGLang 0.5.23's resolved decode backend (cuda_graph_config), which says graphs are off
    # where its disable_cuda_graph does not: what a finding quotes as seen.
    decode_graph_backend: str | None = None
    cuda_graph_max_bs: int | None = None
    log_level: str | None = None
    decode_log_interval: int | None = None
    max_running_requests: int | None = None
    # Whether the operator set that cap (--max-running-requests) or the engine chose it
    # (SGLang lowers it to 48 for EAGLE when unset): only a chosen cap is worth questioning.
    max_running_requests_set: bool | None = None
    enable_metrics: bool | None = None
    # SGLang's PD disaggregation: "prefill" servers decode nothing, "decode" servers do.
    disaggregation_mode: str | None = None
    # SGLang's pipeline stages (--pp-size): above 1 a stats line's running requests are one
    # micro-batch's, and its throughput the whole pipeline's.
    pipeline_stages: int | None = None
    target_architecture: str | None = None
    draft_architecture: str | None = None
    draft_has_eagle_config: bool | None = None
    draft_vocab_size: int | None = None
    # The draft's config.json on this machine: "read", or why not (``DRAFT_CONFIG_REASONS``).
    draft_config: str | None = None
    # Adaptive speculation: the draft steps in force now (0: drafting off), the candidates of
    # the first batch-size tier, and the EMA of accepted drafts per round when adaptive last
    # turned drafting off (how little its probes accepted).
    adaptive: bool | None = None
    active_steps: int | None = None
    candidate_steps: tuple[int, ...] | None = None
    off_ema_accept: float | None = None
    # vLLM's dynamic speculation: (first, last batch size, speculative tokens) ranges.
    schedule: tuple[tuple[int, int, int], ...] | None = None
    # Why the engine writes no stats lines this run, in its words (vLLM's API servers).
    stats_not_logged: str | None = None

    @property
    def prefill_only(self) -> bool:
        """A prefill server of PD disaggregation: it hands every request to a decode server,
        so it writes no decode stats line and nothing of speculation is judged here."""
        return self.disaggregation_mode == "prefill"

    @property
    def pipelined(self) -> bool:
        """Pipeline parallelism: no baseline at a line's load (one micro-batch's requests)
        says how fast the node is, so speed is not judged against one."""
        return (self.pipeline_stages or 1) > 1

    @property
    def probes(self) -> bool:
        """Whether windows that draft amid drafting-off ones are probes: SGLang's adaptive
        speculation turns drafting off when drafts are rejected and drafts now and then to
        see if they still are; vLLM's schedule turns it off by batch size and drafts every
        round at the batch sizes it drafts at, so those windows are the drafter's level."""
        return bool(self.adaptive) and self.schedule is None

    @property
    def steps_now(self) -> int | None:
        """The draft steps in force: adaptive's newest choice, else the configured count."""
        return self.active_steps if self.active_steps is not None else self.num_steps

    @property
    def draft_tokens_now(self) -> int | None:
        """Verified positions a round now: adaptive runs a chain (top-k 1) of ``steps + 1``;
        a fixed setup (its steps perhaps read from ``/metrics``) may verify a tree."""
        if self.adaptive and self.active_steps is not None:
            return self.active_steps + 1
        return self.num_draft_tokens

    def merged(self, newer: ServerConfig) -> ServerConfig:
        """This config with every field ``newer`` knows taking precedence."""
        known = {f.name: getattr(newer, f.name) for f in fields(newer)}
        return replace(self, **{k: v for k, v in known.items() if v is not None})

    def to_json_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ServerArgs / /server_info field -> ServerConfig field, with the type to coerce to.
_ARG_FIELDS: dict[str, tuple[str, type]] = {
    "speculative_algorithm": ("algorithm", str),
    "speculative_draft_model_path": ("draft_model_path", str),
    "speculative_num_steps": ("num_steps", int),
    "speculative_eagle_topk": ("eagle_topk", int),
    "speculative_num_draft_tokens": ("num_draft_tokens", int),
    "disable_cuda_graph": ("disable_cuda_graph", bool),
    "cuda_graph_max_bs": ("cuda_graph_max_bs", int),
    "log_level": ("log_level", str),
    "decode_log_interval": ("decode_log_interval", int),
    "max_running_requests": ("max_running_requests", int),
    "enable_metrics": ("enable_metrics", bool),
    "speculative_adaptive": ("adaptive", bool),
    "served_model_name": ("served_model", str),
    "disaggregation_mode": ("disaggregation_mode", str),
    "pp_size": ("pipeline_stages", int),
}


def _coerce(value: Any, kind: type) -> Any:
    """``value`` as ``kind``, or ``None`` when it is missing or of another shape.

    A raw string from an unparsable repr value must not turn into a wrong number.
    """
    if value is None:
        return None
    if kind is bool:
        return value if isinstance(value, bool) else None
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, str) else None


def from_server_args(args: Mapping[str, Any]) -> ServerConfig:
    """A config from ServerArgs fields (the startup line or the flat ``/server_info`` JSON)."""
    values = {
        target: _coerce(args.get(source), kind) for source, (target, kind) in _ARG_FIELDS.items()
    }
    if isinstance(values["algorithm"], str):
        values["algorithm"] = values["algorithm"].upper()
    if values["served_model"] is None:  # SGLang's default served name is its model path
        values["served_model"] = _coerce(args.get("model_path"), str)
    values["max_running_requests"] = _per_scheduler(values["max_running_requests"], args)
    return _decode_graphs(ServerConfig(**values), args.get("cuda_graph_config"))


def _per_scheduler(cap: int | None, args: Mapping[str, Any]) -> int | None:
    """``--max-running-requests`` as each scheduler applies it. With DP attention the flag is
    the node's, and each DP rank's scheduler takes ``cap // width``: the share its startup
    line and ``effective_max_running_requests_per_dp`` report, and the running requests its
    decode lines count against. The width is ``attn_dp_size`` from SGLang 0.5.23 (which
    resolves ``--dp-size N --enable-dp-attention`` to it and ``dp_size=1``), ``dp_size`` with
    ``enable_dp_attention`` before."""
    width: int | None = _coerce(args.get("attn_dp_size"), int)
    if width is None and args.get("enable_dp_attention") is True:
        width = _coerce(args.get("dp_size"), int)
    if cap is None or not width or width < 2:
        return cap
    return max(cap // width, 1)


def _decode_graphs(config: ServerConfig, graphs: object) -> ServerConfig:
    """The decode phase of SGLang 0.5.23's resolved ``cuda_graph_config``: its backend is
    ``disabled`` however graphs were turned off (``--cuda-graph-backend-decode=disabled``,
    ``--disable-decode-cuda-graph``, the folded ``--disable-cuda-graph``, an attention backend
    without graphs), and its ``max_bs`` is the largest batch captured."""
    decode = graphs.get("decode") if isinstance(graphs, Mapping) else None
    if not isinstance(decode, Mapping):
        return config
    backend = _coerce(decode.get("backend"), str)
    if backend is not None and not config.disable_cuda_graph:
        config = replace(
            config, disable_cuda_graph=backend == "disabled", decode_graph_backend=backend
        )
    max_bs: int | None = _coerce(decode.get("max_bs"), int)
    if config.cuda_graph_max_bs is None and max_bs is not None:
        config = replace(config, cuda_graph_max_bs=max_bs)
    return config


def from_server_info(info: Mapping[str, Any]) -> ServerConfig:
    """A config from ``/server_info``: server args plus the effective per-DP running cap.

    ``max_running_requests`` is ``None`` in the args when SGLang chose it itself (48 for EAGLE);
    the scheduler's ``effective_max_running_requests_per_dp`` tells the value in force.
    """
    config = replace(from_server_args(drop_secrets(info)), engine="sglang")  # SGLang's alone
    states = info.get("internal_states")
    if config.max_running_requests is None and isinstance(states, list) and states:
        first = states[0] if isinstance(states[0], Mapping) else {}
        cap = _coerce(first.get("effective_max_running_requests_per_dp"), int)
        config = replace(config, max_running_requests=cap)
    return config


def from_draft_config(path: str | Path) -> ServerConfig:
    """A config from a draft model's ``config.json`` (or the folder holding it).

    Total: the path may come from the watched server, so whatever the file system answers
    (no permission on a parent, a name too long, a FIFO) is a ``DraftConfigError``.
    """
    file = Path(path)
    if len(str(path)) > MAX_PATH_CHARS:
        raise DraftConfigError(f"{_shown(file)}: path too long", "name_too_long")
    try:
        if file.is_dir():
            file = file / "config.json"
        data = json.loads(read_small_file(file, MAX_DRAFT_CONFIG_BYTES))
    except FileRefused as exc:  # a FIFO or device, or a file of more than a config
        raise DraftConfigError(f"{_shown(file)} is {exc}", exc.reason) from exc
    except OSError as exc:
        reason = _ERRNO_REASONS.get(exc.errno or 0, "io")
        raise DraftConfigError(f"cannot read {_shown(file)}: {exc.strerror}", reason) from exc
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DraftConfigError(f"{_shown(file)} is not valid JSON: {exc}", "invalid") from exc
    except ValueError as exc:  # the path itself: a NUL byte, a lone surrogate
        raise DraftConfigError(f"{_shown(file)!r} cannot name a file: {exc}", "bad_name") from exc
    if not isinstance(data, dict):
        raise DraftConfigError(f"{_shown(file)} is not a JSON object", "invalid")
    architectures = data.get("architectures")
    arch = architectures[0] if isinstance(architectures, list) and architectures else None
    return ServerConfig(
        draft_architecture=arch if isinstance(arch, str) else None,
        draft_has_eagle_config=isinstance(data.get("eagle_config"), dict),
        draft_vocab_size=_coerce(data.get("draft_vocab_size"), int),
        draft_config="read",
    )


def _shown(file: Path) -> str:
    """A path for a message: a hostile one can be megabytes long."""
    text = str(file)
    return text if len(text) <= _SHOWN_PATH_CHARS else text[:_SHOWN_PATH_CHARS] + "..."


# A draft's config.json is a few kB.
MAX_DRAFT_CONFIG_BYTES = 1 << 20


# Class-name fragments of draft models (SGLang's EntryClass names for EAGLE/MTP drafts).
_DRAFT_CLASS_MARKERS = ("Eagle", "NextN", "MTP")


# Schedulers of one server whose load order is followed; hostile logs could name millions.
MAX_RANKS = 1024


class ConfigTracker:
    """Folds startup events from one log into a :class:`ServerConfig`, thread-safe.

    ``Load weight end`` is logged by every scheduler rank, first for the target then for the
    draft (scheduler init order), so the order is counted per rank. A new ``server_args`` line
    means the server restarted: everything learnt before is dropped, because the new run may
    use other flags or another draft.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._config = ServerConfig()
        self._loads: dict[Hashable, int] = {}
        self._reset_seen = False  # SGLang's "Max running requests is reset" before its args
        self._schedule: tuple[tuple[int, int, int], ...] | None = None  # for the next start

    @property
    def config(self) -> ServerConfig:
        return self._config

    def observe(self, event: Event, rank: Hashable = None) -> None:
        """Apply one event; ``rank`` identifies the logging scheduler (e.g. ``(dp, tp)``)."""
        with self._lock:
            if isinstance(event, ServerArgsEvent):
                config = with_local_draft(from_server_args(event.args))
                config = replace(config, engine=event.engine)
                if self._schedule is not None:
                    config = replace(config, adaptive=True, schedule=self._schedule)
                if "max_running_requests" in event.args:  # the log's word: set, or chosen
                    chosen = event.args["max_running_requests"] is None or self._reset_seen
                    config = replace(config, max_running_requests_set=not chosen)
                self._config, self._loads, self._schedule = config, {}, None
                self._reset_seen = False
            elif isinstance(event, WeightsLoaded):
                self._config = self._with_weights(event.model_class, rank)
            elif isinstance(event, MemoryPlan) and event.max_running_requests is not None:
                self._config = replace(
                    self._config, max_running_requests=event.max_running_requests
                )
            elif isinstance(event, MaxRunningReset):
                # SGLang 0.5 resolves its arguments, and says so, before it logs them.
                self._reset_seen = True
                self._config = replace(
                    self._config, max_running_requests=event.value, max_running_requests_set=False
                )
            elif isinstance(event, AdaptiveSteps):
                self._config = _with_steps(self._config, event)
            elif isinstance(event, StatsLoggingOff):
                self._config = replace(self._config, stats_not_logged=event.reason)
            elif isinstance(event, SpeculationSchedule):
                # Logged before the engine's own start line, which would forget it: kept for it.
                self._schedule = event.ranges
                self._config = replace(self._config, adaptive=True, schedule=event.ranges)

    def _with_weights(self, model_class: str, rank: Hashable) -> ServerConfig:
        seen = self._loads.get(rank, 0)
        if rank in self._loads or len(self._loads) < MAX_RANKS:
            self._loads[rank] = seen + 1  # beyond the bound, only the class name tells
        is_draft = seen >= 1 or any(m in model_class for m in _DRAFT_CLASS_MARKERS)
        if is_draft:
            return replace(self._config, draft_architecture=model_class)
        return replace(self._config, target_architecture=model_class)


def _with_steps(config: ServerConfig, event: AdaptiveSteps) -> ServerConfig:
    off_ema = config.off_ema_accept
    if event.steps == 0 and event.ema_accept is not None:
        off_ema = event.ema_accept
    return replace(
        config,
        adaptive=True,
        active_steps=event.steps,
        candidate_steps=event.candidates or config.candidate_steps,
        off_ema_accept=off_ema,
    )


def with_local_draft(config: ServerConfig) -> ServerConfig:
    """``config`` plus the draft's own ``config.json`` when its path exists on this machine.

    A sidecar usually mounts the same model volume as the server, and ``/server_info`` names
    the draft only by path: reading the file turns a guess into proof. Unreadable or remote
    paths (hub ids) leave the config as it was, whatever the file system answers. Called
    where the path is learnt (the upstream scraper, the tailer), never while rendering.
    """
    path = config.draft_model_path
    if not path or config.draft_architecture is not None:
        return config
    return config.merged(_LOOKUPS.get(path))


def draft_seen(config: ServerConfig) -> str | None:
    """Where the draft's kind was learnt, in words: its ``config.json`` read here (the model
    files are mounted), the server's log, or only the algorithm (they are not). None while no
    draft is named."""
    path, arch = config.draft_model_path, config.draft_architecture
    if path is None:
        return None
    # The path is the server's text, said in a log line and a page: one printable line.
    shown = "".join(c if c.isprintable() else "?" for c in _shown(Path(path)))
    if config.draft_config == "read" and arch is not None:
        return f"{shown}: {arch}, read from its config.json here"
    if arch is not None:
        return f"{shown}: {arch}, as the server's log names it"
    if config.draft_config is None:
        return None
    algorithm = config.algorithm or "not known"
    if config.draft_config == "absent" and not path.startswith("/"):
        return (
            f"{shown}: a hub id, no file here to read, so its kind is known only from the "
            f"algorithm ({algorithm}); set draft_config to its config.json (docs/deployment.md)"
        )
    why = (
        "no config.json at that path here (the model files are not mounted)"
        if config.draft_config == "absent"
        else f"its config.json could not be read here ({config.draft_config})"
    )
    return (
        f"{shown}: {why}, so its kind is known only from the algorithm ({algorithm}); "
        "mount the model files read-only at the same path (docs/deployment.md)"
    )


class _DraftLookups:
    """The newest few paths' answers, keyed by a digest: the scraper asks on each of its
    scrapes and a draft does not change, and a hostile path can be megabytes long. Each
    failure is counted once per path, by reason (``DRAFT_CONFIG_REASONS`` less ``absent``,
    the normal case of a hub id)."""

    SIZE = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: OrderedDict[bytes, ServerConfig] = OrderedDict()
        self._failures: Counter[str] = Counter()

    def get(self, path: str) -> ServerConfig:
        key = hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        answer = self._read(path)
        with self._lock:
            self._answers[key] = answer
            if len(self._answers) > self.SIZE:
                self._answers.popitem(last=False)
        return answer

    def _read(self, path: str) -> ServerConfig:
        try:
            return from_draft_config(path)
        except DraftConfigError as exc:
            if exc.reason != "absent":
                with self._lock:
                    self._failures[exc.reason] += 1
            return ServerConfig(draft_config=exc.reason)

    def failure_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._failures)


_LOOKUPS = _DraftLookups()


def draft_config_failures() -> dict[str, int]:
    """Draft paths learnt from a server whose ``config.json`` could not be read, by reason."""
    return _LOOKUPS.failure_counts()
