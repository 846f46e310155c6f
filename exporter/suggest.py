"""The nearest valid name to a mistyped one, for "did you mean" in one-line errors.

Beneath every layer and free of heavy imports: the command line's usage errors use it before
the settings models are imported, the settings files' errors after.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(word: str, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``known``, or nothing when none is close."""
    near = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""
