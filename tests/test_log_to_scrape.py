"""A log written in pieces, read pass by pass through the daemon's chain to a scrape.

The tailer is stepped with ``poll()``, so "nothing counted yet" is shown after a pass that
certainly read the partial bytes, not guessed after a sleep.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.files import append
from tests.support.loglines import VLLM_START, cri, decode, decode_line, startup, vllm_interval
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


def test_a_node_moved_to_another_engine_shows_only_the_new_servers_windows(
    tmp_path: Path,
) -> None:
    """SGLang's windows carry no DP rank, vLLM's are Engine 000's: a vLLM start within a
    minute of SGLang's last window must not leave that window in the node's figures beside
    the new engine's collapsed drafter."""
    log = tmp_path / "server.log"
    log.write_text("\n".join([*startup(), *(decode(260 + 4 * i, 2.6, 0.53) for i in range(4))]))
    with stepped_target(log) as (tailer, scrape):
        tailer.poll()
        assert scrape().value("specwatch_accept_length") == 2.6
        append(log, "", VLLM_START, *vllm_interval(0))
        tailer.poll()
        s = scrape()
    assert s.values("specwatch_accept_length") == [1.0]  # one rank: the node's figures alone
    assert s.values("specwatch_running_requests") == [32]
