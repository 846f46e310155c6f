"""vLLM's stats lines of every era, with and without its (ANSI-coloured) process tag."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.engines import registry, sglang_startup
from exporter.engines.events import ServerArgsEvent
from exporter.engines.record import LogLine, StatsRecord, Unrecognized
from exporter.engines.vllm import MAX_PENDING, VllmParser
from exporter.parse.pipeline import LineProcessor
from tests.support.sinks import ListSink

NOW = datetime(2026, 5, 6, 12, 0, tzinfo=timezone.utc)
TAG = "(APIServer pid=1) "
ANSI_TAG = "\x1b[0;36m(APIServer pid=1)\x1b[0;0m "
ENGINE = (
    "INFO 05-06 06:11:23 [loggers.py:271] Engine 000: Avg prompt throughput: 2841.7 tokens/s, "
    "Avg generation throughput: 1631.4 tokens/s, Running: 24 reqs, Waiting: 3 reqs, "
    "GPU KV cache usage: 31.6%, Prefix cache hit rate: 42.8%"
)
# (era, spec line body, accept length, drafts, accept rate, per position)
ERAS = [
    (
        "current",
        "Mean acceptance length: 2.71, Accepted throughput: 1026.00 tokens/s, Drafted "
        "throughput: 1800.00 tokens/s, Accepted: 10260 tokens, Drafted: 18000 tokens, "
        "Per-position acceptance rate: 0.780, 0.560, 0.370, Avg Draft acceptance rate: 57.0%",
        2.71,
        6000,
        0.57,
        (0.78, 0.56, 0.37),
    ),
    (
        "2025 interim",
        "Draft acceptance rate: 88.8%, Mean acceptance length: 5.44, Accepted throughput: 4.37 "
        "tokens/s, Drafted throughput: 4.92 tokens/s, Accepted: 262 tokens, Drafted: 295 tokens, "
        "Per-position acceptance rate: 0.983, 0.949, 0.915, 0.881, 0.712",
        5.44,
        59,
        262 / 295,
        (0.983, 0.949, 0.915, 0.881, 0.712),
    ),
    (
        "0.8.5 to 0.10",
        "Draft acceptance rate: 57.0%, Mean acceptance length: 2.71, Accepted: 5130 tokens, "
        "Drafted: 9000 tokens, Per-position acceptance rate: 0.780, 0.560, 0.370",
        2.71,
        3000,
        0.57,
        (0.78, 0.56, 0.37),
    ),
    (
        "first V1",
        "Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens",
        None,
        None,
        1.0,
        None,
    ),
]


def spec(body: str, stamp: str = "05-06 06:11:23") -> str:
    return f"INFO {stamp} [metrics.py:101] SpecDecoding metrics: {body}"


def feed(*lines: str) -> list[StatsRecord | Unrecognized | LogLine]:
    parser = VllmParser(now=NOW)
    out = [result for line in lines for result in parser.feed(line)]
    return out + parser.flush()


@pytest.mark.parametrize("tag", ["", TAG, ANSI_TAG], ids=["untagged", "tagged", "ansi"])
@pytest.mark.parametrize("era", ERAS, ids=[era[0] for era in ERAS])
def test_every_era_pairs_the_engine_line_with_its_spec_line(
    era: tuple[str, str, float | None, int | None, float, tuple[float, ...] | None], tag: str
) -> None:
    _, body, length, drafts, rate, positions = era
    sink = ListSink()
    processor = LineProcessor(sink, "vllm")
    processor.process([(tag + ENGINE).encode(), (tag + spec(body)).encode()])
    processor.finish()
    assert sink.unrecognized == []
    [record] = sink.records
    assert record.engine == "vllm"
    assert record.time is not None and record.time.endswith("-05-06T06:11:23")
    assert (record.running_requests, record.queued_requests) == (24, 3)
    assert record.gen_throughput == 1631.4
    assert record.token_usage == pytest.approx(0.316)
    assert record.dp_rank == 0
    assert record.accept_length == length
    assert record.draft_counts is not None
    assert record.draft_counts.drafts == drafts
    assert record.accept_rate == pytest.approx(rate)
    assert record.draft_counts.accept_rate_by_position == positions


def test_nothing_accepted_is_accept_length_one_even_where_the_line_has_no_length() -> None:
    [record] = feed(spec("Draft acceptance rate: 0.0%, Accepted: 0 tokens, Drafted: 900 tokens"))
    assert isinstance(record, StatsRecord)
    assert record.accept_length == 1.0
    assert record.accept_rate == 0.0


def test_v0_engine_line_and_aggregated_engines_are_read() -> None:
    v0 = (
        "INFO 05-06 06:11:13 metrics.py:467] Avg prompt throughput: 2841.7 tokens/s, Avg "
        "generation throughput: 1631.4 tokens/s, Running: 24 reqs, Swapped: 0 reqs, Pending: 5 "
        "reqs, GPU KV cache usage: 31.6%, CPU KV cache usage: 0.0%."
    )
    aggregated = TAG + ENGINE.replace("Engine 000:", "2 Engines Aggregated:")
    first, second = feed(v0, aggregated)
    assert isinstance(first, StatsRecord) and isinstance(second, StatsRecord)
    assert (first.queued_requests, first.dp_rank, first.accept_length) == (5, None, None)
    assert (second.running_requests, second.dp_rank) == (24, None)


def test_engine_line_without_spec_line_is_a_window_of_its_own_once_the_next_one_comes() -> None:
    parser = VllmParser(now=NOW)
    assert parser.feed(ENGINE) == []  # held: its spec line may follow
    later = ENGINE.replace("06:11:23", "06:11:33").replace("Running: 24", "Running: 7")
    [first] = parser.feed(later)
    assert isinstance(first, StatsRecord)
    assert (first.running_requests, first.accept_length) == (24, None)
    [second] = parser.flush()
    assert isinstance(second, StatsRecord) and second.running_requests == 7


@pytest.mark.parametrize(
    ("field", "value"),
    [("Running: 24", "Running: -18"), ("Waiting: 3", "Waiting: -1"), ("1631.4", "-1631.4")],
)
def test_an_engine_line_with_a_negative_figure_is_format_drift(field: str, value: str) -> None:
    """No figure of the engine line can be negative: one that is would have no load band
    (``report`` raised on it) and no place in a gauge, so the line is drift, counted."""
    [result] = feed(ENGINE.replace(field, value))
    assert isinstance(result, Unrecognized) and result.reason == "bad_value"


def test_an_engine_line_before_an_idle_stretch_is_its_own_window_at_its_own_time() -> None:
    """Idle intervals are logged at DEBUG: the next INFO line may come an hour later. The
    busy interval before it, with no drafts to log, is still a window, stamped when it was."""
    parser = VllmParser(now=NOW)
    parser.feed(ENGINE)
    an_hour_later = ENGINE.replace("06:11:23", "07:11:23")
    [earlier] = parser.feed(an_hour_later)
    assert isinstance(earlier, StatsRecord)
    assert earlier.time == "2026-05-06T06:11:23" and earlier.running_requests == 24
    assert earlier.accept_length is None


def test_a_spec_line_logged_long_after_the_engine_line_is_not_paired_with_it() -> None:
    _, body, *_ = ERAS[0]
    parser = VllmParser(now=NOW)
    parser.feed(ENGINE)
    engine, alone = parser.feed(spec(body, "05-06 06:15:00"))
    assert isinstance(engine, StatsRecord) and isinstance(alone, StatsRecord)
    assert engine.accept_length is None and engine.running_requests == 24
    assert alone.running_requests is None and alone.accept_length == 2.71


def test_prompt_text_echoing_a_stats_line_is_never_a_record() -> None:
    _, body, *_ = ERAS[0]
    echoed = (
        f"{TAG}INFO 05-06 06:11:23 [logger.py:40] Received request chatcmpl-1: prompt: "
        f"'SpecDecoding metrics: {body}'"
    )
    assert feed(echoed) == []


@pytest.mark.parametrize(
    "body",
    [
        "Mean acceptance length: 2.71, Accepted: 10 tokens",  # no Drafted
        "Accepted: 900 tokens, Drafted: 10 tokens",  # more accepted than drafted
        "Mean acceptance length: x, Accepted: 1 tokens, Drafted: 3 tokens",
    ],
)
def test_a_spec_line_that_does_not_add_up_is_format_drift(body: str) -> None:
    [result] = feed(spec(body))
    assert isinstance(result, Unrecognized)


def test_a_year_is_chosen_that_puts_the_stamp_in_the_past() -> None:
    parser = VllmParser(now=datetime(2026, 1, 2, tzinfo=timezone.utc))
    [record] = parser.feed(spec("Accepted: 0 tokens, Drafted: 3 tokens", "12-31 23:59:50"))
    assert isinstance(record, StatsRecord) and record.time == "2025-12-31T23:59:50"


def test_auto_detection_decides_once_per_source() -> None:
    _, body, *_ = ERAS[0]
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([b"some startup chatter", (TAG + ENGINE).encode()])
    assert processor.engine == "vllm"
    processor.process([(TAG + spec(body)).encode()])
    assert [record.accept_length for record in sink.records] == [2.71]
    # A stats line SGLang formatted later on is SGLang's, read beside (two servers may share
    # the file: docs/reliability.md), never a vLLM stats line: the source stays vLLM.
    processor.process([b"[2026-05-06 06:11:30 TP0] Decode batch, #running-req: 1, accept len: 2.0"])
    assert processor.engine == "vllm"
    assert [(r.engine, r.accept_length) for r in sink.records] == [("vllm", 2.71), ("sglang", 2.0)]


def test_the_engine_configuration_line_is_a_startup_event_with_the_draft_setup() -> None:
    startup = (
        "(EngineCore_DP0 pid=88) INFO 05-06 06:00:02 [core.py:77] Initializing a V1 LLM engine "
        "(v0.11.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config="
        "SpeculativeConfig(method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', "
        "num_spec_tokens=3), tensor_parallel_size=1, enforce_eager=True, seed=0"
    )
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([startup.encode()])
    assert processor.engine == "vllm"
    [event] = sink.events
    assert event.engine == "vllm"
    # SGLang's event reader leaves vLLM's lines alone; vLLM's own reads them.
    assert sglang_startup.parse_event(event.message) is None
    parsed = registry.engine(event.engine).parse_event(event.message)
    assert isinstance(parsed, ServerArgsEvent)
    config = parsed.config
    assert (config.algorithm, config.num_steps, config.num_draft_tokens) == ("EAGLE3", 3, 4)
    assert config.draft_model_path == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert config.disable_cuda_graph is True


def test_a_prompt_naming_a_speculative_config_is_no_startup_event() -> None:
    echoed = (
        "(APIServer pid=1) INFO 05-06 06:11:23 [logger.py:40] Received request x: prompt: "
        "'Initializing a V1 LLM engine speculative_config=SpeculativeConfig(method='ngram', "
        "model='', num_spec_tokens=9)'"
    )
    sink = ListSink()
    LineProcessor(sink, "vllm").process([echoed.encode()])
    assert sink.events == []


FRAGMENTS = [
    TAG,
    ANSI_TAG,
    "INFO 05-06 06:11:23 [metrics.py:101] ",
    "INFO 13-45 99:99:99 [x.py:1] ",
    "SpecDecoding metrics: ",
    "Engine 000: ",
    "Avg prompt throughput: 1.0 tokens/s, ",
    "Avg generation throughput: ",
    "Mean acceptance length: ",
    "Accepted: ",
    "Drafted: ",
    "Per-position acceptance rate: ",
    "Running: ",
    "nan",
    "inf",
    "1e400",
    "-3",
    "0.5",
    "7",
    " tokens",
    " reqs",
    "%",
    ", ",
]


@given(st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join), max_size=6))
def test_hostile_lines_never_raise_and_never_give_impossible_values(lines: list[str]) -> None:
    for result in feed(*lines):
        if isinstance(result, StatsRecord):
            for value in (result.accept_length, result.accept_rate, result.gen_throughput):
                assert value is None or value == value  # no NaN exported
            assert result.accept_rate is None or 0 <= result.accept_rate <= 1
            for count in (result.running_requests, result.queued_requests, result.gen_throughput):
                assert count is None or count >= 0
            counts = result.draft_counts
            positions = None if counts is None else counts.accept_rate_by_position
            assert positions is None or len(positions) <= 32


def test_a_prompt_quoting_vllm_text_does_not_switch_an_sglang_source() -> None:
    echo = (
        "[2026-05-06 06:11:20 TP0] Receive: obj=GenerateReqInput(text='why does my log say "
        "SpecDecoding metrics: Mean acceptance length: 9.99 and Avg generation throughput?')"
    )
    decode = (
        "[2026-05-06 06:11:21 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
        "accept len: 2.50, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 310.00, "
        "#queue-req: 0"
    )
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([echo.encode(), b"SpecDecoding metrics: Mean acceptance length: 9.99"])
    assert processor.engine is None
    processor.process([decode.encode()])
    assert processor.engine == "sglang"
    assert [record.accept_length for record in sink.records] == [2.5]


def test_a_vllm_request_quoting_sglang_text_does_not_switch_a_vllm_source() -> None:
    echo = (
        TAG + "INFO 05-06 06:11:20 [logger.py:41] Received request cmpl-1: prompt: "
        "'[2026-05-06 06:11:21 TP0] Decode batch, #running-req: 1, accept len: 1.00'"
    )
    sink = ListSink()
    processor = LineProcessor(sink)
    processor.process([echo.encode(), (TAG + ENGINE).encode()])
    assert processor.engine == "vllm"


# vLLM's own format strings (v1/metrics/loggers.py, v1/spec_decode/metrics.py), filled as a
# data-parallel rank's API server fills them: under --data-parallel-multi-port-external-lb each
# rank has an API server process of its own, APIServer_DP<rank>, all writing to one output.
ENGINE_FORMAT = (
    "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
    "Running: %d reqs, Waiting: %d reqs, %s KV cache usage: %.1f%%"
)
SPEC_FORMAT = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
    "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%"
)


def dp_engine(rank: int, running: int, stamp: str = "05-06 06:11:23") -> str:
    body = ENGINE_FORMAT % (120.0, 900.0 + rank, running, 0, "GPU", 40.0)
    return f"(APIServer_DP{rank} pid={300 + rank}) INFO {stamp} [loggers.py:336] " + (
        f"Engine {rank:03d}: {body}"
    )


def dp_spec(rank: int, accepted: int, stamp: str = "05-06 06:11:23") -> str:
    drafts, draft_tokens = 1000, 3000
    rate = accepted / draft_tokens
    body = SPEC_FORMAT % (
        1 + accepted / drafts,
        accepted / 10,
        draft_tokens / 10,
        accepted,
        draft_tokens,
        ", ".join(f"{rate:.3f}" for _ in range(3)),
        rate * 100,
    )
    return f"(APIServer_DP{rank} pid={300 + rank}) INFO {stamp} [metrics.py:120] {body}"


def by_rank(
    records: list[StatsRecord | Unrecognized | LogLine],
) -> dict[int | None, tuple[int | None, float | None]]:
    assert all(isinstance(r, StatsRecord) for r in records)
    return {
        r.dp_rank: (r.running_requests, r.accept_length)
        for r in records
        if isinstance(r, StatsRecord)
    }


def test_two_dp_ranks_interleaved_pair_each_engine_line_with_its_own_spec_line() -> None:
    """Two API servers write to one log: both engine lines can come before either spec line,
    and the spec line names no engine, only its process does."""
    records = feed(dp_engine(0, 20), dp_engine(1, 12), dp_spec(0, 1800), dp_spec(1, 0))
    assert len(records) == 2
    assert by_rank(records) == {0: (20, 2.8), 1: (12, 1.0)}


def test_a_rank_without_drafts_this_interval_leaves_the_other_ranks_pair_intact() -> None:
    records = feed(dp_engine(0, 20), dp_engine(1, 12), dp_spec(1, 600))
    assert len(records) == 2
    assert by_rank(records) == {0: (20, None), 1: (12, 1.6)}


def test_one_process_logging_every_engine_pairs_each_in_turn() -> None:
    """With --api-server-count 1 one API server logs every engine, each engine's pair in
    turn, under one process tag."""
    one = [
        line.replace(f"APIServer_DP{rank} pid={300 + rank}", "APIServer pid=300")
        for rank, accepted in ((0, 1800), (1, 0))
        for line in (dp_engine(rank, 20 - 8 * rank), dp_spec(rank, accepted))
    ]
    assert by_rank(feed(*one)) == {0: (20, 2.8), 1: (12, 1.0)}


def test_engine_lines_held_for_spec_lines_are_bounded_by_process() -> None:
    """Every process tag holds its engine line until its spec line: a log naming more
    processes than any launch runs lets the oldest go as windows of their own."""
    parser = VllmParser(now=NOW)
    released = [r for rank in range(MAX_PENDING + 3) for r in parser.feed(dp_engine(rank, 5))]
    assert [r.dp_rank for r in released if isinstance(r, StatsRecord)] == [0, 1, 2]
    assert len(parser.flush()) == MAX_PENDING
