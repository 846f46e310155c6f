"""Findings from realistic SGLang logs of each broken server and from plain inputs.

Logs are written in SGLang's Feb 2026 line formats (stats lines and startup lines) and read
through the same line processor the daemon uses, so a finding here is a finding in production.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.analysis.findings import (
    SEVERITIES,
    DecodeSample,
    Observations,
    drafts_only_accept_rate,
    evaluate,
)
from exporter.commands.doctor import read_log
from exporter.engines.record import StatsRecord
from exporter.engines.server_config import ServerConfig
from exporter.state.evidence import Evidence
from tests.support.loglines import (
    collapsed_drafter,
    decode,
    metrics_disabled,
    mismatched_drafter,
    prefill,
    startup,
    undertrained_drafter,
    wrong_algorithm_flag,
)


def codes(lines: list[str], tmp_path: Path) -> set[str]:
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    log = read_log(str(path))
    observations = log.observations(log.config)
    return {finding.code for finding in evaluate(observations)}


def test_collapsed_drafter_names_the_running_cap(tmp_path: Path) -> None:
    found = codes(collapsed_drafter(), tmp_path)
    assert found == {"running_requests_capped"}


def test_wrong_flag_is_critical_from_startup_lines_alone(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("\n".join(wrong_algorithm_flag()) + "\n")
    log = read_log(str(path))
    findings = evaluate(log.observations(log.config))
    assert [f.code for f in findings] == ["eagle3_draft_with_eagle_algorithm"]
    finding = findings[0]
    assert finding.severity == "critical"
    assert "LlamaForCausalLMEagle3" in finding.seen
    assert "--speculative-algorithm EAGLE3" in finding.fix


def test_fixed_flag_is_clean(tmp_path: Path) -> None:
    assert codes(startup(algorithm="EAGLE3"), tmp_path) == set()


def test_undertrained_drafter_warns_graph_off_and_draft_tokens_wasted(tmp_path: Path) -> None:
    assert codes(undertrained_drafter(), tmp_path) == {
        "cuda_graph_disabled",
        "draft_tokens_excessive",
    }


def test_mismatched_drafter_is_not_blamed_on_the_flag(tmp_path: Path) -> None:
    assert "eagle3_draft_with_eagle_algorithm" not in codes(mismatched_drafter(), tmp_path)


def test_metrics_disabled_found_from_log_alone(tmp_path: Path) -> None:
    assert codes(metrics_disabled(), tmp_path) == {"metrics_endpoint_disabled"}


def test_disabled_cuda_graph_flag_is_found_before_any_window(tmp_path: Path) -> None:
    assert codes(startup(disable_cuda_graph=True), tmp_path) == {"cuda_graph_disabled"}


def test_requests_without_decode_lines_are_found(tmp_path: Path) -> None:
    lines = startup(log_level="info") + [prefill(100 + 30 * i) for i in range(6)]
    assert codes(lines, tmp_path) == {"decode_stats_not_logged"}


def test_health_probes_alone_are_not_traffic(tmp_path: Path) -> None:
    lines = startup() + [prefill(100 + 30 * i, new_tokens=1, running=0) for i in range(20)]
    assert codes(lines, tmp_path) == set()


def test_unparsable_stats_line_is_format_drift(tmp_path: Path) -> None:
    drifted = decode(300, 3.0, 0.7).replace("accept len: 3.00", "accept len: n/a")
    lines = [*metrics_disabled()[:-1], drifted]
    assert "log_format_unrecognized" in codes(lines, tmp_path)


def test_every_finding_code_has_its_readme_severity() -> None:
    assert SEVERITIES == {
        "server_crashed": "critical",
        "server_failing": "warning",
        "dp_rank_collapsed": "critical",
        "dp_rank_accept_length_low": "warning",
        "eagle3_draft_with_eagle_algorithm": "critical",
        "cuda_graph_disabled": "warning",
        "draft_tokens_excessive": "warning",
        "decode_stats_not_logged": "warning",
        "metrics_endpoint_disabled": "info",
        "log_format_unrecognized": "warning",
        "running_requests_capped": "warning",
        "running_requests_saturated": "info",
        "draft_positions_unprofitable": "info",
        "algorithm_unknown": "info",
        "adaptive_drafter_given_up": "warning",
        "requests_without_benefit": "warning",
        "drafting_off_below_baseline": "warning",
        "interleaved_servers": "warning",
    }


@pytest.mark.parametrize(
    ("length", "tokens", "rate"),
    [(1.0, 4, 0.0), (2.5, 16, 0.1), (4.0, 4, 1.0), (2.87, 4, 0.6233333333333333)],
)
def test_drafts_only_rate(length: float, tokens: int, rate: float) -> None:
    assert drafts_only_accept_rate(length, tokens) == pytest.approx(rate)


def test_drafts_only_rate_unknown_without_draft_tokens() -> None:
    assert drafts_only_accept_rate(2.0, None) is None
    assert drafts_only_accept_rate(2.0, 1) is None


def test_eagle3_finding_from_server_info_path_name_alone() -> None:
    config = ServerConfig(algorithm="EAGLE", draft_model_path="AQ-MedAI/Kimi-K2-Instruct-eagle3")
    findings = evaluate(Observations(config=config))
    assert [f.code for f in findings] == ["eagle3_draft_with_eagle_algorithm"]
    assert "names an EAGLE-3 model" in findings[0].seen


def test_known_eagle_draft_class_overrides_a_misleading_path_name() -> None:
    config = ServerConfig(
        algorithm="EAGLE",
        draft_model_path="org/not-eagle3-actually",
        draft_architecture="LlamaForCausalLMEagle",
    )
    assert evaluate(Observations(config=config)) == []


def test_eight_tokens_with_good_acceptance_is_not_excessive() -> None:
    config = ServerConfig(num_draft_tokens=8)
    windows = tuple(DecodeSample(accept_length=3.41, cuda_graph=True) for _ in range(5))
    assert evaluate(Observations(config=config, windows=windows)) == []


def test_one_window_without_graph_is_not_a_verdict() -> None:
    windows = (DecodeSample(accept_length=3.0, cuda_graph=False),)
    assert evaluate(Observations(windows=windows)) == []


def test_upstream_graph_share_is_used_without_log_windows() -> None:
    found = evaluate(Observations(cuda_graph_share=0.1))
    assert [f.code for f in found] == ["cuda_graph_disabled"]


def test_log_level_warning_hides_decode_stats() -> None:
    found = evaluate(Observations(config=ServerConfig(log_level="warning")))
    assert [f.code for f in found] == ["decode_stats_not_logged"]


def test_upstream_traffic_with_a_silent_log_is_found() -> None:
    evidence = Evidence(started_at=1000.0)
    quiet = evidence.observations(ServerConfig(), 1000.0 + 300, upstream_busy=True)
    assert [f.code for f in evaluate(quiet)] == ["decode_stats_not_logged"]
    idle = evidence.observations(ServerConfig(), 1000.0 + 300, upstream_busy=False)
    assert evaluate(idle) == []


DECODE = StatsRecord(kind="decode", cuda_graph=True, accept_length=3.0)
PREFILL = StatsRecord(kind="prefill", new_tokens=2048)


def test_an_old_log_caught_up_on_has_not_stopped_logging_decode_stats() -> None:
    """``run --from-beginning`` on a log last written 4459 s ago, whose last lines are a few
    prefills after its decode lines: every record is as old as the file, and the finding said
    "no decode stats line in the log for 4459 s" of a log that simply ended."""
    written, watched_from = 10_000.0, 10_000.0 + 4459
    evidence = Evidence(started_at=watched_from)
    evidence.add_records([DECODE] * 5 + [PREFILL] * 4, written)
    old = evidence.observations(ServerConfig(), watched_from + 30)
    assert old.prefills_without_decode == 4
    assert evaluate(old) == []
    # The server writes to it again, prefills alone: the silence counts from then.
    evidence.add_records([PREFILL], watched_from + 40)
    assert evaluate(evidence.observations(ServerConfig(), watched_from + 41)) == []
    evidence.add_records([PREFILL], watched_from + 160)
    (finding,) = evaluate(evidence.observations(ServerConfig(), watched_from + 161))
    assert finding.seen == "6 prefill batches and no decode stats line in the log for 160 s."


def test_prefills_for_minutes_without_a_decode_line_are_found_live() -> None:
    """The server stops logging decode lines while prefills keep coming: still found."""
    evidence = Evidence(started_at=1000.0)
    evidence.add_records([DECODE] * 5, 1000.0)
    found = []
    for n in range(1, 8):  # a prefill batch every 20 s, read as it is written
        evidence.add_records([PREFILL], 1000.0 + 20 * n)
        found.append(evaluate(evidence.observations(ServerConfig(), 1000.0 + 20 * n + 1)))
    assert found[:5] == [[]] * 5  # up to 100 s of the log's silence: not yet
    assert found[5] != []
    (finding,) = found[6]
    assert finding.code == "decode_stats_not_logged"
    assert finding.seen == "7 prefill batches and no decode stats line in the log for 140 s."


def test_evidence_forgets_old_windows() -> None:
    evidence = Evidence(max_windows=3)
    for i in range(10):
        graph = i >= 7  # the last three windows ran with CUDA graph
        evidence.add_record(StatsRecord(kind="decode", cuda_graph=graph, accept_length=3.0), i)
    observations = evidence.observations(ServerConfig(), 10.0)
    assert [w.cuda_graph for w in observations.windows] == [True, True, True]
    assert evaluate(observations) == []


def test_findings_are_ordered_most_severe_first() -> None:
    config = ServerConfig(
        algorithm="EAGLE",
        draft_architecture="LlamaForCausalLMEagle3",
        enable_metrics=False,
        disable_cuda_graph=True,
    )
    severities = [f.severity for f in evaluate(Observations(config=config))]
    assert severities == ["critical", "warning", "info"]


def _excessive(obs: Observations) -> str:
    (finding,) = [f for f in evaluate(obs) if f.code == "draft_tokens_excessive"]
    return finding.fix


def test_draft_token_advice_follows_the_measured_speedup() -> None:
    # docs/troubleshooting.md's example (an undertrained drafter): AL 2.5 with 16 draft tokens
    # at 57 vs 90 tok/s costs 2.5 / 0.63 = 3.95 steps per round, 0.20 per drafted token: about
    # 3 tokens do best.
    windows = tuple(DecodeSample(accept_length=2.5, cuda_graph=True) for _ in range(5))
    config = ServerConfig(engine="sglang", algorithm="EAGLE3", num_draft_tokens=16)
    measured = _excessive(Observations(config=config, windows=windows, speedup=57 / 90))
    assert "Lower SGLang --speculative-num-draft-tokens to about 3 (" in measured
    # Where no engine is known, each engine's setting: its count of verified positions or
    # of drafted tokens (one fewer).
    unknown = _excessive(Observations(config=replace(config, engine=None), windows=windows))
    assert "SGLang --speculative-num-draft-tokens to about 5;" in unknown
    assert "vLLM num_speculative_tokens in --speculative-config to about 4" in unknown
    assert "measured speedup" in measured
    # Without a baseline a drafted token is assumed to cost 0.05 steps. With a = 0.6 the
    # speedup (1 - a^n) / (1 - a) / (1 + 0.05 (n - 1)) is 1.89 at n=4, 1.92 at 5, 1.91 at 6.
    assumed = _excessive(Observations(config=config, windows=windows))
    assert "about 5 " in assumed and "assumed draft cost" in assumed


def test_dead_drafter_with_many_tokens_is_told_no_count_helps() -> None:
    windows = tuple(DecodeSample(accept_length=1.0, cuda_graph=True) for _ in range(5))
    obs = Observations(config=ServerConfig(num_draft_tokens=8), windows=windows, speedup=0.4)
    assert _excessive(obs).startswith("No draft-token count is expected to beat plain decoding")


@pytest.mark.parametrize(
    ("endpoint", "found"),
    [("missing", True), ("empty", True), ("ok", False), ("down", False), (None, False)],
)
def test_metrics_endpoint_disabled_only_when_it_answers_without_sglang(
    endpoint: str | None, found: bool
) -> None:
    # A down server says nothing about --enable-metrics; a 404 or a body without sglang_ does.
    sglang = Observations(config=ServerConfig(engine="sglang"), metrics_endpoint=endpoint)
    assert ("metrics_endpoint_disabled" in {f.code for f in evaluate(sglang)}) is found


@pytest.mark.parametrize(
    "config",
    [
        ServerConfig(),
        ServerConfig(engine="vllm"),
        ServerConfig(engine="sglang", enable_metrics=True),
    ],
)
def test_a_404_is_no_finding_unless_the_server_is_sglang_with_metrics_off(
    config: ServerConfig,
) -> None:
    """An unknown server, another engine, or SGLang saying its metrics are on: the URL is
    wrong, and "restart with --enable-metrics" would send a healthy server's on-call astray."""
    codes = {f.code for f in evaluate(Observations(config=config, metrics_endpoint="missing"))}
    assert "metrics_endpoint_disabled" not in codes


