"""Configuration: one pydantic model fed by a YAML file, ``SPECWATCH_*`` variables and flags.

Precedence is file < environment < flags, so a packaged config can be adjusted per pod with an
environment variable and per run with a flag. Every error names the key (and where it came
from) because a sidecar that silently ignores a typo is worse than one that refuses to start.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator

from exporter.analysis.thresholds import STALE_AFTER
from exporter.engines import registry
from exporter.engines.counters import MAX_ACCEPT_LENGTH, PREFIX_RE
from exporter.engines.draft_config import from_draft_config
from exporter.parse.custom_rules import CustomRule, CustomRuleSet
from exporter.settings import ConfigError, Strict, load_yaml, plain_problem
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


class BaselineConfig(Strict):
    """Throughput of the same server without speculation: one of four forms."""

    tok_s: float | None = Field(default=None, gt=0)
    curve: str | None = None
    bench_file: Path | None = None
    log: Path | None = None

    @model_validator(mode="after")
    def _one_form(self) -> BaselineConfig:
        forms = ("tok_s", "curve", "bench_file", "log")
        given = [k for k in forms if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give only one of {', '.join(forms)} (got {', '.join(given)})")
        if not given:
            raise ValueError(f"give one of {', '.join(forms)}")
        return self


class TargetConfig(Strict):
    """One watched server. Several per process are allowed (daemonset mode)."""

    name: str = DEFAULT_TARGET
    # "auto": the log's first stats lines (or the /metrics names) tell SGLang from vLLM.
    engine: str = "auto"  # or a registered engine's name
    log_files: list[str] = Field(default_factory=list)
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
    scrape_interval: float = Field(default=15.0, ge=1, le=3600)
    baseline: BaselineConfig | None = None
    # An accept length is at most the draft steps + 1; an endless expectation pages every node.
    expected_accept_length: float | None = Field(default=None, ge=1, le=MAX_ACCEPT_LENGTH)
    # A header SGLang logs with each finished request (SGLANG_LOG_REQUEST_HEADERS) whose value
    # splits the per-request histogram by traffic class (docs/metrics.md, "Per-request acceptance").
    request_label_header: str | None = Field(default=None, pattern=r"^[a-z0-9_-]{1,64}$")
    # The `served_model` label of specwatch_target_info; by default the server's own name.
    served_model: str | None = None
    # The `hardware` label of the per-band throughput: what makes nodes of one model comparable
    # (e.g. "8xH200"); fleet peers are matched on (served_model, hardware, band).
    hardware: str | None = None

    @field_validator("served_model", "hardware")
    @classmethod
    def _printable_model(cls, value: str | None) -> str | None:
        if value is not None and not _MODEL_RE.match(value):
            raise ValueError("must be 1-128 printable characters")
        return value

    @field_validator("name")
    @classmethod
    def _bounded_name(cls, value: str) -> str:
        # The name becomes the `target` label: keep it short and free of odd characters.
        if not _NAME_RE.match(value):
            raise ValueError("must be 1-64 characters of letters, digits, '_', '.', ':' or '-'")
        return value

    @field_validator("engine", mode="before")
    @classmethod
    def _known_engine(cls, value: Any) -> Any:
        # Engines are written SGLang, vLLM, TensorRT-LLM in their own docs: any case is meant.
        if isinstance(value, str):
            value = value.strip().lower()
        if isinstance(value, str) and value != "auto" and value not in registry.NAMES:
            near = nearest(value, ["auto", *registry.NAMES])
            raise ValueError(f"must be auto or one of {', '.join(registry.NAMES)}{near}")
        return value

    @field_validator("metrics_prefix")
    @classmethod
    def _metric_name_start(cls, value: str | None) -> str | None:
        if value is not None and not PREFIX_RE.match(value):
            raise ValueError(
                "must start a metric name and end in '_' or ':' (like llamacpp: or ray_vllm_), "
                "at most 64 characters"
            )
        return value

    @model_validator(mode="after")
    def _engine_reads_its_names(self) -> TargetConfig:
        if self.metrics_prefix is None or self.engine == "auto":
            return self
        if registry.engine(self.engine).upstream_reader(self.metrics_prefix) is None:
            raise ValueError(
                f"metrics_prefix: {self.engine} writes no metrics under {self.metrics_prefix}"
            )
        return self

    @model_validator(mode="after")
    def _engine_has_a_log(self) -> TargetConfig:
        if self.log_files and self.engine != "auto" and not registry.engine(self.engine).markers:
            title = registry.engine(self.engine).title
            raise ValueError(f"log_files: specwatch reads no {title} log; give url")
        return self

    @field_validator("log_files", mode="before")
    @classmethod
    def _one_path_is_a_list(cls, value: Any) -> Any:
        # `log_files: /var/log/sglang/server.log` is the natural way to write one path.
        return [value] if isinstance(value, str) else value

    @field_validator("log_files")
    @classmethod
    def _no_empty_path(cls, value: list[str]) -> list[str]:
        if any(not path.strip() for path in value):
            raise ValueError("an empty path names no file")
        return value

    @field_validator("bearer_token_file", "draft_config", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        # Path("") is ".", the working directory: an empty value is a mistake, not a path.
        if isinstance(value, str) and not value.strip():
            raise ValueError("an empty path names no file")
        return value

    @field_validator("bearer_token_file")
    @classmethod
    def _readable_token(cls, value: Path | None) -> Path | None:
        # Read at start: a wrong path would otherwise show only as 401s from the server.
        if value is not None:
            from exporter.sources.upstream import MAX_TOKEN_BYTES  # a scraping target's

            try:
                read_small_file(value, MAX_TOKEN_BYTES)
            except OSError as exc:
                raise ValueError(f"cannot read {value}: {exc.strerror or exc}") from None
        return value

    @field_validator("bearer_token_env")
    @classmethod
    def _variable_set(cls, value: str | None) -> str | None:
        if value is not None and not os.environ.get(value):
            raise ValueError(f"environment variable {value} is not set or empty")
        return value

    @field_validator("draft_config")
    @classmethod
    def _readable_draft(cls, value: Path | None) -> Path | None:
        # Read once here so a typo stops the start with the key named, not a scrape later.
        if value is not None:
            from_draft_config(value)
        return value

    @field_validator("url", "metrics_url", "server_info_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_http_url(value)
        return value


class Config(Strict):
    """The whole daemon configuration; docs/configuration.md lists every key."""

    listen: str = DEFAULT_LISTEN
    # Finite (see Strict), so only a value given on purpose (a replay of an old log takes
    # 1e9) keeps a window current for long; a missing log is reported within a day, and one
    # line without a newline cannot take more than the cap.
    stale_after: float = Field(default=STALE_AFTER, gt=0)
    log_missing_grace: float = Field(default=60.0, ge=0, le=86400)
    max_line_bytes: int = Field(default=1 << 20, ge=1024, le=MAX_LINE_BYTES)
    # DP ranks with their own per-window series; further ranks count only in the totals.
    max_dp_ranks: int = Field(default=32, ge=1, le=1024)
    # Values of request_label_header with series of their own; later ones count as "other".
    max_traffic_classes: int = Field(default=8, ge=1, le=64)
    from_beginning: bool = False
    web_config: Path | None = None
    targets: list[TargetConfig] = Field(default_factory=list)
    custom_rules: list[CustomRule] = Field(default_factory=list)

    @field_validator("web_config", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("an empty path names no file")
        return value

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("custom_rules")
    @classmethod
    def _unique_metrics(cls, rules: list[CustomRule]) -> list[CustomRule]:
        CustomRuleSet(rules)  # raises when two rules export the same metric name
        return rules

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, targets: list[TargetConfig]) -> list[TargetConfig]:
        names = [t.name for t in targets]
        if len(targets) > MAX_TARGETS:
            raise ValueError(f"at most {MAX_TARGETS} targets per process (got {len(targets)})")
        if (paths := sum(len(t.log_files) for t in targets)) > MAX_LOG_PATHS:
            raise ValueError(f"at most {MAX_LOG_PATHS} log paths per process (got {paths})")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"target names must be unique (repeated: {', '.join(dupes)})")
        _unique_paths(targets)
        return targets


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
        out[key] = raw.split(os.pathsep) if key == "log_files" else raw
    return out


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
        return Config.model_validate(data)
    except ValidationError as exc:
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


def _describe(exc: ValidationError, origins: Mapping[str, str], file_origin: str) -> str:
    """Every error on one line, each naming its key and where the value came from."""
    return "; ".join(_describe_one(err, origins, file_origin) for err in exc.errors())


def _describe_one(err: Any, origins: Mapping[str, str], file_origin: str) -> str:
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc) or "(top level)"
    msg = plain_problem(err, Config) + _example(loc, err.get("input"))
    # The flat override key a location came from: baseline.tok_s was baseline_tok_s.
    leaf = "_".join(loc[-2:]) if loc[-2:-1] == ["baseline"] else (loc[-1] if loc else "")
    if leaf not in origins and loc[-1:] == ["baseline"]:
        leaf = next((k for k in _BASELINE_KEYS if k in origins), leaf)
    # A check across a target's keys names the key it refuses first ("log_files: ...").
    leaf = leaf if leaf in origins else msg.partition(":")[0]
    return f"{key}: {msg} ({origins.get(leaf, file_origin)})"


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
