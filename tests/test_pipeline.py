"""LineProcessor: raw bytes of one file stream in, records, drift, skips and events out."""

from __future__ import annotations

import json

import pytest

from exporter.engines.record import LogLine
from exporter.parse.pipeline import LineProcessor
from tests.support.loglines import VLLM_START, vllm_interval
from tests.support.sinks import ListSink
from tests.support.speclogs import server_args

DECODE = (
    "[2026-02-23 00:14:33 TP0] Decode batch, #running-req: 48, #token: 6460, token usage: 0.06, "
    "accept len: 1.00, accept rate: 0.25, cuda graph: True, gen throughput (token/s): 637.19, "
    "#queue-req: 32"
)
PREFILL = (
    "[2026-02-23 00:14:31 TP0] Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 512, "
    "token usage: 0.09, #running-req: 11, #queue-req: 0, input throughput (token/s): 8123.40, "
    "cuda graph: False"
)
ACCESS = '[2026-02-23 00:14:35] INFO:     10.0.0.7:51234 - "GET /metrics HTTP/1.1" 200 OK'


def run(lines: list[bytes]) -> ListSink:
    sink = ListSink()
    LineProcessor(sink).process(lines)
    return sink


def test_stats_lines_become_records_and_every_line_is_counted() -> None:
    sink = run([DECODE.encode(), ACCESS.encode(), PREFILL.encode(), b""])
    assert sink.lines == 4
    assert [r.kind for r in sink.records] == ["decode", "prefill"]
    assert sink.records[0].accept_length == 1.0
    assert sink.records[1].new_tokens == 2048


def test_unparseable_stats_line_is_reported_without_its_text() -> None:
    sink = run([b"[2026-02-23 00:14:33 TP0] Decode batch, #running-req: lots, #queue-req: 0"])
    assert sink.records == []
    assert sink.unrecognized == ["bad_value"]


def test_marker_line_with_invalid_utf8_is_skipped_and_counted() -> None:
    sink = run([DECODE.encode().replace(b"TP0", b"TP\xff"), DECODE.encode()])
    assert sink.skipped == ["invalid_utf8"]
    assert len(sink.records) == 1
    assert sink.lines == 2


def test_invalid_utf8_in_an_uninteresting_line_costs_nothing() -> None:
    sink = run([b"\xff\xfe binary junk", DECODE.encode()])
    assert sink.skipped == []
    assert len(sink.records) == 1


def test_crlf_ansi_nul_and_progress_bar_debris_around_stats_lines() -> None:
    sink = run(
        [
            DECODE.encode() + b"\r",
            b"\x1b[2K" + PREFILL.encode() + b"\x00",
            b"Capturing batches (bs=8):  50%|#####\r" + DECODE.encode(),
        ]
    )
    assert [r.kind for r in sink.records] == ["decode", "prefill", "decode"]
    assert all(r.gen_throughput == 637.19 for r in sink.records if r.kind == "decode")


@pytest.mark.parametrize("debris", ["Capturing batches:  50%|#####\r", "\x1b[2K", "\x00"])
def test_each_kind_of_debris_alone_gets_its_batch_cleaned(debris: str) -> None:
    """Only a batch holding debris is cleaned, so each kind must trigger it on its own."""
    sink = run([PREFILL.encode(), (debris + DECODE).encode(), ACCESS.encode()])
    assert [r.kind for r in sink.records] == ["prefill", "decode"]
    assert sink.records[1].gen_throughput == 637.19


def test_prompt_text_quoting_a_stats_line_is_not_a_record() -> None:
    finish = (
        "[2026-02-23 00:14:35] Finish: obj=GenerateReqInput(text='Decode batch, accept len: 9.99,"
        " cuda graph: True'), out={'meta_info': {'spec_verify_ct': 3}}"
    )
    sink = run([finish.encode()])
    assert sink.records == []
    assert sink.unrecognized == []
    assert sink.events == []


@pytest.mark.parametrize(
    "message",
    [
        "server_args=ServerArgs(model_path='m', speculative_algorithm='EAGLE')",
        "Load weight end. elapsed=1.02 s, type=LlamaForCausalLMEagle3, dtype=torch.bfloat16",
        "max_total_num_tokens=1183744, chunked_prefill_size=8192, max_running_requests=48",
        "The server is fired up and ready to roll!",
        "Max running requests is reset to 48 for speculative decoding.",
    ],
)
def test_startup_and_config_lines_are_delivered_as_events(message: str) -> None:
    sink = run([f"[2026-02-23 00:10:34 TP0] {message}".encode()])
    assert sink.events == [LogLine("2026-02-23T00:10:34", None, 0, message, "sglang")]


def test_request_logs_echoing_event_words_are_not_events() -> None:
    receive = (
        "[2026-02-23 00:14:35] Receive: obj=GenerateReqInput(text='print server_args= and "
        "Load weight end. please')"
    )
    access = '[2026-02-23 00:14:35] INFO:     1.2.3.4:5 - "GET /?q=server_args= HTTP/1.1" 404'
    sink = run([receive.encode(), access.encode()])
    assert sink.events == []


def test_event_lines_without_sglang_prefix_are_not_events() -> None:
    sink = run([b"server_args=ServerArgs(model_path='m')"])
    assert sink.events == []


def test_events_and_records_arrive_in_line_order() -> None:
    sink = run(
        [
            b"[2026-02-23 00:10:34 TP0] Load weight end. type=LlamaForCausalLMEagle3",
            DECODE.encode(),
            b"[2026-02-23 00:20:00 TP0] The server is fired up and ready to roll!",
            PREFILL.encode(),
        ]
    )
    assert sink.order == ["event", "record:decode", "event", "record:prefill"]


