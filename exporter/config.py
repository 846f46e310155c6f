"""Configuration: one model fed by a YAML file, ``SPECWATCH_*`` variables and flags.

Precedence is file < environment < flags, so a packaged config can be adjusted per pod with an
environment variable and per run with a flag. Every error names the key (and where it came
from) because a sidecar that silently ignores a typo is worse than one that refuses to start.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from exporter.analysis.thresholds import STALE_AFTER
from exporter.engines import registry
from exporter.engines.counters import MAX_ACCEPT_LENGTH, PREFIX_RE
from exporter.engines.draft_config import from_draft_config
from exporter.parse.custom_rules import CustomRule, CustomRuleSet
from exporter.settings import ConfigError, Invalid, Problem, Strict, load_yaml, validate
from exporter.smallfile import read_small_file
from exporter.suggest import nearest

DEFAULT_LISTEN = "0.0.0.0:9477"
DEFAULT_TARGET = "default"
MAX_LINE_BYTES = 16 << 20
# A thread and about 0.26 MB per followed log, a scrape's share per target: 3,000 targets took
# 3,005 threads, 140 MB and a 4 s scrape. A node serves a handful of servers.
MAX_TARGETS = 256
MAX_LOG_PATHS = 256
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_MODEL_RE = re.compile(r"^[!-~][ -~]{0,127}$")


class BaselineConfig(Strict, frozen=True):
    """Throughput of the same server without speculation: one of four forms."""

    tok_s: Annotated[float, Meta(gt=0)] | None = None
    curve: str | None = None
    bench_file: Path | None = None
    log: Path | None = None

    def __post_init__(self) -> None:
        forms = ("tok_s", "curve", "bench_file", "log")
        given = [k for k in forms if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give only one of {', '.join(forms)} (got {', '.join(given)})")
        if not given:
            raise ValueError(f"give one of {', '.join(forms)}")


class _LogPaths(list[str]):
    """``log_files``: a list of paths, or one path alone (``log_files: /var/log/server.log`` is
    the natural way to write one), none of them empty."""

    @classmethod
    def from_setting(cls, value: Any) -> _LogPaths:
        paths = [value] if isinstance(value, str) else value
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise TypeError("must be a list of paths (text)")
        if any(not path.strip() for path in paths):
            raise ValueError("an empty path names no file")
        return cls(paths)


# To its readers log_files is a list of paths; only reading a file's value differs.
if TYPE_CHECKING:
    LogPaths = list[str]
else:
    LogPaths = _LogPaths


class TargetConfig(Strict, frozen=True):
    """One watched server. Several per process are allowed (daemonset mode)."""

    name: str = DEFAULT_TARGET
    # "auto": the log's first stats lines (or the /metrics names) tell SGLang from vLLM.
    engine: str = "auto"  # or a registered engine's name
    log_files: LogPaths = msgspec.field(default_factory=LogPaths)
    # The server's base URL (http://127.0.0.1:30000): each engine's endpoints are found from
    # it; metrics_url and server_info_url override one each.
    url: str | None = None
    metrics_url: str | None = None
    # The start of the server's metric names when not its engine's own (llamacpp:, ray_vllm_).
    metrics_prefix: str | None = None
    server_info_url: str | None = None
    bearer_token_file: Path | None = None
    bearer_token_env: str | None = None
    draft_config: Path | None = None
    # At least a second, as Prometheus' own: 1e-9 sent the server ~1,000 scrapes a second.
    scrape_interval: Annotated[float, Meta(ge=1, le=3600)] = 15.0
    baseline: BaselineConfig | None = None
    # An accept length is at most the draft steps + 1; an endless expectation pages every node.
    expected_accept_length: Annotated[float, Meta(ge=1, le=MAX_ACCEPT_LENGTH)] | None = None
    # A header SGLang logs with each finished request (SGLANG_LOG_REQUEST_HEADERS) whose value
    # splits the per-request histogram by traffic class (docs/metrics.md, "Per-request acceptance").
    request_label_header: Annotated[str, Meta(pattern=r"^[a-z0-9_-]{1,64}$")] | None = None
    # The `served_model` label of specwatch_target_info; by default the server's own name.
    served_model: str | None = None
    # The `hardware` label of the per-band throughput: what makes nodes of one model comparable
    # (e.g. "8xH200"); fleet peers are matched on (served_model, hardware, band).
    hardware: str | None = None

    def __post_init__(self) -> None:
        """Each key's own rule, then the rules across keys; the files and variables named are
        read here, so a typo stops the start with the key named, not a scrape later."""
        # Engines are written SGLang, vLLM, TensorRT-LLM in their own docs: any case is meant.
        msgspec.structs.force_setattr(self, "engine", self.engine.strip().lower())
        for key, value in self._values():
            if value is not None:
                try:
                    _KEY_RULES[key](value)
                except ValueError as exc:
                    raise ValueError(f"{key}: {exc}") from None
        self._engine_reads_its_names()
        self._engine_has_a_log()

    def _values(self) -> Iterator[tuple[str, Any]]:
        return ((key, getattr(self, key)) for key in _KEY_RULES)

    def _engine_reads_its_names(self) -> None:
        if self.metrics_prefix is None or self.engine == "auto":
            return
        if registry.engine(self.engine).upstream_reader(self.metrics_prefix) is None:
            raise ValueError(
                f"metrics_prefix: {self.engine} writes no metrics under {self.metrics_prefix}"
            )

    def _engine_has_a_log(self) -> None:
        if self.log_files and self.engine != "auto" and not registry.engine(self.engine).markers:
            title = registry.engine(self.engine).title
            raise ValueError(f"log_files: specwatch reads no {title} log; give url")


def _bounded_name(value: str) -> None:
    # The name becomes the `target` label: keep it short and free of odd characters.
    if not _NAME_RE.match(value):
        raise ValueError("must be 1-64 characters of letters, digits, '_', '.', ':' or '-'")


def _known_engine(value: str) -> None:
    if value != "auto" and value not in registry.NAMES:
        near = nearest(value, ["auto", *registry.NAMES])
        raise ValueError(f"must be auto or one of {', '.join(registry.NAMES)}{near}")


def _metric_name_start(value: str) -> None:
    if not PREFIX_RE.match(value):
        raise ValueError(
            "must start a metric name and end in '_' or ':' (like llamacpp: or ray_vllm_), "
            "at most 64 characters"
        )


def _printable_model(value: str) -> None:
    if not _MODEL_RE.match(value):
        raise ValueError("must be 1-128 printable characters")


def _readable_token(value: Path) -> None:
    # Read at start: a wrong path would otherwise show only as 401s from the server.
    from exporter.sources.upstream import MAX_TOKEN_BYTES  # a scraping target's

    try:
        read_small_file(value, MAX_TOKEN_BYTES)
    except OSError as exc:
        raise ValueError(f"cannot read {value}: {exc.strerror or exc}") from None


def _variable_set(value: str) -> None:
    if not os.environ.get(value):
        raise ValueError(f"environment variable {value} is not set or empty")


def _readable_draft(value: Path) -> None:
    from_draft_config(value)  # a DraftConfigError (a ValueError) says what is wrong


def _http_url(value: str) -> None:
    check_http_url(value)


# A target's rules of one key each, in the order they are checked.
_KEY_RULES: dict[str, Callable[[Any], None]] = {
    "name": _bounded_name,
    "engine": _known_engine,
    "url": _http_url,
    "metrics_url": _http_url,
    "metrics_prefix": _metric_name_start,
    "server_info_url": _http_url,
    "bearer_token_file": _readable_token,
    "bearer_token_env": _variable_set,
    "draft_config": _readable_draft,
    "served_model": _printable_model,
    "hardware": _printable_model,
}


class Config(Strict, frozen=True):
    """The whole daemon configuration; docs/configuration.md lists every key."""

    listen: str = DEFAULT_LISTEN
    # Finite (see Strict), so only a value given on purpose (a replay of an old log takes
    # 1e9) keeps a window current for long; a missing log is reported within a day, and one
    # line without a newline cannot take more than the cap.
    stale_after: Annotated[float, Meta(gt=0)] = STALE_AFTER
    log_missing_grace: Annotated[float, Meta(ge=0, le=86400)] = 60.0
    max_line_bytes: Annotated[int, Meta(ge=1024, le=MAX_LINE_BYTES)] = 1 << 20
    # DP ranks with their own per-window series; further ranks count only in the totals.
    max_dp_ranks: Annotated[int, Meta(ge=1, le=1024)] = 32
    # Values of request_label_header with series of their own; later ones count as "other".
    max_traffic_classes: Annotated[int, Meta(ge=1, le=64)] = 8
    from_beginning: bool = False
    web_config: Path | None = None
    targets: list[TargetConfig] = msgspec.field(default_factory=list)
    custom_rules: list[CustomRule] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        """The rules of one key each, every error put under its key (see ``Strict``)."""
        rules: tuple[tuple[str, Callable[[Any], object]], ...] = (
            ("listen", parse_listen),
            ("custom_rules", CustomRuleSet),  # raises when two rules export one metric name
            ("targets", _unique_names),
        )
        for key, rule in rules:
            try:
                rule(getattr(self, key))
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None


def _unique_names(targets: list[TargetConfig]) -> None:
    names = [t.name for t in targets]
    if len(targets) > MAX_TARGETS:
        raise ValueError(f"at most {MAX_TARGETS} targets per process (got {len(targets)})")
    if (paths := sum(len(t.log_files) for t in targets)) > MAX_LOG_PATHS:
        raise ValueError(f"at most {MAX_LOG_PATHS} log paths per process (got {paths})")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"target names must be unique (repeated: {', '.join(dupes)})")
    _unique_paths(targets)


def _unique_paths(targets: list[TargetConfig]) -> None:
    """A log path given twice, in one target or two, would have every line counted twice; so
    would one file reached by two paths (a symlink, a hard link, a glob's match), as far as
    the files there now tell."""
    seen: dict[str, str] = {}
    files: dict[tuple[int, int], tuple[str, str]] = {}  # -> (the entry, the file's name)
    for target in targets:
        for path in target.log_files:
            key = path if path == "-" else os.path.normpath(os.path.abspath(path))
            if key in seen:
                raise ValueError(
                    f"log file {path} is given twice (targets {seen[key]} and {target.name}): "
                    "each line would be counted twice"
                )
            seen[key] = target.name
            for identity, name in _files_named(path):
                entry, first = files.setdefault(identity, (key, name))
                if entry != key:
                    raise ValueError(
                        f"log file {path} names the file {first} does too "
                        f"(target {target.name}): each line would be counted twice"
                    )


def _files_named(path: str) -> list[tuple[tuple[int, int], str]]:
    """(device, inode) and the path it was reached by, of each file ``path`` names now."""
    if path == "-":
        return []
    found = []
    for name in sorted(glob.glob(path)) if glob.has_magic(path) else [path]:
        try:
            st = os.stat(name)
        except (OSError, ValueError):  # not there (yet), or a name the system refuses
            continue
        if stat.S_ISREG(st.st_mode):
            found.append(((st.st_dev, st.st_ino), name))
    return found


def check_http_url(value: str) -> None:
    """Raise ``ValueError`` saying what is wrong unless ``value`` is a usable http(s) URL."""
    if not re.match(r"^https?://[^/\s]+", value) or re.search(r"\s", value):
        raise ValueError("must be an http:// or https:// URL")
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ValueError("the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise ValueError("names no host")


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:9477``) -> (host, port)."""
    match = re.match(r"^(\[[0-9a-fA-F:.]+\]|[^:\s]*):(\d+)$", value)
    if not match:
        raise ValueError("must be HOST:PORT, e.g. 0.0.0.0:9477")
    port = int(match.group(2))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range (0-65535)")
    return match.group(1).strip("[]") or "0.0.0.0", port


# Top-level keys and target keys that may come from SPECWATCH_* variables or flags.
_TOP_KEYS = (
    "listen",
    "stale_after",
    "log_missing_grace",
    "max_line_bytes",
    "max_dp_ranks",
    "max_traffic_classes",
    "from_beginning",
    "web_config",
)
_TARGET_KEYS = (
    "name",
    "engine",
    "log_files",
    "url",
    "metrics_url",
    "metrics_prefix",
    "server_info_url",
    "bearer_token_file",
    "bearer_token_env",
    "draft_config",
    "expected_accept_length",
    "request_label_header",
)
_BASELINE_KEYS = {
    "baseline_tok_s": "tok_s",
    "baseline_curve": "curve",
    "baseline_bench": "bench_file",
    "baseline_log": "log",
}
# Environment names that differ from the key they set.
_ENV_ALIASES = {"TARGET": "name", "LOG_FILE": "log_files"}


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Collect ``SPECWATCH_*`` variables as overrides; an unknown one is an error (typos)."""
    known = set(_TOP_KEYS) | set(_TARGET_KEYS) | set(_BASELINE_KEYS) | {"config"}
    out: dict[str, Any] = {}
    for var, raw in environ.items():
        if not var.startswith("SPECWATCH_"):
            continue
        suffix = var.removeprefix("SPECWATCH_")
        key = _ENV_ALIASES.get(suffix, suffix.lower())
        # An aliased key has one documented name: SPECWATCH_NAME is no second SPECWATCH_TARGET.
        if key not in known or suffix.lower() in _ENV_ALIASES.values():
            near = nearest(var, [env_name(k) for k in known])
            raise ConfigError(f"{var}: unknown setting{near} (known: {_env_names(known)})")
        out[key] = raw.split(os.pathsep) if key == "log_files" else _flag_word(key, raw)
    return out


# Words for true and false a variable may give beyond true/false/1/0 (which the models read
# themselves): SPECWATCH_FROM_BEGINNING=yes has always worked.
_FLAG_WORDS = {"y": True, "yes": True, "on": True, "t": True}
_FLAG_WORDS.update({"n": False, "no": False, "off": False, "f": False})


def _flag_word(key: str, raw: str) -> str | bool:
    """``raw`` as true or false where ``key`` is a flag of the models and ``raw`` a word for
    one; otherwise as given, for the models to read or refuse."""
    word = raw.strip().lower()
    if word not in _FLAG_WORDS:
        return raw
    flags = {
        field.name
        for model in (Config, TargetConfig)
        for field in msgspec.structs.fields(model)
        if field.type is bool
    }
    return _FLAG_WORDS[word] if key in flags else raw


def _env_names(keys: set[str]) -> str:
    return ", ".join(sorted(env_name(k) for k in keys))


def build_config(
    file_data: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    origins: Mapping[str, str] | None = None,
    file_origin: str = "config",
) -> Config:
    """Merge file data with flat overrides (env or flags) and validate.

    Overrides for target keys shape a single flag-defined target: it updates the file's target
    of the same name (or the only one), otherwise it is added. ``origins`` names where each
    override came from (a flag or a variable) and ``file_origin`` the file, for the errors.
    """
    data = dict(file_data or {})
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key in _TOP_KEYS:
        if key in overrides:
            data[key] = overrides[key]
    target_over = {k: overrides[k] for k in _TARGET_KEYS if k in overrides}
    baseline = {_BASELINE_KEYS[k]: overrides[k] for k in _BASELINE_KEYS if k in overrides}
    if baseline:
        target_over["baseline"] = baseline
    if target_over:
        data["targets"] = _merge_target(data.get("targets"), target_over)
    try:
        return validate(Config, data)
    except Invalid as exc:
        raise ConfigError(_describe(exc, origins or {}, file_origin)) from None


def _merge_target(targets: Any, over: dict[str, Any]) -> Any:
    if targets is None:
        targets = []
    if not isinstance(targets, list):
        return targets  # let validation report the type error under its key
    targets = [dict(t) if isinstance(t, dict) else t for t in targets]
    dicts = [t for t in targets if isinstance(t, dict)]
    wanted = over.get("name")
    match = next((t for t in dicts if t.get("name", DEFAULT_TARGET) == wanted), None)
    if match is None and wanted is None and len(dicts) == 1:
        match = dicts[0]
    if match is None:
        targets.append(dict(over))
    else:
        match.update(over)
    return targets


def _describe(exc: Invalid, origins: Mapping[str, str], file_origin: str) -> str:
    """Every error on one line, each naming its key and where the value came from."""
    return "; ".join(_describe_one(found, origins, file_origin) for found in exc.problems)


def _describe_one(found: Problem, origins: Mapping[str, str], file_origin: str) -> str:
    loc = list(found.loc)
    msg = found.text + _example(loc, found.given)
    # The flat override key a location came from: baseline.tok_s was baseline_tok_s.
    leaf = "_".join(loc[-2:]) if loc[-2:-1] == ["baseline"] else (loc[-1] if loc else "")
    if leaf not in origins and loc[-1:] == ["baseline"]:
        leaf = next((k for k in _BASELINE_KEYS if k in origins), leaf)
    return f"{found.key}: {msg} ({origins.get(leaf, file_origin)})"


def _example(loc: list[str], given: Any) -> str:
    """The form a bare number or text given as a baseline was meant as."""
    if loc[-1:] != ["baseline"] or isinstance(given, dict):
        return ""
    if isinstance(given, int | float) and not isinstance(given, bool):
        return f", e.g. baseline: {{tok_s: {given}}}"
    return ', e.g. baseline: {curve: "1:82,48:1500,128:2370"}'


def flag_name(key: str) -> str:
    """The ``specwatch run`` flag that sets an override key."""
    return {"log_files": "--log-file", "name": "--target"}.get(key, "--" + key.replace("_", "-"))


def env_name(key: str) -> str:
    """The ``SPECWATCH_*`` variable that sets an override key."""
    reverse = {v: k for k, v in _ENV_ALIASES.items()}
    return "SPECWATCH_" + reverse.get(key, key.upper())


def load_config(
    path: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """The effective configuration: file, then ``SPECWATCH_*``, then flags."""
    env = env_overrides(os.environ if environ is None else environ)
    env_config = env.pop("config", None)
    if path is None and env_config is not None:
        if not env_config.strip():
            raise ConfigError("SPECWATCH_CONFIG: an empty path names no file")
        path = Path(env_config)
    file_data = load_yaml(path) if path else {}
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    origins = {k: f"environment variable {env_name(k)}" for k in env}
    origins.update({k: flag_name(k) for k in given})
    file_origin = f"config file {path}" if path else "defaults"
    config = build_config(file_data, {**env, **given}, origins, file_origin)
    if not config.targets:
        raise ConfigError(
            "targets: nothing to watch: give --log-file or --url, or targets in the config"
        )
    return config
