"""Decode and prefill stats lines of every SGLang era since v0.4.

Each line is written from the documented format of its era, with values chosen here; the
expected record is read off the line by hand.
"""

from __future__ import annotations

import pytest

from exporter.engines.record import LogLine, StatsRecord, Unrecognized
from exporter.engines.sglang import classify

P = "[2026-02-23 00:14:33 TP0] "


def record(line: str) -> StatsRecord:
    result = classify(line)
    assert isinstance(result, StatsRecord), result
    return result


def core(rec: StatsRecord) -> tuple[object, ...]:
    return (
        rec.kind,
        rec.running_requests,
        rec.queued_requests,
        rec.token_usage,
        rec.accept_length,
        rec.accept_rate,
        rec.cuda_graph,
        rec.gen_throughput,
    )


# --- decode eras ------------------------------------------------------------------------------


def test_early_2025_decode_without_speculation_has_no_spec_or_graph_fields() -> None:
    line = (
        "[2025-01-10 09:00:00 TP0] Decode batch. #running-req: 7, #token: 5120, "
        "token usage: 0.03, gen throughput (token/s): 512.40, #queue-req: 2"
    )
    rec = record(line)
    assert core(rec) == ("decode", 7, 2, 0.03, None, None, None, 512.40)
    assert rec.time == "2025-01-10T09:00:00"
    assert rec.tp_rank == 0


def test_accept_len_of_january_2025_before_gen_throughput() -> None:
    line = (
        "[2025-02-01 09:00:00 TP0] Decode batch. #running-req: 3, #token: 900, "
        "token usage: 0.01, accept len: 2.41, gen throughput (token/s): 240.10, #queue-req: 0"
    )
    assert core(record(line)) == ("decode", 3, 0, 0.01, 2.41, None, None, 240.10)


def test_march_2025_largest_len_and_trailing_separator() -> None:
    line = (
        "[2025-03-05 09:00:00 TP0] Decode batch. #running-req: 5, #token: 4000, "
        "token usage: 0.02, accept len: 3.10, gen throughput (token/s): 700.00, "
        "largest-len: 1830, #queue-req: 1, "
    )
    rec = record(line)
    assert core(rec) == ("decode", 5, 1, 0.02, 3.10, None, None, 700.00)
    assert rec.extra["largest_len"] == 1830


def test_may_2025_cuda_graph_field() -> None:
    line = (
        "[2025-06-02 10:15:07 TP0] Decode batch. #running-req: 12, #token: 18234, "
        "token usage: 0.09, accept len: 3.02, cuda graph: True, "
        "gen throughput (token/s): 1402.33, #queue-req: 0"
    )
    assert core(record(line)) == ("decode", 12, 0, 0.09, 3.02, None, True, 1402.33)


def test_july_2025_timestamp_suffix_is_kept_as_extra_and_not_mistaken_for_time() -> None:
    line = (
        "[2025-07-10 08:15:30 TP0] Decode batch. #running-req: 32, #token: 40960, "
        "token usage: 0.21, cuda graph: False, gen throughput (token/s): 2811.04, "
        "#queue-req: 3, timestamp: 2025-07-10T08:15:30.123456"
    )
    rec = record(line)
    assert core(rec) == ("decode", 32, 3, 0.21, None, None, False, 2811.04)
    assert rec.time == "2025-07-10T08:15:30"
    assert rec.extra["timestamp"] == "2025-07-10T08:15:30.123456"


def test_october_2025_accept_rate_with_trailing_separator() -> None:
    line = (
        "[2025-10-20 14:02:11 TP0] Decode batch. #running-req: 8, #token: 9120, "
        "token usage: 0.05, accept len: 2.96, accept rate: 0.74, cuda graph: True, "
        "gen throughput (token/s): 1188.40, #queue-req: 0, "
    )
    assert core(record(line)) == ("decode", 8, 0, 0.05, 2.96, 0.74, True, 1188.40)


def test_v0_5_4_header_with_forward_iteration() -> None:
    line = (
        "[2025-10-24 14:02:11 TP0] Decode batch [123456], #running-req: 2, #token: 300, "
        "token usage: 0.00, accept len: 1.50, accept rate: 0.38, cuda graph: True, "
        "gen throughput (token/s): 80.00, #queue-req: 0, "
    )
    rec = record(line)
    assert core(rec) == ("decode", 2, 0, 0.0, 1.5, 0.38, True, 80.0)
    assert rec.extra["forward_iter"] == 123456


def test_late_2025_comma_header_with_trailing_separator() -> None:
    line = (
        "[2025-12-15 09:00:41 TP0] Decode batch, #running-req: 46, #token: 34901, "
        "token usage: 0.19, cuda graph: False, gen throughput (token/s): 1447.08, "
        "#queue-req: 0, "
    )
    assert core(record(line)) == ("decode", 46, 0, 0.19, None, None, False, 1447.08)


