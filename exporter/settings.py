"""What every settings file shares: the error that names a key, strict sections, YAML reading.

The daemon's config, the web config and the mixin config each have their own model (msgspec
structs); this module is beneath all of them (it knows no section), so the exposition layer can
read its own web config without importing the daemon's wiring. ``validate`` is the one way a
model is filled from a file's data, and ``problem`` the one place the library's words become
the file author's.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, get_args, get_origin

import msgspec

from exporter.smallfile import read_small_file
from exporter.suggest import nearest

if TYPE_CHECKING:
    import yaml


class ConfigError(Exception):
    """Invalid configuration; the message names the offending key."""


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A config section: an unknown key is an error, not a silently ignored typo, a value
    cannot change once read, and (``validate`` checks it) no number is infinite or NaN
    (``.inf`` passes every lower bound).

    A key's bounds are ``msgspec.Meta`` on its type; a rule of one key or across keys is
    checked in ``__post_init__``, which raises ``ValueError("key: problem")`` where one key is
    at fault, so the error names the key and not only its section. Each section says
    ``frozen=True`` again, for the type checker (which does not see it inherited)."""


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


M = TypeVar("M", bound=msgspec.Struct)

# Problems listed in one refusal, at most: each after the first costs a validation more.
MAX_PROBLEMS = 20


class Problem(msgspec.Struct, frozen=True):
    """One thing wrong in a settings file: where (its keys, list positions as text), what, in
    the author's words, and the value given there (None when none was)."""

    loc: tuple[str, ...]
    text: str
    given: Any = None

    @property
    def key(self) -> str:
        return ".".join(self.loc) or "(top level)"

    def __str__(self) -> str:
        return f"{self.key}: {self.text}"


