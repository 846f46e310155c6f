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


class ConfigError(Exception):
    """Invalid configuration; the message names the offending key."""


class Strict(BaseModel):
    """A config section: an unknown key is an error, not a silently ignored typo."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def load_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    """A YAML mapping; every error names the file, and for bad YAML the line and column."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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
