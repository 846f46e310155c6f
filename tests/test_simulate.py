"""``specwatch simulate``: every scenario reads back, through ``specwatch parse``, as its incident.

Expected values come from what each scenario stands for (a collapsed drafter, an undertrained
one, a healthy server...) and from SGLang's format history, written out here; the simulator's
own tables are only used to pick scenarios.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from exporter.analysis.algorithms import STANDARDS
from exporter.engines.sglang_sim.eras import DEFAULT_ERA, ERAS
from exporter.engines.sglang_sim.traffic import Traffic
from exporter.parse.envelopes import EnvelopeDecoder
from exporter.simulate import SCENARIOS, events, generate
from exporter.simulate.envelope import wrap
from tests.support.daemon import in_process, specwatch_cmd

DURATION = 240.0  # seconds of simulated log: 40+ decode windows for every scenario


def specwatch(*args: str) -> subprocess.CompletedProcess[str]:
    """A ``specwatch`` command run to its end through the CLI's entry point, in this process:
    what a child would give without an interpreter's start for each of some sixty runs. The
    paced modes (``--real-time``, ``--rate``) and a reader that goes away run the real
    process."""
    return in_process(*args)


def specwatch_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(specwatch_cmd(*args), capture_output=True, text=True, timeout=60)


def simulate_file(tmp_path: Path, scenario: str, *extra: str) -> Path:
    out = tmp_path / f"{scenario}.log"
    result = specwatch("simulate", "--scenario", scenario, "--out", str(out), *extra)
    assert result.returncode == 0, result.stderr
    return out


def parse(path: Path) -> list[dict[str, Any]]:
    result = specwatch("parse", "--json", str(path))
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def decodes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if record["kind"] == "decode"]


def mean(records: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(record[key] for record in records)


# What each scenario looks like in the log, in the 2026-02 format whose
# accept rate is accept_len / num_draft_tokens.
INCIDENTS = {
    # accept length, tolerance, draft tokens, tok/s, running, cuda graph
    "healthy": (3.2, 0.15, 4, 1.8 * 1500, 48, True),  # 1.8x the 1,500 tok/s baseline at 48
    "collapsed": (1.0, 0.0, 4, 600, 48, True),
    "eagle-flag": (1.0, 0.0, 4, 600, 48, True),
    "undertrained": (2.5, 0.2, 16, 57, 1, False),
    "mismatched": (1.1, 0.15, 4, 52, 1, True),
}


@pytest.mark.parametrize("scenario", sorted(INCIDENTS))
@pytest.mark.e2e
def test_scenario_parses_back_to_its_incident(tmp_path: Path, scenario: str) -> None:
    accept, tolerance, draft_tokens, tok_s, running, graph = INCIDENTS[scenario]
    log = simulate_file(
        tmp_path, scenario, "--duration", str(DURATION), "--format-version", "2026-02"
    )
    windows = decodes(parse(log))
    assert len(windows) >= 20
    assert mean(windows, "accept_length") == pytest.approx(accept, abs=tolerance / 2 + 0.01)
    assert all(abs(w["accept_length"] - accept) <= 3 * tolerance + 0.01 for w in windows)
    assert mean(windows, "gen_throughput") == pytest.approx(tok_s, rel=0.08)
    assert {w["running_requests"] for w in windows} == {running}
    assert {w["cuda_graph"] for w in windows} == {graph}
    for window in windows:
        assert window["accept_rate"] == pytest.approx(
            window["accept_length"] / draft_tokens, abs=0.006
        )


@pytest.mark.e2e
def test_collapsed_logs_accept_len_1_at_the_cap_on_every_line(tmp_path: Path) -> None:
    """A collapsed drafter: `accept len: 1.00, accept rate: 0.25` and 32 requests waiting at
    the cap."""
    log = simulate_file(tmp_path, "collapsed", "--format-version", "2026-02")
    lines = [line for line in log.read_text().splitlines() if "Decode batch" in line]
    assert lines and all("accept len: 1.00, accept rate: 0.25" in line for line in lines)
    assert all("#running-req: 48," in line and "#queue-req: 32" in line for line in lines)
    assert "max_running_requests=48" in log.read_text()


@pytest.mark.e2e
def test_decode_lines_come_every_forty_rounds_at_the_logged_throughput(tmp_path: Path) -> None:
    """Tokens in a window (40 rounds x running x accept length) over its length = gen throughput."""
    for scenario in ("healthy", "undertrained"):
        windows = decodes(parse(simulate_file(tmp_path, scenario, "--duration", "600")))
        first = datetime.fromisoformat(windows[0]["time"])
        last = datetime.fromisoformat(windows[-1]["time"])
        tokens = sum(40 * w["running_requests"] * w["accept_length"] for w in windows[1:])
        seconds = (last - first).total_seconds()
        assert tokens / seconds == pytest.approx(mean(windows[1:], "gen_throughput"), rel=0.05)


def startup_facts(text: str) -> tuple[int, int, int]:
    """Line numbers of the ServerArgs line, the draft's Load weight end, and the first request."""
    lines = text.splitlines()
    args = next(i for i, line in enumerate(lines) if "server_args=ServerArgs(" in line)
    draft = next(i for i, line in enumerate(lines) if "type=LlamaForCausalLMEagle3" in line)
    first = next(i for i, line in enumerate(lines) if "POST /v1/chat/completions" in line)
    return args, draft, first


