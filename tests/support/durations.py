"""Each test file's wall time, so the run starts the longest files first.

``--dist loadfile`` gives each file to one worker; pytest-xdist then starts files with the most
tests first. Files that wait on real time (a Prometheus evaluating rules, a daemon following a
paced log) have few tests and long walls, so they started last and ran alone at the end while
the other workers had nothing left. ``tests/conftest.py`` orders files by the seconds recorded
in ``tests/durations.json`` instead (longest first), the classic longest-job-first schedule.

The figures only order the run: a stale or missing one costs minutes of wall, never a result.
``make durations`` runs the suite and writes them again from its JUnit report::

    python -m tests.support.durations report.xml > tests/durations.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"


def recorded() -> dict[str, float]:
    """Seconds per test file name (``test_x.py``), as last recorded."""
    try:
        loaded = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(name): float(seconds) for name, seconds in loaded.items()}


def from_junit(report: Path) -> dict[str, float]:
    """Each file's wall seconds, its tests' times summed (a module fixture's set-up counts
    in the first test that uses it, as a worker spends it)."""
    seconds: defaultdict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):
        module = case.get("classname", "").split(".")
        if len(module) >= 2 and module[0] == "tests":
            seconds[f"{module[1]}.py"] += float(case.get("time") or 0)
    longest_first = sorted(seconds.items(), key=lambda item: -item[1])
    return {name: round(total, 1) for name, total in longest_first}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.durations JUNIT_XML", file=sys.stderr)
        return 2
    print(json.dumps(from_junit(Path(argv[0])), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
