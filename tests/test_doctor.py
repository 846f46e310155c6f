"""``specwatch doctor`` through the real CLI: exit status 0/1/3 (2 for bad flags), output."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import doctor, specwatch_cmd
from tests.support.fake_sglang import (
    API_KEY,
    FakeSGLang,
    Route,
    exposition,
    fake_sglang,
    server_info,
)
from tests.support.files import write_log
from tests.support.loglines import (
    VLLM_START,
    decode,
    metrics_disabled,
    stamp,
    startup,
    undertrained_drafter,
    vllm_interval,
    wrong_algorithm_flag,
)
from tests.support.speclogs import server_args
from tests.support.tools import free_port
from tests.support.upstream_servers import TRTLLM_PATH, TrtllmMetrics

pytestmark = pytest.mark.e2e


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def test_wrong_flag_log_is_critical_with_cause_and_fix(tmp_path: Path) -> None:
    result = doctor("--log-file", write_log(tmp_path, wrong_algorithm_flag()))
    assert result.returncode == 3, result.stderr
    out = result.stdout
    assert "CRITICAL  eagle3_draft_with_eagle_algorithm" in out
    assert "loaded as LlamaForCausalLMEagle3" in out
    assert "fix:  Restart the server with the EAGLE-3 algorithm" in out
    assert "SGLang --speculative-algorithm EAGLE3" in out
    assert "sk-live" not in out + result.stderr


def test_undertrained_drafter_log_exits_with_warning(tmp_path: Path) -> None:
    result = doctor("--log-file", write_log(tmp_path, undertrained_drafter()), "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == 1
    assert {f["code"] for f in report["findings"]} == {
        "cuda_graph_disabled",
        "draft_tokens_excessive",
    }
    assert all(f["severity"] == "warning" for f in report["findings"])
    assert report["config"]["num_draft_tokens"] == 16


def test_info_only_findings_exit_clean(tmp_path: Path) -> None:
    result = doctor("--log-file", write_log(tmp_path, metrics_disabled()))
    assert result.returncode == 0, result.stderr
    assert "INFO  metrics_endpoint_disabled" in result.stdout
    assert "--enable-metrics" in result.stdout


def test_started_server_without_requests_is_clean_and_says_what_was_not_judged(
    tmp_path: Path,
) -> None:
    result = doctor("--log-file", write_log(tmp_path, startup()))
    assert result.returncode == 0, result.stderr
    assert "an idle server): accept length and speed were not judged" in result.stdout
    assert "nothing wrong: no verdict or finding holds" in result.stdout


def test_wrong_flag_from_server_info_alone(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=exposition().encode())
    server.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
    result = doctor("--url", server.url, "--json")
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert [f["code"] for f in report["findings"]] == ["eagle3_draft_with_eagle_algorithm"]
    assert report["sources"] == {"metrics": "ok (SGLang at /metrics)", "server_info": "ok"}
    assert API_KEY not in result.stdout + result.stderr


def test_draft_config_proves_the_draft_kind(server: FakeSGLang, tmp_path: Path) -> None:
    info = server_info(speculative_draft_model_path="team/kimi-k25-drafter-v3")
    server.routes["/server_info"] = Route(body=info, content_type="application/json")
    server.routes["/metrics"] = Route(body=exposition().encode())
    assert doctor("--url", server.url).returncode == 0
    draft = tmp_path / "drafter"
    draft.mkdir()
    (draft / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000})
    )
    result = doctor("--url", server.url, "--draft-config", str(draft))
    assert result.returncode == 3
    assert "loaded as LlamaForCausalLMEagle3" in result.stdout


def test_missing_metrics_endpoint_alone_judges_nothing(server: FakeSGLang) -> None:
    info = server_info(speculative_algorithm="EAGLE3", enable_metrics=False)
    server.routes["/server_info"] = Route(body=info, content_type="application/json")
    result = doctor("--url", server.url)
    assert result.returncode == 1, result.stdout
    assert "INFO  metrics_endpoint_disabled" in result.stdout
    assert "problem: nothing could be judged of the node's state" in result.stdout


def test_token_protected_server_with_token_file(server: FakeSGLang, tmp_path: Path) -> None:
    server.routes["/server_info"] = Route(body=server_info(), need_token=True)
    server.routes["/metrics"] = Route(body=exposition().encode())
    denied = doctor("--url", server.url)
    assert denied.returncode == 1
    assert "problem:" in denied.stdout and "HTTP 401" in denied.stdout
    token = tmp_path / "token"
    token.write_text(API_KEY)
    result = doctor("--url", server.url, "--bearer-token-file", str(token))
    assert result.returncode == 3
    assert API_KEY not in result.stdout + result.stderr


def test_unreachable_server_is_a_problem_not_a_crash() -> None:
    result = doctor("--url", f"http://127.0.0.1:{free_port()}", "--timeout", "1")
    assert result.returncode == 1
    assert "connection refused" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give at least one of --url, --log-file, --draft-config"),
        (("--log-file", "/nonexistent/server.log"), "--log-file: cannot read"),
        (("--draft-config", "/nonexistent/draft"), "--draft-config: cannot read"),
        (("--url", "http://127.0.0.1:1", "--timeout", "0"), "--timeout: must be positive"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    result = doctor(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_restart_in_the_log_judges_the_new_run_only(tmp_path: Path) -> None:
    lines = undertrained_drafter() + startup(num_draft_tokens=4)  # restarted with 4 draft tokens
    result = doctor("--log-file", write_log(tmp_path, lines), "--json")
    report = json.loads(result.stdout)
    assert report["findings"] == []
    assert report["config"]["num_draft_tokens"] == 4
    assert result.returncode == 0


@pytest.mark.parametrize(
    ("scenario", "envelope", "status", "must_find"),
    [
        ("healthy", "plain", 0, set()),
        ("eagle-flag", "cri", 3, {"eagle3_draft_with_eagle_algorithm"}),
        ("undertrained", "docker", 1, {"cuda_graph_disabled", "draft_tokens_excessive"}),
    ],
)
def test_doctor_on_simulated_incident_logs(
    tmp_path: Path, scenario: str, envelope: str, status: int, must_find: set[str]
) -> None:
    log = tmp_path / f"{scenario}.log"
    subprocess.run(
        specwatch_cmd(
            "simulate", "--scenario", scenario, "--envelope", envelope, "--out", str(log)
        ),
        check=True,
        timeout=60,
    )
    result = doctor("--log-file", str(log), "--json")
    report = json.loads(result.stdout)
    assert result.returncode == status, report["findings"]
    found = {f["code"] for f in report["findings"]}
    assert must_find <= found
    if status == 0:
        assert all(f["severity"] == "info" for f in report["findings"])


LOGS = Path(__file__).parent / "data" / "logs"


@pytest.mark.parametrize(
    ("mixin", "status", "verdicts"),
    [
        (None, 3, ["accept_length_collapsed"]),  # mean accept length 1.04 <= the shipped 1.05
        ("collapsed_accept_length: 1.02", 1, ["accept_length_low"]),  # not collapsed, still low
    ],
)
def test_mixin_config_thresholds_change_doctors_verdict_as_they_change_reports(
    tmp_path: Path, mixin: str | None, status: int, verdicts: list[str]
) -> None:
    """doctor --mixin-config judges by the user's alert thresholds, exactly as report does."""
    log = str(LOGS / "mismatched.log")
    flags: tuple[str, ...] = ()
    if mixin is not None:
        path = tmp_path / "mixin.yaml"
        path.write_text(f"thresholds:\n  {mixin}\n")
        flags = ("--mixin-config", str(path))
    result = doctor("--log-file", log, "--json", *flags)
    assert result.returncode == status, result.stderr
    assert [v["code"] for v in json.loads(result.stdout)["verdicts"]] == verdicts
    report = subprocess.run(
        specwatch_cmd("report", log, "--json", *flags),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (run,) = json.loads(report.stdout)["runs"]
    assert [v["code"] for v in run["verdicts"]] == verdicts


def test_bad_mixin_config_exits_2_naming_flag_and_key(tmp_path: Path) -> None:
    mixin = tmp_path / "mixin.yaml"
    mixin.write_text("thresholds:\n  collapsed_for: soon\n")
    result = doctor("--log-file", str(LOGS / "healthy.log"), "--mixin-config", str(mixin))
    assert (result.returncode, result.stdout) == (2, "")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--mixin-config" in result.stderr and "collapsed_for" in result.stderr


def test_tensorrt_llm_metrics_are_read_where_it_serves_them(server: FakeSGLang) -> None:
    """trtllm-serve answers /metrics with its JSON iteration stats; Prometheus's names are at
    /prometheus/metrics, and its config info names the drafter."""
    server.routes["/metrics"] = Route(body=b'[{"iter": 7}]', content_type="application/json")
    server.routes[TRTLLM_PATH] = Route(body=TrtllmMetrics(method="MTP", draft_len=1).body())
    report = json.loads(doctor("--url", server.url, "--json").stdout)
    assert report["sources"]["metrics"] == "ok (TensorRT-LLM at /prometheus/metrics)"
    assert "server_info" not in report["sources"]  # it serves none; never asked
    assert (report["config"]["algorithm"], report["config"]["num_steps"]) == ("MTP", 1)


def test_a_log_that_changes_engine_judges_the_new_engines_collapse(tmp_path: Path) -> None:
    """A node moved from SGLang to vLLM, writing to the same file: vLLM's collapsed drafter
    is the verdict, and the healthy SGLang run is an earlier run."""
    sglang = startup() + [decode(60 + 10 * i, 2.9, 0.63, tput=2600) for i in range(10)]
    vllm = [VLLM_START] + [line for i in range(6) for line in vllm_interval(10 * i)]
    result = doctor("--log-file", write_log(tmp_path, sglang + vllm), "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 3, result.stdout
    assert [v["code"] for v in report["verdicts"]] == ["accept_length_collapsed"]
    assert "6 decode windows" in report["verdicts"][0]["seen"]


def test_runs_of_two_engines_say_which_engine_each_ran(tmp_path: Path) -> None:
    """Both runs speculate with EAGLE-3 and four draft tokens: the engine is what changed,
    and the earlier-run line says it, as report's JSON does for every run."""
    sglang = startup(algorithm="EAGLE3") + [
        decode(60 + 10 * i, 2.9, 0.63, tput=2600) for i in range(10)
    ]
    vllm = [VLLM_START] + [line for i in range(6) for line in vllm_interval(10 * i)]
    log = write_log(tmp_path, sglang + vllm)
    text = doctor("--log-file", log).stdout
    assert "to 2026-02-23 00:12:32 (SGLang EAGLE3, 4 draft tokens, draft " in text
    result = subprocess.run(
        specwatch_cmd("report", log, "--json"), capture_output=True, text=True, check=True
    )
    assert [run["engine"] for run in json.loads(result.stdout)["runs"]] == ["sglang", "vllm"]


def test_an_sglang_server_without_speculation_is_not_judged_and_says_why(tmp_path: Path) -> None:
    """SGLang without --speculative-algorithm writes decode lines with no accept length: the
    reason given is its own, not a vLLM release's."""
    decodes = [
        f"{stamp(60 + 4 * i, 'TP0')} Decode batch, #running-req: 48, #token: 43200, token "
        "usage: 0.04, cuda graph: True, gen throughput (token/s): 1500.00, #queue-req: 0"
        for i in range(8)
    ]
    result = doctor("--log-file", write_log(tmp_path, [server_args(None), *decodes]))
    assert result.returncode == 1, result.stdout
    assert "8 decode windows in the newest server run and none with an accept length" in (
        result.stdout
    )
    assert "its arguments name no --speculative-algorithm" in result.stdout
    assert "vLLM" not in result.stdout


def test_a_vllm_server_without_speculation_is_not_judged_and_says_why(tmp_path: Path) -> None:
    """vLLM started without --speculative-config logs no SpecDecoding line: that is the
    reason, not an old release's line format."""
    start = VLLM_START.split("speculative_config=")[0] + "speculative_config=None, "
    start += "tokenizer='meta-llama/Llama-3.1-8B-Instruct', enforce_eager=False"
    engine_lines = [line for i in range(6) for line in vllm_interval(10 * i)][::2]
    result = doctor("--log-file", write_log(tmp_path, [start, *engine_lines]))
    assert result.returncode == 1, result.stdout
    assert "6 decode windows in the newest server run and none with an accept length" in (
        result.stdout
    )
    assert "its engine configuration has no speculative_config" in result.stdout
    assert "0.8.3" not in result.stdout


def test_a_pd_prefill_server_decodes_nothing_and_misses_no_stats(tmp_path: Path) -> None:
    """With PD disaggregation the prefill server logs prefill batches only (SGLang 0.5.23's
    line with its bootstrap and in-flight queues): no decode line is due, so it is neither
    'decode stats missing' nor an idle server."""
    prefills = [
        f"{stamp(60 + 2 * i, 'TP0')} Prefill batch, #new-seq: 3, #new-token: 6144, "
        "#cached-token: 1024, token usage: 0.12, #running-req: 0, #queue-req: 2, "
        "#pending-token: 0, #bootstrap-req: 1, #inflight-req: 4, #optimistic-req: 0, "
        "cuda graph: False, input throughput (token/s): 41200.55"
        for i in range(90)
    ]
    lines = [server_args("EAGLE", draft_path=None, disaggregation="prefill"), *prefills]
    result = doctor("--log-file", write_log(tmp_path, lines))
    assert result.returncode == 0, result.stdout
    assert "decode_stats_not_logged" not in result.stdout
    assert "prefill server of PD disaggregation" in result.stdout
    assert "idle" not in result.stdout