@pytest.mark.e2e
def test_eagle_flag_startup_names_the_wrong_algorithm_before_traffic(tmp_path: Path) -> None:
    text = simulate_file(tmp_path, "eagle-flag").read_text()
    args, draft, first = startup_facts(text)
    assert args < draft < first
    server_args = text.splitlines()[args]
    assert "speculative_algorithm='EAGLE'," in server_args
    assert "Load weight end." in text.splitlines()[draft]
    assert text.index("The server is fired up and ready to roll!") < text.index("Decode batch")


@pytest.mark.e2e
def test_undertrained_server_has_graphs_disabled_and_sixteen_draft_tokens(tmp_path: Path) -> None:
    text = simulate_file(tmp_path, "undertrained").read_text()
    assert "disable_cuda_graph=True" in text
    assert "speculative_num_draft_tokens=16" in text
    assert "Capture cuda graph" not in text
    assert '"GET /metrics HTTP/1.1" 404 Not Found' in text


@pytest.mark.e2e
def test_recovery_goes_from_collapsed_to_healthy_after_a_restart(tmp_path: Path) -> None:
    log = simulate_file(tmp_path, "recovery", "--duration", "400")
    assert log.read_text().count("server_args=ServerArgs(") == 2
    windows = decodes(parse(log))
    start = datetime.fromisoformat(windows[0]["time"])
    collapsed = [
        w for w in windows if (datetime.fromisoformat(w["time"]) - start).total_seconds() < 55
    ]
    healthy = windows[-20:]
    assert len(collapsed) >= 10 and {w["accept_length"] for w in collapsed} == {1.0}
    assert mean(healthy, "accept_length") == pytest.approx(3.2, abs=0.1)
    assert mean(healthy, "gen_throughput") / 1500 == pytest.approx(1.8, rel=0.08)


@pytest.mark.e2e
def test_same_seed_same_bytes_other_seed_other_log(tmp_path: Path) -> None:
    logs = []
    for run, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        (tmp_path / run).mkdir()
        logs.append(simulate_file(tmp_path / run, "healthy", "--seed", seed).read_bytes())
    assert logs[0] == logs[1]
    assert logs[0] != logs[2]


# SGLang's decode/prefill line shape per era.
ERA_SHAPES = {
    "2025-10": ("Decode batch. #running-req", ", ", r"#queue-req: \d+, $"),
    "2025-12": ("Decode batch, #running-req", ", ", r"#queue-req: \d+, $"),
    "2026-02": (
        "Decode batch, #running-req",
        "",
        r"input throughput \(token/s\): [\d.]+, cuda graph: False$",
    ),
    "2026-04": (
        "Decode batch, #running-req",
        "",
        r"#pending-token: \d+, cuda graph: False, input throughput \(token/s\): [\d.]+$",
    ),
    "2026-05": (
        "Decode batch, #running-req",
        "",
        r"#pending-token: \d+, cuda graph: False, input throughput \(token/s\): [\d.]+$",
    ),
}


