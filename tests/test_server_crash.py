"""A crashed or dying server is a verdict in ``doctor`` and ``report``, with when and why.

The logs are written here in the engines' own words: SGLang's scheduler logs ``Scheduler hit
an exception: `` followed by the traceback (``get_exception_traceback``) and signals its
parent, whose handler logs ``SIGQUIT received. signum=..., frame=.... It usually means one
child failed.`` (``Received sigquit from a child process. It usually means the child
failed.`` while launching); a CUDA-graph capture that runs out of memory raises ``Capture
cuda graph failed: <error>`` followed by SGLang's list of possible solutions. vLLM's engine
core logs ``EngineCore encountered a fatal error.`` with ``logger.exception``, its traceback
lines tagged by the process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from tests.support.files import write_log
from tests.support.loglines import decode, stamp, startup

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this "
    "process has 77.86 GiB memory in use."
)


def scheduler_exception(seconds: float, cause: str) -> list[str]:
    """SGLang's scheduler dying of ``cause``, and the parent's SIGQUIT handler after it."""
    return [
        f"{stamp(seconds, 'TP0')} Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 6368, in '
        "run_scheduler_process",
        "    scheduler.run_event_loop()",
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 1210, in '
        "event_loop_overlap",
        "    batch_result = self.run_batch(batch)",
        cause,
        "",
        f"{stamp(seconds)} SIGQUIT received. signum=3, frame=<frame at 0x7f3c2c0a1b40, file "
        "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child "
        "failed.",
    ]


def serving(count: int = 8, accept: float = 2.6) -> list[str]:
    return [decode(260 + 4 * i, accept, 0.53, tput=2700) for i in range(count)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def doctor_json(capsys: pytest.CaptureFixture[str], log: str) -> tuple[int, dict[str, Any]]:
    code, out = run(capsys, "doctor", "--log-file", log, "--baseline-tok-s", "1500", "--json")
    return code, json.loads(out)


def codes(items: list[dict[str, Any]]) -> set[str]:
    return {item["code"] for item in items}


def test_oom_crash_is_critical_with_time_and_cause_in_doctor_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, startup() + serving() + scheduler_exception(300, OOM))
    code, out = run(capsys, "doctor", "--log-file", log, "--baseline-tok-s", "1500")
    assert code == 3
    # The headline says the crash before the (healthy) speed of the windows before it.
    judged = next(line for line in out.splitlines() if line.startswith("judged: "))
    assert judged.startswith(
        "judged: The server crashed at 2026-02-23 00:15:02: CUDA out of memory. "
    )
    assert judged.index("crashed") < judged.index("faster than the baseline")
    assert "CRITICAL  server_crashed: The server crashed" in out
    assert "CUDA out of memory" in out
    assert "--mem-fraction-static" in out
    assert "--gpu-memory-utilization" not in out  # vLLM's flag: nothing an SGLang node has
    assert "nothing wrong" not in out
    code, out = run(capsys, "report", log, "--json")
    assert code == 0
    report = json.loads(out)
    crashed = [f for f in report["findings"] if f["code"] == "server_crashed"]
    assert crashed and crashed[0]["severity"] == "critical"
    assert "00:15:02: CUDA out of memory" in crashed[0]["seen"]  # T0 + 300 s, as logged
    assert report["headline"].startswith("The server crashed at 2026-02-23 00:15:02")


def test_nccl_error_names_the_interconnect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nccl = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:317, unhandled system error, NCCL version 2.21.5"
    )
    log = write_log(tmp_path, startup() + serving() + scheduler_exception(300, nccl))
    code, report = doctor_json(capsys, log)
    assert code == 3
    finding = next(f for f in report["findings"] if f["code"] == "server_crashed")
    assert "NCCL error" in finding["seen"]
    assert "NCCL_DEBUG=INFO" in finding["fix"]


def test_capture_oom_at_startup_is_a_failed_start_not_a_log_level_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        *startup()[:5],
        f"{stamp(25, 'TP0')} Capture cuda graph begin. This can take up to several minutes.",
        *scheduler_exception(
            27,
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50 "
            "GiB. GPU 0 has a total capacity of 79.10 GiB of which 612.00 MiB is free.",
        )[:-2],
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "",
        f"{stamp(27)} Received sigquit from a child process. It usually means the child failed.",
    ]
    log = write_log(tmp_path, lines)
    code, out = run(capsys, "doctor", "--log-file", log)
    assert code == 3
    assert "--log-level info" not in out
    assert "CRITICAL  server_crashed: The server failed to start" in out
    assert "CUDA graph capture failed: out of GPU memory at start-up" in out
    assert "before any decode window" in out
    assert "lower --mem-fraction-static (0.8, then 0.7) or --cuda-graph-max-bs" in out
    assert "--gpu-memory-utilization" not in out  # vLLM's flag: nothing an SGLang node has
    code, out = run(capsys, "report", log)
    assert code == 0
    assert out.startswith("The server failed to start at 2026-02-23 00:10:29: CUDA graph capture")


def vllm_serving() -> list[str]:
    """Fifty seconds of a vLLM server's stats lines, drafting well."""
    api = "(APIServer pid=2210)"
    lines = []
    for i in range(5):
        at = f"12-01 10:00:{10 * i:02d}"
        lines += [
            f"{api} INFO {at} [loggers.py:248] Engine 000: Avg prompt throughput: 812.4 "
            "tokens/s, Avg generation throughput: 2310.0 tokens/s, Running: 32 reqs, Waiting: "
            "0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 12.0%",
            f"{api} INFO {at} [metrics.py:112] SpecDecoding metrics: Mean acceptance length: "
            "2.84, Accepted throughput: 1498.50 tokens/s, Drafted throughput: 2448.00 tokens/s, "
            "Accepted: 14985 tokens, Drafted: 24480 tokens, Per-position acceptance rate: "
            "0.812, 0.601, 0.427, Avg Draft acceptance rate: 61.2%",
        ]
    return lines


