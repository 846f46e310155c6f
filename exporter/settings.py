"""What every settings file shares: the error that names a key, strict sections, YAML reading.

The daemon's config, the web config and the mixin config each have their own model; this
module is beneath all of them (it knows no section), so the exposition layer can read its own
web config without importing the daemon's wiring.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from exporter.smallfile import read_small_file


class ConfigError(Exception):
    """Invalid configuration; the message names the offending key."""


class Strict(BaseModel):
    """A config section: an unknown key is an error, not a silently ignored typo, and no
    number is infinite or NaN (``.inf`` passes every lower bound)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


MAX_SETTINGS_BYTES = 1 << 20
"""A settings file is a few kB; a 100 MB one took 40 s and 231 MB to refuse."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    silently, so a second ``targets:`` further down would drop the first without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice in one mapping", key_node.start_mark
                )
            seen.add(key if isinstance(key, str | int | float | bool) else id(key_node))
        return super().construct_mapping(node, deep)


def load_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    """A YAML mapping; every error names the file, and for bad YAML the line and column."""
    try:
        raw = read_small_file(path, MAX_SETTINGS_BYTES)
        data = yaml.load(raw.decode("utf-8"), Loader=_UniqueKeyLoader)  # a SafeLoader
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path}: {_yaml_problem(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: top level must be a mapping of keys")
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "not valid YAML"
    if mark is None:
        return f"not valid YAML: {problem}"
    return f"line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}"