def era_rate(era: str, accept_length: float, steps: int, draft_tokens: int) -> float:
    """SGLang's accept rate: /(steps+1) in Oct 2025, /N until April 2026, then drafts only."""
    if era == "2025-10":
        return accept_length / (steps + 1)
    if era == "2026-05":
        return (accept_length - 1) / (draft_tokens - 1)
    return accept_length / draft_tokens


@pytest.mark.parametrize("era", sorted(ERA_SHAPES))
@pytest.mark.e2e
def test_each_format_version_writes_its_era_and_parses_back(tmp_path: Path, era: str) -> None:
    header, trailing, prefill_end = ERA_SHAPES[era]
    log = simulate_file(tmp_path, "undertrained", "--format-version", era, "--duration", "120")
    lines = log.read_text().splitlines()
    decode_lines = [line for line in lines if "Decode batch" in line]
    prefill_lines = [line for line in lines if "Prefill batch" in line]
    assert all(
        header in line and line.endswith(f"#queue-req: 0{trailing}") for line in decode_lines
    )
    assert all(re.search(prefill_end, line) for line in prefill_lines)
    records = parse(log)
    assert len(decodes(records)) == len(decode_lines)
    assert len(records) == len(decode_lines) + len(prefill_lines)
    for window in decodes(records):
        expected = era_rate(era, window["accept_length"], steps=5, draft_tokens=16)
        assert window["accept_rate"] == pytest.approx(expected, abs=0.006)


@pytest.mark.parametrize("envelope", ["cri", "docker"])
@pytest.mark.e2e
def test_each_envelope_round_trips_to_the_plain_records(tmp_path: Path, envelope: str) -> None:
    plain = parse(simulate_file(tmp_path, "collapsed", "--duration", "120"))
    (tmp_path / envelope).mkdir()
    wrapped = simulate_file(
        tmp_path / envelope, "collapsed", "--duration", "120", "--envelope", envelope
    )
    first = wrapped.read_text().splitlines()[0]
    if envelope == "cri":
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z stderr F ", first)
    else:
        assert set(json.loads(first)) == {"log", "stream", "time"}
    assert parse(wrapped) == plain


def test_access_lines_go_to_stdout_and_sglang_lines_to_stderr() -> None:
    for record in generate("healthy", duration=90, envelope="docker"):
        entry = json.loads(record)
        is_access = '" 200 OK' in entry["log"] or '" 404 Not Found' in entry["log"]
        assert entry["stream"] == ("stdout" if is_access else "stderr"), entry


@pytest.mark.parametrize("envelope", ["cri", "docker"])
def test_long_lines_split_into_runtime_chunks_that_join_back(envelope: str) -> None:
    """Container runtimes cut lines at 16 KiB; the reader must see one line again."""
    line = "[2026-05-20 09:00:00] server_args=ServerArgs(" + "x" * 40_000 + ")"
    records = wrap(line, "stderr", ERAS["2026-05"].base_time, envelope)
    assert len(records) == 3
    decoder = EnvelopeDecoder()
    assert decoder.decode([record.encode() for record in records]) == [line.encode()]


@pytest.mark.e2e
def test_real_time_mode_paces_lines_and_stamps_them_with_the_wall_clock(tmp_path: Path) -> None:
    out = tmp_path / "live.log"
    started = datetime.now()
    result = specwatch_process(
        "simulate",
        "--scenario",
        "collapsed",
        "--real-time",
        "--speed",
        "4",
        "--duration",
        "3",
        "--out",
        str(out),
    )
    elapsed = (datetime.now() - started).total_seconds()
    assert result.returncode == 0, result.stderr
    assert elapsed >= 3  # paced: no upper bound, which a loaded machine's start-up would fail
    text = out.read_text()
    assert "The server is fired up and ready to roll!" in text
    windows = decodes(parse(out))
    # 3 s at 4x speed is 12 simulated seconds: about 4 of the 3.2 s collapsed windows.
    assert 2 <= len(windows) <= 6
    for window in windows:
        stamp = datetime.fromisoformat(window["time"])
        assert started.replace(microsecond=0) <= stamp <= datetime.now()


