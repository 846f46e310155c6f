"""The user documentation as the tests read it: the README and the pages under ``docs/``."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.tools import REPO

README = REPO / "README.md"
DOC_PAGES = (README, *sorted((REPO / "docs").glob("*.md")))
RUNBOOK = REPO / "alerts" / "runbook.md"


def doc(name: str) -> str:
    """A page under ``docs/`` by file name."""
    return (REPO / "docs" / name).read_text(encoding="utf-8")


def all_docs() -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for path in DOC_PAGES}


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (any level), up to the next heading of that level or higher."""
    level, _, _ = heading.partition(" ")
    start = (f"\n{text}").index(f"\n{heading}\n") + len(heading) + 1
    ends = [
        i for i in (text.find(f"\n{'#' * n} ", start) for n in range(1, len(level) + 1)) if i != -1
    ]
    return text[start : min(ends)] if ends else text[start:]


def runbook_spans() -> list[str]:
    """The code spans of the runbook's prose, each on one line as a reader would type it."""
    prose = re.sub(r"^```.*?^```", "", RUNBOOK.read_text(), flags=re.MULTILINE | re.DOTALL)
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose)]


def runbook_queries() -> list[str]:
    """The PromQL quoted in the runbook: code spans naming a specwatch series or ``up``."""
    return [s for s in runbook_spans() if re.search(r"specwatch_|^up\{", s)]
