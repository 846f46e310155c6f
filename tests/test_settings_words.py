"""The validation library's one-line errors, said in the words of a settings file's author.

msgspec says ``Expected `int`, got `str` - at `$.targets[0].scrape_interval```; a user reads
``targets.0.scrape_interval: must be a whole number``. ``exporter.settings.problem`` is the one
place that turns one into the other; these tests hold each kind of message msgspec writes (from
real validations, so a msgspec that words them otherwise fails here) and the listing of every
key at fault, which msgspec, stopping at the first, does not do itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import Meta

from exporter.config import build_config
from exporter.settings import ConfigError, Invalid, Problem, Strict, validate


class Inner(Strict, frozen=True):
    count: Annotated[int, Meta(ge=1, le=10)] = 1
    share: Annotated[float, Meta(gt=0, lt=1)] = 0.5
    word: Annotated[str, Meta(min_length=2, max_length=4)] = "ab"
    code: Annotated[str, Meta(pattern=r"^[a-z]+$")] = "a"
    kind: Literal["gauge", "counter"] = "gauge"
    on: bool = False

    def __post_init__(self) -> None:
        if self.word == "bad":
            raise ValueError("word: is not a word here")


class Outer(Strict, frozen=True):
    inner: Inner | None = None
    items: list[Inner] = msgspec.field(default_factory=list)
    tags: Annotated[list[str], Meta(min_length=1)] = msgspec.field(default_factory=lambda: ["x"])
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    path: Path | None = None
    needed: str = "x"

    def __post_init__(self) -> None:
        if self.needed == "both":
            raise ValueError("inner: and items cannot both be set")


def said(data: Any) -> list[tuple[str, str]]:
    with pytest.raises(Invalid) as caught:
        validate(Outer, data)
    return [(found.key, found.text) for found in caught.value.problems]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"inner": {"cuont": 2}}, ("inner.cuont", "unknown key (did you mean count?)")),
        ({"inner": {"zzz": 2}}, ("inner.zzz", "unknown key")),
        ({"inner": {"count": "many"}}, ("inner.count", "must be a whole number")),
        ({"inner": {"count": 2.5}}, ("inner.count", "must be a whole number")),
        ({"inner": {"share": "half"}}, ("inner.share", "must be a number")),
        ({"inner": {"word": 3}}, ("inner.word", "must be text")),
        ({"inner": {"on": "maybe"}}, ("inner.on", "must be true or false")),
        ({"tags": "x"}, ("tags", "must be a list")),
        ({"inner": 3}, ("inner", "must be a mapping of keys (count, share, word, code, kind, on)")),
        ({"labels": [1]}, ("labels", "must be a mapping")),
        ({"labels": {"a": 1}}, ("labels.a", "must be text")),
        ({"inner": {"count": 0}}, ("inner.count", "must be at least 1")),
        ({"inner": {"count": 11}}, ("inner.count", "must be at most 10")),
        ({"inner": {"share": 0}}, ("inner.share", "must be more than 0")),
        ({"inner": {"share": 1}}, ("inner.share", "must be less than 1")),
        ({"inner": {"share": math.nan}}, ("inner.share", "must be a finite number")),
        ({"inner": {"share": "1e400"}}, ("inner.share", "must be a finite number")),
        ({"inner": {"word": "a"}}, ("inner.word", "must be at least 2 characters")),
        ({"inner": {"word": "abcde"}}, ("inner.word", "must be at most 4 characters")),
        ({"tags": []}, ("tags", "must have at least 1 item")),
        ({"inner": {"code": "A"}}, ("inner.code", "must match ^[a-z]+$")),
        ({"inner": {"kind": "histogram"}}, ("inner.kind", "must be one of 'gauge' or 'counter'")),
        ({"items": [{}, {"count": 0}]}, ("items.1.count", "must be at least 1")),
        ({"path": ""}, ("path", "an empty path names no file")),
        ({"path": 3}, ("path", "must be a path (text)")),
        # A model's own check naming one of its keys is said under that key, however deep.
        ({"inner": {"word": "bad"}}, ("inner.word", "is not a word here")),
        ({"needed": "both"}, ("inner", "and items cannot both be set")),
        ([], ("(top level)", f"must be a mapping of keys ({', '.join(Outer.__struct_fields__)})")),
    ],
)
def test_each_kind_of_library_error_is_said_in_plain_words(
    data: Any, words: tuple[str, str]
) -> None:
    assert said(data) == [words]


def test_a_mapping_value_at_fault_is_named_by_its_key() -> None:
    """msgspec names no key of a mapping (``$.labels[...]``): the file's author, with a dozen
    users or labels, is told which one."""
    assert said({"labels": {"team": "a", "tier": 5}}) == [("labels.tier", "must be text")]
    assert said({"items": [{}, {"count": 0}], "labels": {"ok": [1]}})[1] == (
        "labels.ok",
        "must be text",
    )


def test_a_required_key_left_out_is_named() -> None:
    class Needs(Strict, frozen=True):
        name: str

    with pytest.raises(Invalid) as caught:
        validate(Needs, {})
    assert caught.value.problems == (Problem(("name",), "is required"),)


def test_every_key_at_fault_is_listed_not_only_the_first() -> None:
    data = {"inner": {"count": 0, "word": 5}, "tags": [], "bogus": 1}
    assert said(data) == [
        ("inner.count", "must be at least 1"),
        ("inner.word", "must be text"),
        ("tags", "must have at least 1 item"),
        ("bogus", "unknown key"),
    ]


def test_a_problem_the_listing_itself_caused_is_not_listed() -> None:
    """Taking ``tok_s`` out to look further leaves the baseline empty: "give one of" is the
    listing's doing, not the author's."""
    with pytest.raises(ConfigError) as caught:
        build_config({"targets": [{"log_files": ["a"], "baseline": {"tok_s": -1}}]})
    assert str(caught.value) == "targets.0.baseline.tok_s: must be more than 0 (config)"


@given(bound=st.integers(-(10**15), 10**15), as_float=st.booleans())
def test_a_bound_is_said_as_written(bound: int, as_float: bool) -> None:
    """msgspec writes a float bound as ``1.0``; the author wrote ``1``."""
    kind = float if as_float else int
    model = msgspec.defstruct(
        "Bounded", [("value", Annotated[kind, Meta(ge=bound)])], bases=(Strict,)
    )
    with pytest.raises(Invalid) as caught:
        validate(model, {"value": bound - 1})
    assert str(caught.value) == f"value: must be at least {bound}"


@given(
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(),
        st.text(max_size=8),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    ),
    key=st.sampled_from(
        ["stale_after", "max_line_bytes", "max_dp_ranks", "from_beginning", "listen", "targets"]
    ),
)
def test_any_value_of_a_key_is_refused_naming_the_key_without_the_librarys_words(
    key: str, value: object
) -> None:
    data: dict[str, Any] = {"targets": [{"log_files": ["a.log"]}], key: value}
    try:
        build_config(data)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(key), message
        for phrase in ("Expected `", "Object ", " - at `", "$.", "Input should"):
            assert phrase not in message