def test_vllm_engine_core_fatal_error_is_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = "(EngineCore_DP0 pid=2431)"
    api = "(APIServer pid=2210)"
    lines = vllm_serving()
    # logger.exception's traceback: vLLM's formatter repeats the record's prefix on each line.
    error = f"{tag} ERROR 12-01 10:00:53 [core.py:1586]"
    lines += [
        f"{error} EngineCore encountered a fatal error.",
        f"{error} Traceback (most recent call last):",
        f'{error}   File "/opt/vllm/vllm/v1/engine/core.py", line 1577, in run_engine_core',
        f"{error}     engine_core.run_busy_loop()",
        f"{error} {OOM}",
        f"{api} ERROR 12-01 10:00:53 [async_llm.py:720] AsyncLLM output_handler failed.",
        f"{api} ERROR 12-01 10:00:53 [async_llm.py:720] Traceback (most recent call last):",
        f"{api} ERROR 12-01 10:00:53 [async_llm.py:720] vllm.v1.engine.exceptions."
        "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
        "cause.",
    ]
    log = write_log(tmp_path, lines)
    code, report = doctor_json(capsys, log)
    assert code == 3
    finding = next(f for f in report["findings"] if f["code"] == "server_crashed")
    assert finding["seen"].startswith("engine core fatal error at ")
    assert "10:00:53: CUDA out of memory" in finding["seen"]
    assert "--gpu-memory-utilization or --max-num-seqs" in finding["fix"]
    assert "--mem-fraction-static" not in finding["fix"]  # SGLang's flag


# A draft folder that is not there: transformers' own chain, as a real scheduler printed it.
HUB_MISS = (
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the "
    "disk cache and outgoing traffic has been disabled. To enable hf.co look-ups and downloads "
    "online, set 'local_files_only' to False."
)
NO_DRAFT = (
    "OSError: Can't load the configuration of '/models/Llama-3.1-8B-Instruct/eagle3-draft'. "
    "Make sure '/models/Llama-3.1-8B-Instruct/eagle3-draft' is the correct path to a "
    "directory containing a config.json file"
)


def chained(
    first: str, chain: str = "The above exception was the direct cause of the following exception:"
) -> list[str]:
    """The traceback of ``first``, then the chain line and the traceback it led to."""
    return [
        '  File "/usr/lib/python3.12/site-packages/transformers/utils/hub.py", line 479, in '
        "cached_files",
        "    hf_hub_download(",
        first,
        "",
        chain,
        "",
        "Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/configs/model_config.py", line 212, in __init__',
        "    self.hf_config = get_config(",
    ]


@pytest.mark.parametrize(
    "chain",
    [
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
    ],
)
def test_a_chained_traceback_is_quoted_by_its_final_exception_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chain: str
) -> None:
    lines = scheduler_exception(300, NO_DRAFT)
    lines[6:6] = chained(HUB_MISS, chain)  # before the final exception
    code, report = doctor_json(capsys, write_log(tmp_path, startup() + serving() + lines))
    assert code == 3
    finding = next(f for f in report["findings"] if f["code"] == "server_crashed")
    assert NO_DRAFT in finding["seen"]  # whole: both paths, to the end of the line
    assert "LocalEntryNotFoundError" not in finding["seen"]