def test_feb_2026_incident_line_of_a_dead_drafter() -> None:
    line = (
        "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 48, #token: 6460, "
        "token usage: 0.06, accept len: 1.00, accept rate: 0.25, cuda graph: True, "
        "gen throughput (token/s): 637.19, #queue-req: 32"
    )
    assert core(record(line)) == ("decode", 48, 32, 0.06, 1.0, 0.25, True, 637.19)


@pytest.mark.parametrize("device", ["cpu", "npu", "musa"])
def test_graph_label_of_other_devices_is_the_graph_flag(device: str) -> None:
    line = (
        f"{P}Decode batch, #running-req: 4, #token: 100, token usage: 0.01, "
        f"{device} graph: True, gen throughput (token/s): 50.00, #queue-req: 0"
    )
    rec = record(line)
    assert rec.cuda_graph is True
    assert rec.extra["graph_device"] == device


def test_hybrid_swa_line_takes_token_usage_from_its_fullest_pool() -> None:
    line = (
        "[2026-02-23 00:17:45] Decode batch, #running-req: 8, #full token: 20480, "
        "full token usage: 0.05, #swa token: 8192, swa token usage: 0.03, accept len: 3.12, "
        "accept rate: 0.78, cuda graph: True, gen throughput (token/s): 905.50, #queue-req: 0"
    )
    rec = record(line)
    assert core(rec) == ("decode", 8, 0, 0.05, 3.12, 0.78, True, 905.50)
    assert rec.tp_rank is None
    assert rec.extra["swa_token_usage"] == 0.03
    # The sliding-window pool fuller than the full-attention one: SGLang's own token_usage
    # (get_max_pool_usage) is the fullest pool's, and so is specwatch's.
    fuller = record(line.replace("swa token usage: 0.03", "swa token usage: 0.91"))
    assert fuller.token_usage == 0.91


def test_hybrid_mamba_line_takes_token_usage_from_its_fullest_pool() -> None:
    line = (
        f"{P}Decode batch, #running-req: 6, #full token: 7000, full token usage: 0.12, "
        "mamba num: 6, mamba usage: 0.40, cuda graph: True, "
        "gen throughput (token/s): 300.00, #queue-req: 1"
    )
    rec = record(line)
    assert rec.token_usage == 0.40  # the mamba state pool, fuller than the tokens' 0.12
    assert rec.extra["mamba_usage"] == 0.40


def test_pd_decode_worker_fields_between_spec_and_graph() -> None:
    line = (
        "[2026-02-23 00:18:02 DP0 TP0 EP0] Decode batch, #running-req: 64, #token: 123456, "
        "token usage: 0.45, accept len: 2.90, accept rate: 0.73, pre-allocated usage: 0.05, "
        "#prealloc-req: 2, #transfer-req: 1, #retracted-req: 0, cuda graph: True, "
        "gen throughput (token/s): 2048.11, #queue-req: 0"
    )
    rec = record(line)
    assert core(rec) == ("decode", 64, 0, 0.45, 2.90, 0.73, True, 2048.11)
    assert (rec.dp_rank, rec.tp_rank) == (0, 0)
    assert rec.extra["preallocated_usage"] == 0.05
    assert rec.extra["transfer_requests"] == 1
    assert rec.extra["retracted_requests"] == 0


def test_epd_waiting_image_field_is_ignored() -> None:
    line = (
        f"{P}Decode batch, #running-req: 3, #token: 10, token usage: 0.00, accept len: 2.00, "
        "accept rate: 0.50, waiting-image-req: 4, cuda graph: True, "
        "gen throughput (token/s): 99.00, #queue-req: 0"
    )
    assert core(record(line)) == ("decode", 3, 0, 0.0, 2.0, 0.5, True, 99.0)


def test_mfu_and_occupancy_suffixes_after_queue() -> None:
    line = (
        f"{P}Decode batch, #running-req: 16, #token: 20000, token usage: 0.10, "
        "accept len: 2.50, accept rate: 0.50, cuda graph: True, "
        "gen throughput (token/s): 1500.00, #queue-req: 0, "
        "est. decode TFLOPS/s (per GPU): 120.50, est. read BW (GB/s per GPU): 2300.10, "
        "est. write BW (GB/s per GPU): 20.30, fwd occupancy: 87.50%"
    )
    rec = record(line)
    assert core(rec) == ("decode", 16, 0, 0.10, 2.5, 0.5, True, 1500.0)
    assert rec.extra["fwd_occupancy"] == pytest.approx(0.875)