def test_cri_wrapped_log_counts_joined_lines_once() -> None:
    head = "2026-02-23T00:14:33.000000001Z stderr"
    sink = run(
        [
            f"{head} P {DECODE[:50]}".encode(),
            f"{head} F {DECODE[50:]}".encode(),
            f"{head} F {ACCESS}".encode(),
        ]
    )
    assert sink.lines == 2
    assert [r.running_requests for r in sink.records] == [48]


def test_docker_wrapped_log_yields_the_same_records_as_plain() -> None:
    wrapped = [
        json.dumps({"log": line + "\r\n", "stream": "stderr", "time": "2026-02-23T00:14:33Z"})
        for line in (DECODE, ACCESS, PREFILL)
    ]
    docker_sink = run([line.encode() for line in wrapped])
    plain_sink = run([DECODE.encode(), ACCESS.encode(), PREFILL.encode()])
    assert docker_sink.records == plain_sink.records
    assert docker_sink.lines == 3


def test_oversized_joined_line_is_reported_as_skipped() -> None:
    head = "2026-02-23T00:14:33Z stderr"
    piece = "x" * 60_000
    lines = [f"{head} P {piece}".encode()] * 20 + [f"{head} F end".encode(), DECODE.encode()]
    sink = run(lines)
    assert sink.skipped == ["too_long"]


def test_reset_after_rotation_detects_the_new_files_envelope() -> None:
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([f"2026-02-23T00:14:33Z stderr P {DECODE[:30]}".encode()])
    processor.reset()
    processor.process([DECODE.encode()])
    assert len(sink.records) == 1
    assert sink.records[0].running_requests == 48


@pytest.mark.parametrize("batches", [1, 2], ids=["one-batch", "batch-per-engine"])
def test_a_source_that_changes_engine_is_read_by_the_new_engine(batches: int) -> None:
    """A node moved from SGLang to vLLM, both writing the same file: from vLLM's first own
    line on, its lines are vLLM's records, not dropped as SGLang text."""
    sglang = [DECODE.encode(), PREFILL.encode()]
    vllm = [line.encode() for line in [VLLM_START, *vllm_interval(0), *vllm_interval(10)]]
    sink = ListSink()
    processor = LineProcessor(sink)
    for batch in [sglang + vllm] if batches == 1 else [sglang, vllm]:
        processor.process(batch)
    processor.finish()
    assert processor.engine == "vllm"
    assert [(r.engine, r.kind) for r in sink.records] == [
        ("sglang", "decode"),
        ("sglang", "prefill"),
        ("vllm", "decode"),
        ("vllm", "decode"),
    ]
    assert [r.accept_length for r in sink.records[2:]] == [1.0, 1.0]


@pytest.mark.parametrize("batches", [1, 2], ids=["one-batch", "batch-per-engine"])
def test_a_bulk_read_source_that_changes_engine_is_read_by_the_new_engine(batches: int) -> None:
    """The bulk reader's framed batches, long enough for SGLang's whole-batch reader: the
    batch that holds vLLM's start is read line by line, so the switch is seen there too."""
    sglang = [DECODE.encode()] * 40
    vllm = [line.encode() for line in [VLLM_START, *vllm_interval(0), *vllm_interval(10)]]
    sink = ListSink()
    processor = LineProcessor(sink)
    for batch in [sglang + vllm] if batches == 1 else [sglang, vllm]:
        processor.process_framed(b"\n".join([b"", *batch, b""]))
    processor.finish()
    assert processor.engine == "vllm"
    assert [r.engine for r in sink.records] == ["sglang"] * 40 + ["vllm"] * 2


def test_a_source_changing_to_sglang_0_5_23_switches_at_its_dict_of_server_args() -> None:
    """SGLang 0.5.23 logs its arguments as a dict (``server_args={...}``), not the
    ``ServerArgs(...)`` repr: a vLLM node moved to it switches at that line, and the line is
    read as the new run's configuration."""
    vllm = [VLLM_START, *vllm_interval(0)]
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([line.encode() for line in [*vllm, server_args("NGRAM"), DECODE]])
    processor.finish()
    assert processor.engine == "sglang"
    assert [(r.engine, r.kind) for r in sink.records] == [("vllm", "decode"), ("sglang", "decode")]
    assert [e.engine for e in sink.events][-1] == "sglang"
    assert "'speculative_algorithm': 'NGRAM'" in sink.events[-1].message


def test_a_source_changing_engine_reads_the_new_servers_arguments_line() -> None:
    """vLLM's API server logs its non-default args (the dynamic speculation schedule among
    them) before its engine starts: the switch happens there, so the schedule is not lost."""
    args = (
        "(APIServer pid=401) INFO 12-01 10:59:58 [startup.py:96] non-default args: {'model': "
        "'meta-llama/Llama-3.1-8B-Instruct', 'speculative_config': {'method': 'eagle3', "
        "'num_speculative_tokens': 3, 'num_speculative_tokens_per_batch_size': "
        "[[1, 8, 3], [9, 1024, 0]]}}"
    )
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([line.encode() for line in [DECODE, args, VLLM_START]])
    assert [(event.engine, event.message[:17]) for event in sink.events] == [
        ("vllm", "non-default args:"),
        ("vllm", "Initializing a V1"),
    ]