def test_a_traceback_after_the_crash_keeps_the_crash_s_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's API server says the engine died in a traceback of its own, chained to what it
    was doing: the engine core's exception before it stays the cause."""
    error = "(EngineCore_DP0 pid=2431) ERROR 12-01 10:00:53 [core.py:1586]"
    api = "(APIServer pid=2210) ERROR 12-01 10:00:53 [async_llm.py:720]"
    lines = [
        *vllm_serving(),
        f"{error} EngineCore encountered a fatal error.",
        f"{error} Traceback (most recent call last):",
        f"{error} {NO_DRAFT}",
        f"{api} AsyncLLM output_handler failed.",
        f"{api} Traceback (most recent call last):",
        f"{api} zmq.error.ZMQError: Socket operation on non-socket",
        f"{api} ",
        f"{api} The above exception was the direct cause of the following exception:",
        f"{api} ",
        f"{api} Traceback (most recent call last):",
        f"{api} vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
        "stack trace (above) for the root cause.",
    ]
    code, report = doctor_json(capsys, write_log(tmp_path, lines))
    assert code == 3
    finding = next(f for f in report["findings"] if f["code"] == "server_crashed")
    assert NO_DRAFT in finding["seen"]
    assert "EngineDeadError" not in finding["seen"]


def test_an_exception_line_too_long_to_quote_is_cut_between_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = "/models/" + "very-long-folder-name/" * 5 + "config.json"
    long = f"ValueError: {'the draft does not match the target ' * 6}at {path} (see above)"
    lines = scheduler_exception(300, long)
    code, report = doctor_json(capsys, write_log(tmp_path, startup() + serving() + lines))
    assert code == 3
    seen = next(f for f in report["findings"] if f["code"] == "server_crashed")["seen"]
    quoted = seen[seen.index("ValueError") :].split("…")[0]
    assert long.startswith(quoted) and len(quoted) < len(long)
    assert long[len(quoted)] == " "  # cut where a word ends, not inside the path or a word
    assert "…" in seen


def test_a_traceback_followed_by_windows_ended_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One request's failure: the node serves on, and no crash is claimed."""
    failed_request = [
        "Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/entrypoints/http_server.py", line 720, in generate',
        "ValueError: The input (131090 tokens) is longer than the model's context length",
    ]
    healthy = startup() + serving(4) + failed_request + serving(8)[4:]
    code, report = doctor_json(capsys, write_log(tmp_path, healthy))
    assert code == 0
    assert not codes(report["findings"]) & {"server_crashed", "server_failing"}


def test_a_traceback_with_no_window_after_it_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dying = (
        startup()
        + serving()
        + [
            "Traceback (most recent call last):",
            '  File "/opt/sglang/python/sglang/srt/managers/tokenizer_manager.py", line 2110, in '
            "handle_loop",
            "RuntimeError: Tokenizer worker stopped responding",
        ]
    )
    code, report = doctor_json(capsys, write_log(tmp_path, dying))
    assert code == 1
    finding = next(f for f in report["findings"] if f["code"] == "server_failing")
    assert "RuntimeError: Tokenizer worker stopped responding" in finding["seen"]


def test_a_restart_after_the_crash_judges_the_new_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = startup() + serving() + scheduler_exception(300, OOM) + startup() + serving()
    code, report = doctor_json(capsys, write_log(tmp_path, lines))
    assert code == 0
    assert "server_crashed" not in codes(report["findings"])


def test_an_earlier_run_that_crashed_is_named_in_doctor_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node that died of OOM and was restarted serves now (exit 0), but the on-call reading
    its log learns that and when the earlier run crashed: a crash loop is never silent."""
    lines = startup() + serving() + scheduler_exception(300, OOM) + startup() + serving()
    log = write_log(tmp_path, lines)
    code, out = run(capsys, "doctor", "--log-file", log, "--baseline-tok-s", "1500")
    assert code == 0
    earlier = next(line for line in out.splitlines() if "earlier run 2026" in line)
    assert "The server crashed at 2026-02-23 00:15:02: CUDA out of memory" in earlier
    code, out = run(capsys, "report", log, "--json")
    first, newest = json.loads(out)["runs"]
    assert first["ended"] == "The server crashed at 2026-02-23 00:15:02: CUDA out of memory"
    assert newest["ended"] is None


def test_a_prompt_quoting_a_crash_is_no_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    echo = (
        f"{stamp(270, 'TP0')} Receive: obj=GenerateReqInput(text='why does my log say Scheduler "
        "hit an exception: torch.OutOfMemoryError: CUDA out of memory', sampling_params={})"
    )
    code, report = doctor_json(capsys, write_log(tmp_path, [*startup(), echo, *serving()]))
    assert code == 0
    assert report["findings"] == []


def interrupted(process: str, last_call: str) -> list[str]:
    """A child process's traceback when SIGINT reaches it: SGLang's scheduler and detokenizer
    catch ``Exception`` only, so multiprocessing prints the ``KeyboardInterrupt`` itself."""
    return [
        f"Process {process}:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
        "    self.run()",
        f'  File "/opt/sglang/python/sglang/srt/managers/{last_call}", line 165, in event_loop',
        "KeyboardInterrupt",
    ]


def uvicorn_stop(seconds: float, pid: int = 1765) -> list[str]:
    """What uvicorn writes as its server stops, then SGLang's launcher cleaning up."""
    return [
        f"{stamp(seconds)} INFO:     Shutting down",
        f"{stamp(seconds)} INFO:     Waiting for application shutdown.",
        f"{stamp(seconds)} INFO:     Application shutdown complete.",
        f"{stamp(seconds)} INFO:     Finished server process [{pid}]",
        f"{stamp(seconds)} kill_process_tree called: parent_pid={pid}, include_parent=False, "
        f"pid={pid}",
    ]