def test_dspark_cap_and_block_accept_len() -> None:
    line = (
        f"{P}Decode batch, #running-req: 2, #token: 500, token usage: 0.01, accept len: 4.20, "
        "accept rate: 0.60, cap len: 6.00, block accept len: 3.80, cuda graph: True, "
        "gen throughput (token/s): 210.00, #queue-req: 0"
    )
    rec = record(line)
    assert rec.accept_length == 4.2
    assert (rec.extra["cap_length"], rec.extra["block_accept_length"]) == (6.0, 3.8)


def test_cached_token_right_after_running_req_in_a_decode_line() -> None:
    line = (
        f"{P}Decode batch, #running-req: 10, #cached-token: 4096, #token: 9000, "
        "token usage: 0.04, accept len: 2.00, accept rate: 0.33, cuda graph: True, "
        "gen throughput (token/s): 400.00, #queue-req: 0"
    )
    rec = record(line)
    assert core(rec) == ("decode", 10, 0, 0.04, 2.0, 0.33, True, 400.0)
    assert rec.cached_tokens == 4096


def test_fields_are_read_by_name_not_position() -> None:
    line = (
        f"{P}Decode batch, #queue-req: 5, gen throughput (token/s): 10.00, cuda graph: False, "
        "accept rate: 0.10, accept len: 1.30, token usage: 0.70, #running-req: 9"
    )
    assert core(record(line)) == ("decode", 9, 5, 0.70, 1.3, 0.10, False, 10.0)


# --- prefill eras -----------------------------------------------------------------------------


def prefill_core(rec: StatsRecord) -> tuple[object, ...]:
    return (
        rec.kind,
        rec.new_tokens,
        rec.cached_tokens,
        rec.token_usage,
        rec.running_requests,
        rec.queued_requests,
        rec.input_throughput,
        rec.cuda_graph,
    )


def test_early_2025_prefill_with_cache_hit_rate_percentage() -> None:
    line = (
        "[2025-02-20 10:00:00 TP0] Prefill batch. #new-seq: 2, #new-token: 3000, "
        "#cached-token: 1000, cache hit rate: 25.00%, token usage: 0.02, #running-req: 4, "
        "#queue-req: 1"
    )
    rec = record(line)
    assert prefill_core(rec) == ("prefill", 3000, 1000, 0.02, 4, 1, None, None)
    assert rec.extra["cache_hit_rate"] == pytest.approx(0.25)
    assert rec.extra["new_seqs"] == 2


def test_mid_2025_prefill_with_trailing_separator() -> None:
    line = (
        "[2025-08-01 10:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 512, "
        "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, "
    )
    assert prefill_core(record(line)) == ("prefill", 512, 0, 0.01, 0, 0, None, None)


def test_jan_2026_prefill_input_throughput_before_cuda_graph() -> None:
    line = (
        "[2026-02-23 00:14:31 TP0] Prefill batch, #new-seq: 1, #new-token: 2048, "
        "#cached-token: 512, token usage: 0.09, #running-req: 11, #queue-req: 0, "
        "input throughput (token/s): 8123.40, cuda graph: False"
    )
    rec = record(line)
    assert prefill_core(rec) == ("prefill", 2048, 512, 0.09, 11, 0, 8123.40, False)


def test_april_2026_prefill_graph_before_throughput_and_pending_tokens() -> None:
    line = (
        "[2026-04-20 11:03:09 TP0] Prefill batch, #new-seq: 2, #new-token: 3210, "
        "#cached-token: 0, token usage: 0.12, #running-req: 20, #queue-req: 1, "
        "#pending-token: 1024, cuda graph: True, input throughput (token/s): 15422.10"
    )
    rec = record(line)
    assert prefill_core(rec) == ("prefill", 3210, 0, 0.12, 20, 1, 15422.10, True)
    assert rec.extra["pending_tokens"] == 1024


def test_v0_5_4_prefill_header_with_forward_iteration() -> None:
    line = (
        "[2025-10-24 14:02:10 TP0] Prefill batch [123400], #new-seq: 1, #new-token: 700, "
        "#cached-token: 64, token usage: 0.01, #running-req: 1, #queue-req: 0, "
    )
    rec = record(line)
    assert prefill_core(rec) == ("prefill", 700, 64, 0.01, 1, 0, None, None)
    assert rec.extra["forward_iter"] == 123400


def test_v0_4_6_pd_prefill_worker_queues_end_with_a_space_not_a_separator() -> None:
    line = (
        "[2025-05-02 10:00:00 TP0] Prefill batch. #new-seq: 3, #new-token: 4096, "
        "#cached-token: 0, token usage: 0.05, #unbootstrapped-req: 2, #queue-req: 1, "
        "#transferring-req: 4 "
    )
    assert prefill_core(record(line)) == ("prefill", 4096, 0, 0.05, None, 1, None, None)