class Invalid(ValueError):
    """Settings that do not fit their model; ``problems`` has every key at fault, in order."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(map(str, problems)))
        self.problems = tuple(problems)


def validate(model: type[M], data: Any) -> M:
    """``data`` (a file's mapping, with any overrides) as ``model``, or ``Invalid`` naming every
    key at fault.

    Values are taken as YAML and the environment give them: text that reads as a number or
    true/false is one (``SPECWATCH_STALE_AFTER=20``), a path is text and never empty, and a
    type with ``from_setting`` reads its own value (a single path as a list of one)."""
    try:
        return _convert(model, data)
    except msgspec.ValidationError as exc:
        first = problem(str(exc), model, data)
    raise Invalid(_every_problem(model, data, first))


def _convert(model: type[M], data: Any) -> M:
    result = msgspec.convert(data, model, strict=False, dec_hook=_decode)
    _check_values(result, data, "$")
    return result


def _every_problem(model: type[M], data: Any, first: Problem) -> list[Problem]:
    """``first`` and the problems after it: msgspec stops at the first, so each key at fault is
    taken out (its default applies) and the rest validated again, until none is left or one
    lies at or above a key taken out (a section left empty, a required key gone: the taking
    out's, not the author's)."""
    problems = [first]
    trial = copy.deepcopy(data)
    removed: list[tuple[str, ...]] = []
    while len(problems) < MAX_PROBLEMS and _remove(trial, problems[-1].loc):
        removed.append(problems[-1].loc)
        try:
            _convert(model, trial)
            break
        except msgspec.ValidationError as exc:
            found = problem(str(exc), model, trial)
        if any(loc[: len(found.loc)] == found.loc for loc in removed):
            break
        problems.append(found)
    return problems


def _remove(data: Any, loc: Sequence[str]) -> bool:
    if not loc:
        return False
    parent = _at(data, loc[:-1])
    if isinstance(parent, dict) and loc[-1] in parent:
        del parent[loc[-1]]
        return True
    return False


def _at(data: Any, loc: Sequence[str]) -> Any:
    """The value at ``loc`` in ``data``, or None."""
    for part in loc:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def _decode(kind: type, value: Any) -> Any:
    """The types msgspec does not read itself: a path (text, never empty: ``Path("")`` is the
    working directory), and a type that reads its own value (``from_setting``)."""
    if kind is Path:
        if isinstance(value, Path):
            return value
        if not isinstance(value, str):
            raise TypeError("must be a path (text)")
        if not value.strip():
            raise ValueError("an empty path names no file")
        return Path(value)
    from_setting = getattr(kind, "from_setting", None)
    if from_setting is None:
        raise NotImplementedError
    return from_setting(value)


def _check_values(value: Any, given: Any, at: str) -> None:
    """What msgspec leaves to the model, in msgspec's own words for ``problem``: no number is
    infinite or NaN, and a section that is a dataclass (msgspec forbids unknown fields only in
    structs) has no unknown key."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise msgspec.ValidationError(f"Number out of range - at `{at}`")
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            _check_values(getattr(value, name), _at(given, [name]), f"{at}.{name}")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [field.name for field in dataclasses.fields(value)]
        unknown = [key for key in given if key not in names] if isinstance(given, dict) else []
        if unknown:
            unknown_field = f"Object contains unknown field `{unknown[0]}`"
            raise msgspec.ValidationError(f"{unknown_field} - at `{at}`")
        for name in names:
            _check_values(getattr(value, name), _at(given, [name]), f"{at}.{name}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_values(item, _at(given, [str(index)]), f"{at}[{index}]")
    elif isinstance(value, dict):
        for item in value.values():
            _check_values(item, None, f"{at}[...]")


_AT = re.compile(r" - at `\$([^`]*)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")
_TYPE_WORDS = {
    "int": "must be a whole number",
    "float": "must be a number",
    "str": "must be text",
    "bool": "must be true or false",
    "array": "must be a list",
}
_BOUND_WORDS = {">": "more than", ">=": "at least", "<": "less than", "<=": "at most"}
_LENGTH_UNITS = {"str": "characters", "array": "items", "object": "keys"}


def problem(message: str, model: type, data: Any = None) -> Problem:
    """One msgspec error (one line: ``Expected `int`, got `str` - at `$.targets[0].x```) in
    the words of the file's author: the key's dotted name, what shape it wants, and for a
    mistyped key the nearest known one, never the library's own phrasing. A model's own check
    that starts with one of its section's keys (``"name: must be ..."``) is put under that key.
    """
    text, loc = _split(message)
    if (at := _AT.search(message)) is not None and at[1].endswith("[...]"):
        key = _mapping_key(model, loc, data)  # msgspec names no key of a mapping
        loc = loc if key is None else [*loc, key]
    if match := re.fullmatch(r"Object contains unknown field `(.+)`", text):
        words = "unknown key" + nearest(match[1], _keys_at(model, loc))
        loc = [*loc, match[1]]
    elif match := re.fullmatch(r"Object missing required field `(.+)`", text):
        words, loc = "is required", [*loc, match[1]]
    elif text == "Number out of range":
        words = "must be a finite number"
    elif match := re.fullmatch(r"Expected `([^`]+)`(.*)", text, re.S):
        words = _expected(match[1], match[2], _keys_at(model, loc))
        if match[1] in ("float", "float | null") and _non_finite(_at(data, loc)):
            words = "must be a finite number"  # NaN fails every bound: say what is wrong
    elif text.startswith("Invalid enum value"):
        words = "must be one of " + _choices(_type_at(model, loc))
    else:
        words = text
        while (split := words.split(": ", 1))[1:] and split[0] in _keys_at(model, loc):
            loc, words = [*loc, split[0]], split[1]
    return Problem(tuple(loc), words, _at(data, loc))


def _mapping_key(model: type, loc: Sequence[str], data: Any) -> str | None:
    """The key of the first value of the mapping at ``loc`` that its type refuses, or None."""
    mapping, kind = _at(data, loc), _unwrap(_type_at(model, loc))
    if not isinstance(mapping, dict) or get_origin(kind) is not dict:
        return None
    value_type = get_args(kind)[1]
    for key, value in mapping.items():
        try:
            msgspec.convert(value, value_type, strict=False, dec_hook=_decode)
        except (msgspec.ValidationError, TypeError, ValueError):
            return str(key)
    return None


def _non_finite(given: Any) -> bool:
    """Whether a value given (``.nan`` in YAML, ``nan`` in a variable) reads as a number that
    is not finite."""
    if isinstance(given, str):
        try:
            given = float(given)
        except ValueError:
            return False
    return isinstance(given, float) and not math.isfinite(given)


def _split(message: str) -> tuple[str, list[str]]:
    """msgspec's message and its path (``$.targets[0].baseline``) as keys; a mapping's own key
    (``[...]``) is not in the path, so it is left out."""
    match = _AT.search(message)
    if match is None:
        return message, []
    steps = [name or index for name, index in _STEP.findall(match[1]) if name or index]
    return message[: match.start()], steps


def _expected(kind: str, rest: str, keys: list[str]) -> str:
    kind = next((k for k in kind.split(" | ") if k != "null"), kind)
    if rest.startswith(", got"):
        if kind == "object":
            return f"must be a mapping of keys ({', '.join(keys)})" if keys else "must be a mapping"
        return _TYPE_WORDS.get(kind, f"must be {kind}")
    if match := re.fullmatch(r" (>=|>|<=|<) (\S+)", rest):
        return f"must be {_BOUND_WORDS[match[1]]} {_number(match[2])}"
    if match := re.fullmatch(r" of length (>=|<=) (\d+)", rest):
        unit = _LENGTH_UNITS.get(kind, "items")
        verb = "be" if unit == "characters" else "have"
        unit = unit.removesuffix("s") if match[2] == "1" else unit
        return f"must {verb} {'at least' if match[1] == '>=' else 'at most'} {match[2]} {unit}"
    if match := re.fullmatch(r" matching regex '(.*)'", rest, re.S):
        return f"must match {match[1]}"
    return f"must be {kind}{rest}"


def _number(text: str) -> str:
    """A bound as the author wrote it: ``0``, not msgspec's ``0.0``."""
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() and abs(value) < 1e16 else text


def _choices(kind: Any) -> str:
    values = [repr(v) for v in get_args(_unwrap(kind))] if kind is not None else []
    if len(values) < 2:
        return ", ".join(values) or "the documented values"
    return f"{', '.join(values[:-1])} or {values[-1]}"


def _keys_at(model: type, loc: Sequence[str]) -> list[str]:
    """The keys of the section at ``loc`` (through lists and mappings) of ``model``."""
    fields = _fields(_unwrap(_type_at(model, loc)))
    return list(fields) if fields is not None else []


def _type_at(model: Any, loc: Sequence[str]) -> Any:
    kind = model
    for part in loc:
        kind = _unwrap(kind)
        fields = _fields(kind)
        if fields is not None:
            kind = fields.get(part)
        elif get_origin(kind) in (list, tuple):
            kind = get_args(kind)[0]
        elif get_origin(kind) is dict:
            kind = get_args(kind)[1]
        else:
            return None
        if kind is None:
            return None
    return kind


def _unwrap(kind: Any) -> Any:
    """``X`` of ``Annotated[X, ...]`` and of ``X | None``."""
    while True:
        if get_origin(kind) is Annotated:
            kind = get_args(kind)[0]
            continue
        args = [a for a in get_args(kind) if a is not type(None)]
        if get_origin(kind) is not Literal and len(args) == 1 and type(None) in get_args(kind):
            kind = args[0]
            continue
        return kind


def _fields(kind: Any) -> dict[str, Any] | None:
    """A section's keys and their types: a struct's, or a dataclass's."""
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return {field.name: field.type for field in msgspec.structs.fields(kind)}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind, include_extras=True)
        return {field.name: hints[field.name] for field in dataclasses.fields(kind)}
    return None
