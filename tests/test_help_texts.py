"""Every HELP text is in the words of someone reading /metrics: what the value is, not how
specwatch works inside ("node moment") or the history of an engine's fields."""

from __future__ import annotations

import re

import pytest

from exporter.exposition.families import FAMILIES

# Words of specwatch's insides, and history that belongs in the docs' changelogs.
IN_HOUSE = re.compile(r"\bmoments?\b|\bchanged meaning\b|\b20\d\d\b", re.IGNORECASE)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_help_says_what_the_value_is_in_plain_words(name: str) -> None:
    _, help_text = FAMILIES[name]
    assert not IN_HOUSE.search(help_text), help_text