def test_swa_prefill_takes_token_usage_from_full_token_usage() -> None:
    line = (
        f"{P}Prefill batch, #new-seq: 1, #new-token: 40, #cached-token: 0, "
        "full token usage: 0.30, swa token usage: 0.10, #running-req: 0, #queue-req: 0, "
        "input throughput (token/s): 46.36, cuda graph: False"
    )
    rec = record(line)
    assert rec.token_usage == 0.30
    assert rec.input_throughput == 46.36


def test_pd_prefill_worker_queues_of_2026() -> None:
    line = (
        f"{P}Prefill batch, #new-seq: 4, #new-token: 8000, #cached-token: 100, "
        "token usage: 0.20, #running-req: 4, #queue-req: 2, #bootstrap-req: 3, "
        "#inflight-req: 1, input throughput (token/s): 9000.00, cuda graph: False"
    )
    rec = record(line)
    assert prefill_core(rec) == ("prefill", 8000, 100, 0.20, 4, 2, 9000.0, False)
    assert (rec.extra["bootstrap_requests"], rec.extra["inflight_requests"]) == (3, 1)


def test_prefill_with_milliseconds_and_dp_rank() -> None:
    line = (
        "[2026-05-02 09:41:10.250 DP2 TP4 EP4] Prefill batch, #new-seq: 1, #new-token: 1, "
        "#cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, "
        "cuda graph: False, input throughput (token/s): 0.05"
    )
    rec = record(line)
    assert (rec.time, rec.dp_rank, rec.tp_rank) == ("2026-05-02T09:41:10.250", 2, 4)


# --- what is not a record -------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # --log-requests echoes a prompt that quotes a stats line
        "[2026-02-23 00:14:35] Finish: obj=GenerateReqInput(text='Decode batch, accept len: "
        "9.99, cuda graph: True'), out={'text': 'Decode batch, #running-req: 1'}",
        # the words appear later in the message
        f"{P}Slow Decode batch, #running-req: 1, #queue-req: 0",
        f"{P}Retract requests because Decode batch, #running-req: 1 ran out of memory",
        # an unprefixed line (custom logging config, or a prompt on its own line)
        "Decode batch, #running-req: 1, accept len: 9.99, #queue-req: 0",
        # an access line
        '[2026-02-23 00:14:35] INFO:     10.0.0.7:51234 - "GET /metrics HTTP/1.1" 200 OK',
    ],
)
def test_stats_text_outside_the_start_of_an_sglang_message_is_not_a_stats_line(line: str) -> None:
    result = classify(line)
    assert result is None or isinstance(result, LogLine), result


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (f"{P}Decode batch, something went wrong", "no_fields"),
        (f"{P}Decode batch, foo: 1, bar: 2", "no_fields"),
        (f"{P}Decode batch, #running-req: many, #queue-req: 0", "bad_value"),
        (f"{P}Decode batch, #running-req: -18, #queue-req: 0", "bad_value"),
        (f"{P}Prefill batch, #new-seq: 1, #new-token: -5, #queue-req: 0", "bad_value"),
        (f"{P}Decode batch, #running-req: 3, accept len: n/a, #queue-req: 0", "bad_value"),
        (f"{P}Decode batch, #running-req: 3, cuda graph: maybe, #queue-req: 0", "bad_value"),
        (f"{P}Prefill batch, cache hit rate: 12.5, #queue-req: 0", "bad_value"),
        (f"{P}Decode batch: #running-req: 3", "header"),
        (f"{P}Decode batches, #running-req: 3", "header"),
        (f"{P}Prefill batch", "header"),
    ],
)
def test_a_stats_header_without_a_usable_record_is_unrecognized(line: str, reason: str) -> None:
    result = classify(line)
    assert isinstance(result, Unrecognized)
    assert result.reason == reason


def test_json_dict_has_every_record_key_with_null_for_missing_values() -> None:
    decode = record(
        f"{P}Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
        "gen throughput (token/s): 5.00, #queue-req: 0"
    ).to_json_dict()
    record_keys = {
        "time",
        "engine",
        "kind",
        "dp_rank",
        "tp_rank",
        "running_requests",
        "queued_requests",
        "token_usage",
        "accept_length",
        "accept_rate",
        "cuda_graph",
        "gen_throughput",
    }
    assert record_keys <= decode.keys()
    assert decode["engine"] == "sglang"
    assert decode["accept_length"] is None
    assert decode["cuda_graph"] is None
    prefill = record(
        f"{P}Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 0, token usage: 0.01, "
        "#running-req: 0, #queue-req: 0"
    ).to_json_dict()
    assert record_keys | {"new_tokens", "cached_tokens", "input_throughput"} <= prefill.keys()
    assert prefill["input_throughput"] is None
