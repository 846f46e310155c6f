"""The recorded file times that order the run (``tests/support/durations.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.durations import from_junit, main, recorded

_REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_slow" name="test_a" time="40.5"/>
<testcase classname="tests.test_quick" name="test_b" time="0.25"/>
<testcase classname="tests.test_slow" name="test_c[x]" time="1.5"/>
<testcase classname="tests.test_quick" name="test_d" time="0.25"/>
</testsuite></testsuites>
"""


def test_a_files_time_is_its_tests_summed_longest_first(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(_REPORT, encoding="utf-8")
    assert list(from_junit(report).items()) == [("test_slow.py", 42.0), ("test_quick.py", 0.5)]


def test_the_command_prints_what_the_run_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.xml"
    report.write_text(_REPORT, encoding="utf-8")
    assert main([str(report)]) == 0
    assert '"test_slow.py": 42.0' in capsys.readouterr().out
    assert main([]) == 2


def test_the_recorded_times_name_only_test_files_that_exist() -> None:
    """A renamed file keeps its place only if its time is recorded again."""
    tests = Path(__file__).parent
    missing = [name for name in recorded() if not (tests / name).is_file()]
    assert not missing, f"tests/durations.json names files that are gone: {missing}"