# SIGINT (Ctrl-C, a container stop) reaches every process of the group: the children's
# tracebacks come first, the two printed at once may interleave line by line.
CLEAN_STOP = [
    *interrupted("Process-1", "scheduler.py"),
    *interrupted("Process-2", "detokenizer_manager.py"),
    *uvicorn_stop(300),
]


def test_a_clean_stop_after_interrupted_children_is_no_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path, startup() + serving() + CLEAN_STOP)
    code, report = doctor_json(capsys, log)
    assert code == 0
    assert not codes(report["findings"]) & {"server_crashed", "server_failing"}
    code, out = run(capsys, "report", log, "--json")
    (stopped,) = json.loads(out)["runs"]
    assert stopped["ended"] == "The server was stopped at 2026-02-23 00:15:02"


def test_interleaved_interrupted_tracebacks_are_still_a_clean_stop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = interrupted("Process-1", "scheduler.py"), interrupted("Process-2", "io_struct.py")
    mixed = [line for pair in zip(one, two, strict=True) for line in pair]
    log = write_log(tmp_path, startup() + serving() + mixed + uvicorn_stop(300))
    code, report = doctor_json(capsys, log)
    assert code == 0
    assert not codes(report["findings"]) & {"server_crashed", "server_failing"}


def test_interrupted_children_without_the_server_stopping_warn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT sent to the scheduler alone: it is gone, the HTTP server serves on, nothing
    decodes."""
    log = write_log(tmp_path, startup() + serving() + interrupted("Process-1", "scheduler.py"))
    code, report = doctor_json(capsys, log)
    assert code == 1
    assert "server_failing" in codes(report["findings"])


def test_another_exception_before_a_stop_still_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A traceback of something else than the stop, and no decode window since: the stop that
    followed does not explain it away."""
    died = [
        "Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/managers/tokenizer_manager.py", line 2110, in '
        "handle_loop",
        "RuntimeError: Tokenizer worker stopped responding",
    ]
    for lines in (died + CLEAN_STOP, CLEAN_STOP[:-5] + died + CLEAN_STOP[-5:]):
        code, report = doctor_json(capsys, write_log(tmp_path, startup() + serving() + lines))
        assert code == 1
        finding = next(f for f in report["findings"] if f["code"] == "server_failing")
        assert "RuntimeError: Tokenizer worker stopped responding" in finding["seen"]


def test_a_crash_then_a_stop_is_still_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = startup() + serving() + scheduler_exception(300, OOM) + CLEAN_STOP
    code, report = doctor_json(capsys, write_log(tmp_path, lines))
    assert code == 3
    assert "server_crashed" in codes(report["findings"])


def test_vllm_interrupted_and_stopped_is_no_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's processes tag their lines; the same stop reads the same."""
    tagged = [
        "(EngineCore_DP0 pid=1520) Traceback (most recent call last):",
        '(EngineCore_DP0 pid=1520)   File "/usr/lib/python3.12/multiprocessing/process.py", '
        "line 314, in _bootstrap",
        "(EngineCore_DP0 pid=1520) KeyboardInterrupt",
        "(APIServer pid=1410) INFO:     Shutting down",
        "(APIServer pid=1410) INFO:     Finished server process [1410]",
    ]
    log = write_log(tmp_path, vllm_serving() + tagged)
    code, report = doctor_json(capsys, log)
    assert code == 0
    assert not codes(report["findings"]) & {"server_crashed", "server_failing"}
    code, report = doctor_json(capsys, write_log(tmp_path, vllm_serving() + tagged[:3]))
    assert code == 1
    assert "server_failing" in codes(report["findings"])
