"""Findings from realistic SGLang logs of each incident (spec section 2) and from plain inputs.

Logs are written in SGLang's Feb 2026 line formats (reference notes, sections 1 and 5) and read
through the same line processor the daemon uses, so a finding here is a finding in production.
"""

from __future__ import annotations

from datetime import datetime, timedelta
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

T0 = datetime(2026, 2, 23, 0, 10, 2)


def stamp(seconds: float, ranks: str = "") -> str:
    when = (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{when}{' ' + ranks if ranks else ''}]"


def startup(
    algorithm: str = "EAGLE3",
    draft_class: str = "LlamaForCausalLMEagle3",
    draft_path: str = "/models/kimi-k25-eagle3",
    num_draft_tokens: int = 4,
    topk: int = 1,
    steps: int = 3,
    disable_cuda_graph: bool = False,
    log_level: str = "info",
    enable_metrics: bool = True,
    max_running: int = 48,
) -> list[str]:
    """The startup sequence of a TP2 server: args, both ranks' loads and captures, ready."""
    args = (
        "server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tokenizer_mode='auto', "
        "api_key='sk-live-0123456789', tp_size=2, dp_size=1, "
        f"log_level='{log_level}', decode_log_interval=40, max_running_requests=None, "
        f"enable_metrics={enable_metrics}, speculative_algorithm='{algorithm}', "
        f"speculative_draft_model_path='{draft_path}', speculative_draft_model_revision='main', "
        f"speculative_num_steps={steps}, speculative_eagle_topk={topk}, "
        f"speculative_num_draft_tokens={num_draft_tokens}, cuda_graph_max_bs=48, "
        f"cuda_graph_bs=None, disable_cuda_graph={disable_cuda_graph}, host='0.0.0.0')"
    )
    load = "Load weight end. elapsed={e} s, type={c}, dtype=torch.bfloat16, avail mem=1 GB, "
    lines = [
        f"{stamp(0)} {args}",
        "Max running requests is reset to 48 for speculative decoding. You can override this "
        "by explicitly setting --max-running-requests.",
        f"{stamp(1, 'TP0')} Init torch distributed begin.",
        f"{stamp(19, 'TP0')} " + load.format(e=9.41, c="DeepseekV3ForCausalLM") + "mem usage=7 GB.",
        f"{stamp(19, 'TP1')} " + load.format(e=9.52, c="DeepseekV3ForCausalLM") + "mem usage=7 GB.",
    ]
    if not disable_cuda_graph:
        lines += [
            f"{stamp(25, 'TP0')} Capture cuda graph begin. This can take up to several minutes.",
            "Capturing batches (bs=48 avail_mem=19.02 GB): 100%|##########| 12/12 [00:06<00:00]",
            f"{stamp(31, 'TP0')} Capture cuda graph end. Time elapsed: 6.48 s. mem usage=0.80 GB.",
        ]
    lines += [
        f"{stamp(32, 'TP1')} " + load.format(e=1.05, c=draft_class) + "mem usage=0.79 GB.",
        f"{stamp(32, 'TP0')} " + load.format(e=1.02, c=draft_class) + "mem usage=0.79 GB.",
        f"{stamp(42, 'TP0')} max_total_num_tokens=1183744, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests={max_running}, context_len=131072, "
        "available_gpu_mem=16.61 GB",
        f"{stamp(45)} INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f'{stamp(46)} INFO:     127.0.0.1:40312 - "GET /model_info HTTP/1.1" 200 OK',
        f"{stamp(47, 'TP0')} Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, "
        "cuda graph: False",
        f"{stamp(50)} The server is fired up and ready to roll!",
    ]
    return lines


def decode(
    seconds: float,
    accept: float,
    rate: float,
    graph: bool = True,
    running: int = 48,
    queued: int = 0,
    tput: float = 600.0,
) -> str:
    return (
        f"{stamp(seconds, 'TP0')} Decode batch, #running-req: {running}, #token: 6460, "
        f"token usage: 0.06, accept len: {accept:.2f}, accept rate: {rate:.2f}, "
        f"cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {queued}"
    )


def prefill(seconds: float, new_tokens: int = 2048, running: int = 1) -> str:
    return (
        f"{stamp(seconds, 'TP0')} Prefill batch, #new-seq: 1, #new-token: {new_tokens}, "
        f"#cached-token: 0, token usage: 0.01, #running-req: {running}, #queue-req: 0, "
        "input throughput (token/s): 8123.40, cuda graph: False"
    )


def incident_1() -> list[str]:
    """Broken drafter: accept len 1.00 (rate 0.25, 4 tokens), 48 running, 32 queued."""
    lines = startup()
    lines += [decode(260 + 4 * i, 1.00, 0.25, running=48, queued=32, tput=600) for i in range(8)]
    return lines