def test_running_at_the_cap_without_a_queue_is_not_capped() -> None:
    config = ServerConfig(max_running_requests=48)
    idle_queue = tuple(DecodeSample(accept_length=3.0, running=48, queued=0) for _ in range(5))
    assert evaluate(Observations(config=config, windows=idle_queue)) == []
    queueing = tuple(DecodeSample(accept_length=3.0, running=48, queued=9) for _ in range(5))
    (finding,) = evaluate(Observations(config=config, windows=queueing))
    assert finding.code == "running_requests_capped"
    assert "5 of 5 recent decode windows at 48 running requests with up to 9 queued" in finding.seen


def test_eager_windows_above_the_graph_batch_cap_name_the_cap() -> None:
    config = ServerConfig(cuda_graph_max_bs=48)
    windows = tuple(DecodeSample(accept_length=3.0, cuda_graph=False, running=64) for _ in range(4))
    (finding,) = evaluate(Observations(config=config, windows=windows))
    assert finding.code == "cuda_graph_disabled"
    assert "up to 64 running requests, graphs captured up to batch size 48" in finding.seen
    assert "--cuda-graph-max-bs" in finding.fix


@pytest.mark.parametrize(
    ("engine", "writer"), [("sglang", "SGLang"), ("vllm", "vLLM"), (None, "The server")]
)
def test_a_log_level_that_hides_the_stats_is_said_of_the_engine_that_logs(
    engine: str | None, writer: str
) -> None:
    config = ServerConfig(engine=engine, log_level="warning")
    (finding,) = evaluate(Observations(config=config))
    assert finding.code == "decode_stats_not_logged"
    assert (
        finding.seen
        == f"The log level is warning: {writer} logs decode stats at INFO, so none are written."
    )


