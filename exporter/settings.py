"""What every settings file shares: the error that names a key, strict sections, YAML reading.

The daemon's config, the web config and the mixin config each have their own model; this
module is beneath all of them (it knows no section), so the exposition layer can read its own
web config without importing the daemon's wiring.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, ConfigDict

from exporter.smallfile import read_small_file
from exporter.suggest import nearest

if TYPE_CHECKING:
    import yaml


class ConfigError(Exception):
    """Invalid configuration; the message names the offending key."""


class Strict(BaseModel):
    """A config section: an unknown key is an error, not a silently ignored typo, and no
    number is infinite or NaN (``.inf`` passes every lower bound).

    Each section's validator is built when first used, not when its class is defined: a start
    validates only the whole config, whose validator holds every section's, and building each
    section's own as well cost it about 10 ms."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


MAX_SETTINGS_BYTES = 1 << 20
"""A settings file is a few kB; a 100 MB one took 40 s and 231 MB to refuse."""


@functools.cache
def _unique_key_loader() -> type[yaml.SafeLoader]:
    """YAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    silently, so a second ``targets:`` further down would drop the first without a word.

    Made at the first file read: PyYAML's import (its reader compiles a large regex) was a
    tenth of a start's imports, and a daemon given only flags reads no file."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
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

    return UniqueKeyLoader


def load_yaml(path: Path, what: str = "config file") -> dict[str, Any]:
    """A YAML mapping; every error names the file, and for bad YAML the line and column."""
    import yaml

    try:
        raw = read_small_file(path, MAX_SETTINGS_BYTES)
        data = yaml.load(raw.decode("utf-8"), Loader=_unique_key_loader())  # a SafeLoader
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


def plain_problem(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    """One pydantic error in the words of the file's author: what shape the key wants, and for
    a mistyped key the nearest known one, never the library's own phrasing ("Input should be a
    valid dictionary or instance of BaselineConfig")."""
    loc = [part for part in error["loc"] if isinstance(part, str)]
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key" + (nearest(loc[-1], _keys_at(model, loc[:-1])) if loc else "")
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a mapping of keys ({', '.join(_keys_at(model, loc))})"
    ctx = error.get("ctx") or {}
    words = _PLAIN.get(kind)
    if words is not None:
        return words.format(**ctx)
    return str(error["msg"]).removeprefix("Value error, ")


_PLAIN = {
    "list_type": "must be a list",
    "string_type": "must be text",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "missing": "is required",
    "finite_number": "must be a finite number",
    "greater_than": "must be more than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "string_pattern_mismatch": "must match {pattern}",
    "string_too_short": "must be at least {min_length} characters",
    "string_too_long": "must be at most {max_length} characters",
    "too_long": "must have at most {max_length} items",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
}


def _keys_at(model: type[BaseModel], loc: Sequence[str]) -> list[str]:
    """The keys of the section at ``loc`` (names, list indexes left out) of ``model``."""
    section: type[BaseModel] | None = model
    for name in loc:
        field = section.model_fields.get(name) if section is not None else None
        section = _section_of(field.annotation) if field is not None else None
    return list(section.model_fields) if section is not None else []


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through ``X | None``, ``list[X]`` and ``dict[str, X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _section_of(arg)) is not None:
            return found
    return None