def incident_2() -> list[str]:
    """Wrong flag: only the startup lines, no request served yet."""
    return startup(algorithm="EAGLE")


def incident_3() -> list[str]:
    """Undertrained drafter after the fix: 16 draft tokens, len ~2.5, no CUDA graph."""
    lines = startup(num_draft_tokens=16, topk=4, steps=6, max_running=48)
    values = [(2.50, 0.16, 61.26), (2.38, 0.15, 59.69), (2.55, 0.16, 48.10), (2.41, 0.15, 57.0)]
    lines += [
        decode(300 + 5 * i, acc, rate, graph=False, running=1, tput=tput)
        for i, (acc, rate, tput) in enumerate(values)
    ]
    return lines


def incident_4() -> list[str]:
    """Mismatched drafter: correct flag, accept length near 1, custom profiler lines around."""
    lines = startup()
    for i in range(6):
        lines.append(decode(300 + 5 * i, 1.02, 0.26, running=1, tput=52.0))
        lines.append(
            "EAGLE3_PROF (6400 cycles, 3688 tok, no sync) Draft steps: 0.64 ms/cyc ( 2.1%) "
            "Draft re-extend: 0.25 ms/cyc ( 0.9%) Accept len: 0.58"
        )
    return lines


def incident_5() -> list[str]:
    """Metrics disabled: the log alone must carry the diagnosis."""
    lines = startup(enable_metrics=False)
    lines += [decode(300 + 4 * i, 3.1, 0.78, running=8, tput=900) for i in range(5)]
    return lines


def codes(lines: list[str], tmp_path: Path) -> set[str]:
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    log = read_log(str(path))
    observations = log.observations(log.config)
    return {finding.code for finding in evaluate(observations)}


def test_incident_1_broken_drafter_names_the_running_cap(tmp_path: Path) -> None:
    found = codes(incident_1(), tmp_path)
    assert found == {"running_requests_capped"}


def test_incident_2_wrong_flag_is_critical_from_startup_lines_alone(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("\n".join(incident_2()) + "\n")
    log = read_log(str(path))
    findings = evaluate(log.observations(log.config))
    assert [f.code for f in findings] == ["eagle3_draft_with_eagle_algorithm"]
    finding = findings[0]
    assert finding.severity == "critical"
    assert "LlamaForCausalLMEagle3" in finding.seen
    assert "--speculative-algorithm EAGLE3" in finding.fix


def test_incident_2_fixed_flag_is_clean(tmp_path: Path) -> None:
    assert codes(startup(algorithm="EAGLE3"), tmp_path) == set()


def test_incident_3_undertrained_warns_graph_off_and_draft_tokens_wasted(tmp_path: Path) -> None:
    assert codes(incident_3(), tmp_path) == {"cuda_graph_disabled", "draft_tokens_excessive"}


def test_incident_4_mismatched_drafter_is_not_blamed_on_the_flag(tmp_path: Path) -> None:
    assert "eagle3_draft_with_eagle_algorithm" not in codes(incident_4(), tmp_path)


def test_incident_5_metrics_disabled_found_from_log_alone(tmp_path: Path) -> None:
    assert codes(incident_5(), tmp_path) == {"metrics_endpoint_disabled"}


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
    lines = [*incident_5()[:-1], drifted]
    assert "log_format_unrecognized" in codes(lines, tmp_path)


def test_every_code_of_the_spec_has_its_severity() -> None:
    assert SEVERITIES == {
        "eagle3_draft_with_eagle_algorithm": "critical",
        "cuda_graph_disabled": "warning",
        "draft_tokens_excessive": "warning",
        "decode_stats_not_logged": "warning",
        "metrics_endpoint_disabled": "info",
        "log_format_unrecognized": "warning",
        "running_requests_capped": "warning",
        "draft_positions_unprofitable": "info",
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
    # README worked example (incident 3): AL 2.5 with 16 draft tokens at 57 vs 90 tok/s costs
    # 2.5 / 0.63 = 3.95 steps per round, 0.20 per drafted token: about 3 tokens do best.
    windows = tuple(DecodeSample(accept_length=2.5, cuda_graph=True) for _ in range(5))
    config = ServerConfig(num_draft_tokens=16)
    measured = _excessive(Observations(config=config, windows=windows, speedup=57 / 90))
    assert "Lower --speculative-num-draft-tokens to about 3 " in measured
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
    codes = {f.code for f in evaluate(Observations(metrics_endpoint=endpoint))}
    assert ("metrics_endpoint_disabled" in codes) is found


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
    assert "up to 64 running requests, cuda_graph_max_bs=48" in finding.seen
    assert "--cuda-graph-max-bs" in finding.fix