@pytest.mark.parametrize(
    ("schedule", "setting"),
    [
        (None, "(num_speculative_tokens in --speculative-config)"),
        # Drafting by batch size, the count to change is this load's entry of the schedule.
        (((1, 64, 4),), "(the num_speculative_tokens_per_batch_size entry of the current load)"),
    ],
)
def test_unprofitable_positions_are_fixed_in_the_engines_own_setting(
    schedule: tuple[tuple[int, int, int], ...] | None, setting: str
) -> None:
    rates = (0.7, 0.3, 0.05, 0.01)
    windows = tuple(
        DecodeSample(accept_length=2.06, cuda_graph=True, accept_rate_by_position=rates)
        for _ in range(5)
    )
    config = ServerConfig(engine="vllm", algorithm="EAGLE3", num_steps=4, schedule=schedule)
    (finding,) = [
        f
        for f in evaluate(Observations(config=config, windows=windows, speedup=0.9))
        if f.code == "draft_positions_unprofitable"
    ]
    assert setting in finding.fix
    assert "vLLM" not in finding.fix  # its own words, not every engine's, each named


def test_excess_draft_tokens_are_counted_in_the_engines_own_words() -> None:
    windows = tuple(DecodeSample(accept_length=2.5, cuda_graph=True) for _ in range(5))
    for engine, said in (("sglang", "16 draft tokens per"), ("vllm", "15 speculative tokens per")):
        config = ServerConfig(engine=engine, algorithm="EAGLE3", num_draft_tokens=16)
        (finding,) = [
            f
            for f in evaluate(Observations(config=config, windows=windows, speedup=57 / 90))
            if f.code == "draft_tokens_excessive"
        ]
        assert finding.summary.startswith(said), finding.summary
