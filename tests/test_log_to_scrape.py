"""A log written in pieces, read pass by pass through the daemon's chain to a scrape.

The tailer is stepped with ``poll()``, so "nothing counted yet" is shown after a pass that
certainly read the partial bytes, not guessed after a sleep.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.files import append
from tests.support.loglines import cri, decode_line
from tests.support.tailing import stepped_target

DECODES = "specwatch_log_stats_lines_total"


def test_partial_line_is_held_until_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.touch()
    line = decode_line(2.0)
    with stepped_target(log) as (tailer, scrape):
        tailer.poll()
        append(log, raw=line[:60].encode())
        tailer.poll()
        tailer.poll()
        assert scrape().value("specwatch_log_lines_total") == 0
        append(log, raw=line[60:].encode() + b"\n")
        tailer.poll()
        s = scrape()
    assert s.value(DECODES, kind="decode") == 1
    assert s.value("specwatch_accept_length") == 2.0
    assert s.value("specwatch_log_unrecognized_stats_lines_total") == 0


def test_cri_partial_records_are_held_until_the_full_record(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.touch()
    line = decode_line(2.25)
    with stepped_target(log) as (tailer, scrape):
        tailer.poll()
        append(log, cri("stderr", "P", line[:50]))
        tailer.poll()
        assert scrape().value("specwatch_log_lines_total") == 0
        append(log, cri("stderr", "P", line[50:90]))
        tailer.poll()
        assert scrape().value("specwatch_log_lines_total") == 0
        append(log, cri("stderr", "F", line[90:]))
        tailer.poll()
        s = scrape()
    assert s.value(DECODES, kind="decode") == 1
    assert s.value("specwatch_accept_length") == 2.25
    assert s.value("specwatch_log_lines_total") == 1


def test_docker_chunks_are_held_until_the_one_ending_the_line(tmp_path: Path) -> None:
    log = tmp_path / "container-json.log"
    log.touch()
    line = decode_line(1.75)

    def record(text: str) -> str:
        return json.dumps({"log": text, "stream": "stderr", "time": "2026-02-23T00:14:33Z"})

    with stepped_target(log) as (tailer, scrape):
        tailer.poll()
        append(log, record(line[:70]))
        tailer.poll()
        assert scrape().value("specwatch_log_lines_total") == 0
        append(log, record(line[70:] + "\n"))
        tailer.poll()
        s = scrape()
    assert s.value(DECODES, kind="decode") == 1
    assert s.value("specwatch_accept_length") == 1.75
