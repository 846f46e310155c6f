"""Container envelopes and terminal debris around log lines (docs/configuration.md)."""

from __future__ import annotations

import json

import pytest

from exporter.parse.envelopes import EnvelopeDecoder, clean

STATS = "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 1, #queue-req: 0"


# --- clean ---------------------------------------------------------------------------------


def test_clean_strips_ansi_colour_codes() -> None:
    coloured = (
        '[2026-02-23 00:14:35] \x1b[32mINFO\x1b[0m:     10.0.0.7:1 - "GET / HTTP/1.1" \x1b[1m200'
    )
    assert clean(coloured) == '[2026-02-23 00:14:35] INFO:     10.0.0.7:1 - "GET / HTTP/1.1" 200'


def test_clean_keeps_only_the_last_carriage_return_update() -> None:
    bar = "Capturing batches (bs=1):  10%|#\rCapturing batches (bs=8):  50%|#####\r" + STATS
    assert clean(bar) == STATS


def test_clean_drops_the_cr_of_crlf_line_endings() -> None:
    assert clean(STATS + "\r") == STATS


def test_clean_removes_nul_bytes() -> None:
    assert clean("\x00\x00" + STATS + "\x00") == STATS


def test_clean_removes_cursor_and_erase_sequences() -> None:
    assert clean("\x1b[2K\x1b[1G" + STATS) == STATS


def test_clean_leaves_plain_text_unchanged() -> None:
    assert clean(STATS) == STATS


# --- detection -------------------------------------------------------------------------------


def cri(stream: str, tag: str, text: str) -> bytes:
    return f"2026-02-23T00:14:33.123456789Z {stream} {tag} {text}".encode()


def docker(text: str, stream: str = "stderr") -> bytes:
    return json.dumps({"log": text, "stream": stream, "time": "2026-02-23T00:14:33.1Z"}).encode()


def test_plain_lines_pass_through_unchanged() -> None:
    decoder = EnvelopeDecoder()
    lines = [STATS.encode(), b"", b"another line\r"]
    assert decoder.decode(lines) == lines
    assert decoder.kind == "plain"


def test_kind_is_detected_from_the_first_non_empty_line() -> None:
    decoder = EnvelopeDecoder()
    assert decoder.decode([b"", b"  "]) == [b"", b"  "]
    assert decoder.kind is None
    assert decoder.decode([cri("stderr", "F", STATS)]) == [STATS.encode()]
    assert decoder.kind == "cri"


# --- CRI ---------------------------------------------------------------------------------


def test_cri_full_records_yield_their_text() -> None:
    decoder = EnvelopeDecoder()
    out = decoder.decode([cri("stderr", "F", STATS), cri("stdout", "F", "access line")])
    assert out == [STATS.encode(), b"access line"]


def test_cri_partial_records_are_joined_until_the_full_record() -> None:
    decoder = EnvelopeDecoder()
    half = len(STATS) // 2
    out = decoder.decode([cri("stderr", "P", STATS[:half])])
    assert out == []
    out = decoder.decode([cri("stderr", "P", ""), cri("stderr", "F", STATS[half:])])
    assert out == [STATS.encode()]


def test_cri_empty_full_record_is_an_empty_line() -> None:
    decoder = EnvelopeDecoder()
    assert decoder.decode([cri("stdout", "F", "x"), b"2026-02-23T00:14:33Z stdout F"]) == [
        b"x",
        b"",
    ]


def test_cri_line_that_is_not_a_record_is_kept_after_the_pending_partial() -> None:
    decoder = EnvelopeDecoder()
    decoder.decode([cri("stderr", "F", "first")])
    out = decoder.decode([cri("stderr", "P", "half a line"), b"hand-written note"])
    assert out == [b"half a line", b"hand-written note"]


def test_cri_joined_line_over_the_cap_is_dropped_and_counted() -> None:
    decoder = EnvelopeDecoder(max_joined_bytes=10)
    out = decoder.decode(
        [
            cri("stderr", "P", "0123456789"),
            cri("stderr", "P", "abcdef"),
            cri("stderr", "F", "tail"),
            cri("stderr", "F", "next"),
        ]
    )
    assert out == [b"next"]
    assert decoder.oversized == 1


def test_cri_pieces_are_joined_per_stream_when_stdout_and_stderr_interleave() -> None:
    """The runtime writes each stream on its own: an access line may split a long stderr line."""
    decoder = EnvelopeDecoder()
    out = decoder.decode(
        [
            cri("stderr", "P", STATS[:30]),
            cri("stdout", "F", "access line"),
            cri("stderr", "P", STATS[30:60]),
            cri("stdout", "P", "second "),
            cri("stderr", "F", STATS[60:]),
            cri("stdout", "F", "access line"),
        ]
    )
    assert out == [b"access line", STATS.encode(), b"second access line"]


# --- Docker json-file --------------------------------------------------------------------


def test_docker_records_yield_their_log_text_without_newline() -> None:
    decoder = EnvelopeDecoder()
    out = decoder.decode([docker(STATS + "\n"), docker("access\n", "stdout")])
    assert out == [STATS.encode(), b"access"]
    assert decoder.kind == "docker"


def test_docker_chunks_without_newline_are_joined() -> None:
    decoder = EnvelopeDecoder()
    assert decoder.decode([docker(STATS[:20])]) == []
    assert decoder.decode([docker(STATS[20:] + "\n")]) == [STATS.encode()]


def test_docker_chunks_are_joined_per_stream() -> None:
    decoder = EnvelopeDecoder()
    out = decoder.decode(
        [docker(STATS[:25]), docker("access\n", "stdout"), docker(STATS[25:] + "\n")]
    )
    assert out == [b"access", STATS.encode()]


def test_docker_crlf_payload_keeps_its_cr_for_clean() -> None:
    decoder = EnvelopeDecoder()
    (line,) = decoder.decode([docker(STATS + "\r\n")])
    assert clean(line.decode()) == STATS


def test_docker_escaped_unicode_and_ansi_survive() -> None:
    decoder = EnvelopeDecoder()
    (line,) = decoder.decode([docker("\x1b[32mINFO\x1b[0m: caf\u00e9\n")])
    assert line.decode() == "\x1b[32mINFO\x1b[0m: caf\u00e9"


def test_docker_malformed_line_is_kept_as_text() -> None:
    decoder = EnvelopeDecoder()
    decoder.decode([docker("ok\n")])
    assert decoder.decode([b'{"log": broken']) == [b'{"log": broken']


# --- reset ------------------------------------------------------------------------------------


def test_reset_forgets_a_partial_line_and_redetects_the_kind() -> None:
    decoder = EnvelopeDecoder()
    decoder.decode([cri("stderr", "P", "never finished")])
    decoder.reset()
    assert decoder.kind is None
    assert decoder.decode([STATS.encode()]) == [STATS.encode()]
    assert decoder.kind == "plain"


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe\x00garbage",
        b'{"log":',
        b"2026-02-23T00:14:33Z stdout X text",
        b"\r\r\r",
        b"\x1b[",
    ],
)
def test_odd_first_lines_never_crash_detection(raw: bytes) -> None:
    decoder = EnvelopeDecoder()
    assert decoder.decode([raw, STATS.encode()])[-1] == STATS.encode()