@pytest.mark.e2e
def test_rate_sets_decode_lines_per_second(tmp_path: Path) -> None:
    out = tmp_path / "live.log"
    result = specwatch_process(
        "simulate", "--scenario", "healthy", "--rate", "10", "--duration", "2", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert 12 <= len(decodes(parse(out))) <= 28


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--duration", "0"], "--duration"),
        (["--speed", "-1"], "--speed"),
        (["--rate", "5", "--speed", "2"], "--rate"),
        (["--out", "/nonexistent-dir/x.log"], "--out"),
        (["--format-version", "2024-01"], "--format-version"),
    ],
)
@pytest.mark.e2e
def test_bad_flags_exit_2_with_one_line_naming_the_flag(args: list[str], named: str) -> None:
    result = specwatch("simulate", "--scenario", "healthy", *args)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and named in errors[0], result.stderr


@pytest.mark.e2e
def test_a_reader_that_stops_early_is_not_an_error() -> None:
    proc = subprocess.Popen(
        specwatch_cmd("simulate", "--scenario", "healthy", "--duration", "3000"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()


# The findings (the Findings table of docs/metrics.md) each scenario must raise from its log alone.
# Slower-than-baseline needs a baseline, which a log does not carry: that is the alerts' job.
INTENDED_FINDINGS: dict[str, set[str]] = {
    "healthy": set(),
    # 48 running at the cap SGLang sets for EAGLE while 32 requests wait
    "collapsed": {"running_requests_capped"},
    "eagle-flag": {"eagle3_draft_with_eagle_algorithm", "running_requests_capped"},
    # CUDA graphs off, 16 draft tokens mostly rejected, /metrics answering 404
    "undertrained": {"cuda_graph_disabled", "draft_tokens_excessive", "metrics_endpoint_disabled"},
    "mismatched": set(),
    "recovery": set(),  # the restart with a working drafter leaves nothing active
    # 15% of the requests (one class of traffic) accept nothing; the windows read 2.4
    "hidden-share": {"requests_without_benefit"},
    # drafting off at 96 running is adaptive's design, not a finding
    "adaptive": set(),
    # drafting off at 16 running, and its probes accept nothing
    "adaptive-given-up": {"adaptive_drafter_given_up"},
    # 8 lookup tokens, few accepted: no draft model, so not a waste
    "ngram": set(),
    # MTP layers at 1.7: low for EAGLE, healthy by their own floor
    "mtp": set(),
}


def test_every_scenario_has_its_intended_findings_declared() -> None:
    assert set(INTENDED_FINDINGS) == set(SCENARIOS)
    for name, scenario in SCENARIOS.items():
        assert set(scenario.findings) == INTENDED_FINDINGS[name], name


def test_scenarios_name_neutral_algorithms_that_each_engine_spells() -> None:
    """A scenario speaks no engine's words: its algorithms are the neutral ones of the
    standards, and the model's own MTP layers are MTP (SGLang's simulation writes them as its
    EAGLE with a NextN draft class, as its server logs them)."""
    for scenario in SCENARIOS.values():
        for phase in scenario.phases:
            assert phase.deployment.algorithm in STANDARDS, scenario.name
    (mtp,) = SCENARIOS["mtp"].phases
    assert STANDARDS[mtp.deployment.algorithm].family == "MTP"
    assert mtp.deployment.draft_architecture is None  # the engine's class for the layers


@pytest.mark.parametrize("scenario", sorted(INTENDED_FINDINGS))
@pytest.mark.e2e
def test_doctor_reads_each_scenarios_intended_findings_from_the_log(
    tmp_path: Path, scenario: str
) -> None:
    log = simulate_file(tmp_path, scenario, "--duration", "300")
    result = specwatch("doctor", "--json", "--log-file", str(log))
    codes = {finding["code"] for finding in json.loads(result.stdout)["findings"]}
    assert codes == INTENDED_FINDINGS[scenario], result.stdout


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_lines_are_written_in_time_order(scenario: str) -> None:
    offsets = [event.offset for event in events(SCENARIOS[scenario], duration=600)]
    assert offsets == sorted(offsets)


# SGLang's startup, as its TP0 scheduler and HTTP process print it.
STARTUP_ORDER = (
    "server_args=ServerArgs(",
    "TP0] Init torch distributed begin.",
    "TP0] Load weight end. elapsed=",  # the target model
    "TP0] KV Cache is allocated. #tokens: ",
    "TP0] Capture cuda graph begin.",
    "TP0] Capture cuda graph end.",
    "type=LlamaForCausalLMEagle3",  # the draft's own load
    "TP0] max_total_num_tokens=",
    "INFO:     Uvicorn running on http://",
    '"GET /model_info HTTP/1.1" 200 OK',
    '"POST /generate HTTP/1.1" 200 OK',
    "The server is fired up and ready to roll!",
)
ACCESS = re.compile(
    r'^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] INFO:     [\d.]+:\d+ - "(GET|POST) /\S* HTTP/1\.1" '
    r"\d{3} [A-Za-z ]+$"
)


@pytest.mark.e2e
def test_startup_access_and_warning_lines_are_mixed_in_as_sglang_prints_them(
    tmp_path: Path,
) -> None:
    lines = simulate_file(tmp_path, "healthy", "--duration", "300").read_text().splitlines()
    positions = [next(i for i, line in enumerate(lines) if part in line) for part in STARTUP_ORDER]
    assert positions == sorted(positions)
    target_load = lines[positions[2]]
    assert "type=LlamaForCausalLMEagle3" not in target_load and ", type=" in target_load
    first_decode = next(i for i, line in enumerate(lines) if "Decode batch" in line)
    assert positions[-1] < first_decode
    traffic = lines[first_decode:]
    access = [line for line in traffic if "HTTP/1.1" in line]
    assert len(access) >= 20 and all(ACCESS.match(line) for line in access), access[:3]
    assert any('"POST /v1/chat/completions HTTP/1.1" 200 OK' in line for line in access)
    assert any("Prefill batch" in line for line in traffic)
    assert any(line.startswith("Max running requests is reset to 48") for line in lines)
    assert any("is deprecated and will be removed" in line for line in traffic)


@pytest.mark.e2e
def test_duration_bounds_the_simulated_time_the_log_covers(tmp_path: Path) -> None:
    stamps = [
        datetime.fromisoformat(found)
        for found in re.findall(
            r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)",
            simulate_file(tmp_path, "collapsed", "--duration", "150").read_text(),
            re.MULTILINE,
        )
    ]
    span = (max(stamps) - min(stamps)).total_seconds()
    assert 140 <= span <= 150


@pytest.mark.parametrize("name", ["healthy", "collapsed", "adaptive"])
def test_the_kv_caches_tokens_are_those_of_the_running_batch_at_every_line(name: str) -> None:
    """The KV cache's tokens (each prefill line's token usage) are kept as requests start,
    grow, finish and give their place, not summed again: at every line they are the running
    requests' prompts and whole generated tokens, until every request it began with ended."""
    phase = SCENARIOS[name].phases[0]
    traffic = Traffic(phase, ERAS[DEFAULT_ERA], random.Random(7), now=0.0)
    first: list[object] = []  # held, so that no later request takes one of their ids
    for number, _ in enumerate(islice(traffic.events(None), 100_000)):
        running = traffic.requests
        assert traffic.kv_tokens == sum(r.prompt + int(r.generated) for r in running), number
        if not first:
            first = list(running)
        elif not set(map(id, first)) & set(map(id, running)):
            break
    else:
        pytest.fail("a request it began with still runs after 100,000 lines")
    # A run handed a batch already running starts from that batch's tokens.
    again = Traffic(phase, ERAS[DEFAULT_ERA], random.Random(7), now=0.0, requests=list(running))
    assert again.kv_tokens == traffic.kv_tokens > 0
