"""SGLang's log prefix in every variant."""

from __future__ import annotations

import pytest

from exporter.engines.record import LogLine, StatsRecord
from exporter.engines.sglang import classify

# A message that is no stats line, so the pipeline's classifier hands back the line itself.
MESSAGE = "Load weight begin. avail mem=78.50 GB"


def split(text: str) -> LogLine:
    logged = classify(text)
    assert isinstance(logged, LogLine), logged
    return logged


def test_scheduler_prefix_with_tp_rank_gives_time_and_rank() -> None:
    assert split(f"[2026-02-23 00:14:33 TP0] {MESSAGE}") == LogLine(
        time="2026-02-23T00:14:33",
        dp_rank=None,
        tp_rank=0,
        message=MESSAGE,
        engine="sglang",
    )


def test_main_process_prefix_has_no_rank() -> None:
    logged = split("[2026-02-23 00:10:52] The server is fired up and ready to roll!")
    assert (logged.time, logged.dp_rank, logged.tp_rank) == ("2026-02-23T00:10:52", None, None)
    assert logged.message == "The server is fired up and ready to roll!"


def test_milliseconds_from_sglang_log_ms_are_kept_in_the_time() -> None:
    logged = split(f"[2026-02-23 00:14:33.042 TP1] {MESSAGE}")
    assert logged.time == "2026-02-23T00:14:33.042"
    assert logged.tp_rank == 1


def test_a_stats_line_carries_its_prefix_in_the_record() -> None:
    record = classify("[2026-02-23 00:14:33.042 DP1 TP1] Decode batch, #running-req: 1")
    assert isinstance(record, StatsRecord)
    assert (record.time, record.dp_rank, record.tp_rank) == ("2026-02-23T00:14:33.042", 1, 1)


@pytest.mark.parametrize(
    ("ranks", "dp", "tp"),
    [
        ("DP3 TP3 EP3", 3, 3),  # Feb 2026 order DP PP ATTN_CP MOE_DP TP EP, subset
        ("DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6", 1, 5),  # every part since 2026-02-13
        ("DP0 TP12 EP12 PP1", 0, 12),  # pre-Nov-2025 order DP TP EP PP
        ("TP7 EP7", None, 7),  # expert parallel without DP attention
        ("PP1 TP2", None, 2),
        ("DP2", 2, None),  # SGLANG_DP_RANK forced, tp_size 1
        ("MOE_DP4 TP6", None, 6),  # MOE_DP is not the DP rank
    ],
)
def test_rank_parts_are_read_by_name_in_any_order(
    ranks: str, dp: int | None, tp: int | None
) -> None:
    logged = split(f"[2026-02-23 00:14:33 {ranks}] {MESSAGE}")
    assert (logged.dp_rank, logged.tp_rank) == (dp, tp)


@pytest.mark.parametrize("tag", ["(SGLangEngine pid=41820)", "(pid=41820)"])
def test_ray_actor_tag_before_the_prefix_is_accepted(tag: str) -> None:
    # Ray names the actor when there is one; output of a plain task carries only its pid.
    logged = split(f"{tag} [2026-03-22 13:53:37 TP0] {MESSAGE}")
    assert logged.time == "2026-03-22T13:53:37"
    assert logged.message == MESSAGE


def test_ray_actor_tag_with_ip_and_repeat_note_leaves_the_plain_message() -> None:
    line = (
        "(SGLangEngine pid=41820, ip=10.0.0.3) [2026-03-22 13:53:37 DP1 TP1] "
        f"{MESSAGE} [repeated 7x across cluster]"
    )
    logged = split(line)
    assert logged.message == MESSAGE
    assert logged.dp_rank == 1


def test_a_repeat_note_does_not_spoil_the_last_stats_field() -> None:
    line = (
        "(SGLangEngine pid=41820, ip=10.0.0.3) [2026-03-22 13:53:37 DP1 TP1] "
        "Decode batch, #queue-req: 0 [repeated 7x across cluster]"
    )
    record = classify(line)
    assert isinstance(record, StatsRecord)
    assert (record.queued_requests, record.dp_rank) == (0, 1)


@pytest.mark.parametrize(
    "line",
    [
        "Decode batch, #running-req: 1, #queue-req: 0",  # no prefix at all
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3178',
        "INFO 02-23 00:14:33 [loggers.py:116] Engine 000: Avg generation throughput",  # vLLM
        "[2026-02-23] Decode batch, #running-req: 1",  # date only
        "[00:14:33 TP0] Decode batch, #running-req: 1",  # time only
        "[2026-02-23 00:14:33 tp0] Decode batch, #running-req: 1",  # lower-case rank
        "x [2026-02-23 00:14:33 TP0] Decode batch, #running-req: 1",  # prefix not at the start
        "",
    ],
)
def test_lines_not_formatted_by_sglang_have_no_prefix(line: str) -> None:
    assert classify(line) is None
