"""Verdicts on a node's state, per incident, from ``specwatch doctor`` and ``specwatch report``.

Every log is written here in SGLang's Feb-2026 line formats (startup, prefill, decode with
``accept len``), with values chosen so each expected number is worked out by hand below. The
commands run through the CLI's own entry point in this process (``in_process``: the exit
status, stdout and stderr a child would give); tests/test_doctor.py runs them as processes.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest

from exporter.config import BaselineConfig, TargetConfig
from exporter.exposition.insight import inspect
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.daemon import in_process
from tests.support.fake_sglang import Route, fake_sglang, server_info
from tests.support.loglines import decode, prefill, stamp, startup

pytestmark = pytest.mark.e2e

CURVE = "1:82,48:1500,128:2370"


def doctor(*args: str) -> tuple[int, dict[str, Any], str]:
    """Run doctor twice, as JSON and as text; the same status both times."""
    as_json = in_process("doctor", "--json", *args)
    text = in_process("doctor", *args)
    assert as_json.returncode == text.returncode, text.stderr
    return as_json.returncode, json.loads(as_json.stdout), text.stdout


def report(*args: str) -> dict[str, Any]:
    result = in_process("report", "--json", *args)
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def write(tmp_path: Path, lines: list[str], name: str = "server.log") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def verdicts(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["code"]: v for v in data["verdicts"]}


def collapsed_log() -> list[str]:
    """A drafter that accepts nothing: accept len 1.00 in all 20 windows, 48 running with 32
    queued at the EAGLE cap, 590 / 610 tok/s alternating (mean 600)."""
    lines = startup()
    for i in range(20):
        lines.append(prefill(258 + 4 * i, running=47))
        lines.append(
            decode(260 + 4 * i, 1.00, 0.25, running=48, queued=32, tput=590 + 20 * (i % 2))
        )
    return lines


def test_collapse_is_critical_and_slower_than_the_baseline(tmp_path: Path) -> None:
    status, data, text = doctor(
        "--log-file", write(tmp_path, collapsed_log()), "--baseline-tok-s", "2370"
    )
    assert status == 3
    found = verdicts(data)
    assert found["accept_length_collapsed"]["severity"] == "critical"
    assert found["accept_length_collapsed"]["seen"].startswith(
        "mean accept length 1.00, at or below the collapse line of 1.05, over 20 decode windows"
    )
    # 600 / 2370 = 0.253: how slow it made the node is in the collapse's own words, not a
    # ticket beside the page (the alert rules have it so too).
    assert "600 tok/s, 0.25x the baseline." in found["accept_length_collapsed"]["seen"]
    assert "slower_than_baseline" not in found
    assert data["run"]["speedup"] == pytest.approx(600 / 2370)
    assert "CRITICAL  accept_length_collapsed" in text
    assert "nothing wrong" not in text


def test_collapse_with_a_baseline_below_the_node_says_the_baseline_is_wrong(tmp_path: Path) -> None:
    """82 tok/s is a single stream's baseline; at 48 running it would make 600 tok/s 7.3x,
    impossible with accept length 1.00: no headline of success."""
    log = write(tmp_path, collapsed_log())
    data = report(log, "--baseline-curve", "1:82")
    assert data["headline"].startswith(
        "Speculative decoding collapsed: no draft token is accepted. The baseline looks wrong, "
        "so speed is not judged"
    )
    assert "faster" not in data["headline"]
    implausible = verdicts(data)["baseline_implausible"]
    assert "--baseline-curve's 82 tok/s" in implausible["seen"]
    assert "cannot be more than 1.00x faster" in implausible["seen"]
    assert "slower_than_baseline" not in verdicts(data)
    status, doc, _ = doctor("--log-file", log, "--baseline-curve", "1:82")
    assert status == 3  # the collapse still pages
    assert set(verdicts(doc)) == {"accept_length_collapsed", "baseline_implausible"}


def test_wrong_algorithm_flag_is_critical_finding_and_collapsed_verdict(tmp_path: Path) -> None:
    lines = startup(algorithm="EAGLE")
    lines += [decode(300 + 4 * i, 1.00, 0.25, running=12, tput=611.09) for i in range(5)]
    status, data, text = doctor("--log-file", write(tmp_path, lines))
    assert status == 3
    assert [f["code"] for f in data["findings"]] == ["eagle3_draft_with_eagle_algorithm"]
    assert list(verdicts(data)) == ["accept_length_collapsed"]
    assert "fix:  Restart the server with the EAGLE-3 algorithm" in text
    assert "SGLang --speculative-algorithm EAGLE3" in text


def undertrained_log() -> list[str]:
    """16 draft tokens, CUDA graphs off, single stream: accept len 2.00 / 2.25 / 2.50 (mean
    2.25) at 48 / 57 / 60 tok/s (mean 55) over 12 windows."""
    lines = startup(num_draft_tokens=16, topk=4, steps=6, disable_cuda_graph=True)
    values = [(2.00, 48.0), (2.25, 57.0), (2.50, 60.0)]
    for i in range(12):
        accept, tput = values[i % 3]
        lines.append(decode(300 + 5 * i, accept, 0.08, graph=False, running=1, tput=tput))
    return lines


def break_even_count(accept_length: float, tokens: int, speedup: float) -> int:
    """The model of docs/troubleshooting.md, worked independently: per-position acceptance a from
    1 + a + ... + a^(N-1) = AL, cost k per drafted token from C = AL / S = 1 + k (N - 1), and
    the count up to 2N with the best (1 + a + ... + a^(n-1)) / (1 + k (n - 1))."""
    low, high = 0.0, 1.0
    for _ in range(100):
        a = (low + high) / 2
        low, high = (a, high) if sum(a**i for i in range(tokens)) < accept_length else (low, a)
    k = (accept_length / speedup - 1) / (tokens - 1)
    return max(
        range(1, 2 * tokens + 1), key=lambda n: sum(a**i for i in range(n)) / (1 + k * (n - 1))
    )


def test_undertrained_drafter_warns_and_doctor_and_report_advise_the_same_count(
    tmp_path: Path,
) -> None:
    log = write(tmp_path, undertrained_log())
    flags = ("--baseline-tok-s", "90", "--expected-accept-length", "3.5")
    status, data, _ = doctor("--log-file", log, *flags)
    assert status == 1
    found = verdicts(data)
    assert set(found) == {"accept_length_low", "slower_than_baseline"}
    # 70% of the expected 3.5 is 2.45; the mean is 2.25.
    assert (
        "mean accept length 2.25 over 12 decode windows (480 draft rounds, 2026-02-23 00:15:02 to "
        "00:15:57 UTC), below 2.45" in found["accept_length_low"]["seen"]
    )
    assert (
        "55 tok/s at 1 running request against a baseline of 90 tok/s"
        in (found["slower_than_baseline"]["seen"])
    )
    assert {f["code"] for f in data["findings"]} == {
        "cuda_graph_disabled",
        "draft_tokens_excessive",
    }
    count = break_even_count(2.25, 16, 55 / 90)
    assert 1 < count < 16
    fix = next(f["fix"] for f in data["findings"] if f["code"] == "draft_tokens_excessive")
    assert f"to about {count} " in fix and "measured speedup" in fix
    summary = report(log, *flags)
    assert summary["breakeven"]["suggested_num_draft_tokens"] == count
    assert set(verdicts(summary)) == set(found)


def test_mismatched_drafter_is_low_not_collapsed_and_slower(tmp_path: Path) -> None:
    """Accept len 1.08 / 1.10 / 1.12 (mean 1.10): a few drafts accepted, so not collapsed, but
    below the 1.8 floor; 52 tok/s single-stream against the curve's 82 = 0.63x."""
    lines = startup()
    lengths = (1.08, 1.10, 1.12)
    lines += [decode(300 + 5 * i, lengths[i % 3], 0.03, running=1, tput=52.0) for i in range(9)]
    status, data, _ = doctor("--log-file", write(tmp_path, lines), "--baseline-curve", CURVE)
    assert status == 1
    found = verdicts(data)
    assert set(found) == {"accept_length_low", "slower_than_baseline"}
    assert (
        "mean accept length 1.10 over 9 decode windows (360 draft rounds, 2026-02-23 00:15:02 to "
        "00:15:42 UTC), below 1.80" in found["accept_length_low"]["seen"]
    )
    assert "(0.63x)" in found["slower_than_baseline"]["seen"]


def test_empty_metrics_endpoint_alone_is_nothing_judged(tmp_path: Path) -> None:
    with fake_sglang() as server:
        server.routes["/metrics"] = Route(body=b"", content_type="text/plain")
        # A server_info without enable_metrics: nothing says the metrics are on.
        info = server_info(speculative_algorithm="EAGLE3", enable_metrics=None)
        server.routes["/server_info"] = Route(body=info, content_type="application/json")
        status, data, text = doctor("--url", server.url)
    assert status == 1
    assert [f["code"] for f in data["findings"]] == ["metrics_endpoint_disabled"]
    assert data["findings"][0]["seen"] == "/metrics is empty."
    assert data["verdicts"] == []
    assert any("nothing could be judged" in p for p in data["problems"])
    assert "nothing wrong" not in text


def healthy_log() -> list[str]:
    """Accept len 3.0 / 3.2 / 3.4 at 32 running, 2,156 / 2,256 / 2,356 tok/s (mean 2,256)."""
    lines = startup()
    for i in range(12):
        accept, tput = 3.0 + 0.2 * (i % 3), 2156.0 + 100 * (i % 3)
        lines.append(decode(300 + 4 * i, accept, 0.73, running=32, tput=tput))
    return lines


def test_healthy_node_is_clean_and_faster(tmp_path: Path) -> None:
    # Curve at 32 running: 82 + (1500 - 82) * 31 / 47 = 1017.3; 2256 / 1017.3 = 2.2x.
    log = write(tmp_path, healthy_log())
    status, data, text = doctor(
        "--log-file", log, "--baseline-curve", CURVE, "--expected-accept-length", "3"
    )
    assert status == 0
    assert data["verdicts"] == [] and data["findings"] == []
    assert data["run"]["speedup"] == pytest.approx(2256 / (82 + 1418 * 31 / 47))
    assert "Speculation is faster than the baseline: 122% more throughput (2.2x)" in text
    assert "nothing wrong" in text


def test_idle_server_is_clean_and_says_speed_was_not_judged(tmp_path: Path) -> None:
    # Started, then only /health probes (1-token prefills) for ten minutes.
    lines = startup() + [prefill(60 + 30 * i, new_tokens=1, running=0) for i in range(20)]
    status, data, text = doctor("--log-file", write(tmp_path, lines), "--baseline-curve", CURVE)
    assert status == 0
    assert data["verdicts"] == [] and data["findings"] == []
    assert data["sources"]["log"] == "21 stats lines"
    assert "an idle server): accept length and speed were not judged" in text


def test_log_without_stats_lines_judges_nothing_and_says_so(tmp_path: Path) -> None:
    lines = [line for line in startup() if "Prefill batch" not in line]
    lines.append(f'{stamp(60)} INFO:     127.0.0.1:40312 - "GET /health HTTP/1.1" 200 OK')
    status, data, text = doctor("--log-file", write(tmp_path, lines))
    assert status == 1
    assert data["sources"]["log"] == "0 stats lines"
    assert "problem: log: no stats lines at all, so nothing could be judged" in text


def test_restart_gives_a_line_per_run_and_the_headline_speaks_of_the_newest(tmp_path: Path) -> None:
    """A collapsed run (accept 1.00, 600 tok/s at 48), then a restart with a working drafter
    (accept 3.2 mean, 2,256 tok/s at 32 running)."""
    second = [line.replace("2026-02-23 00:", "2026-02-23 01:") for line in healthy_log()]
    log = write(tmp_path, collapsed_log() + second)
    data = report(log, "--baseline-curve", CURVE)
    old, new = data["runs"]
    assert old["accept_length"] == pytest.approx(1.0)
    assert [v["code"] for v in old["verdicts"]] == ["accept_length_collapsed"]
    assert old["speedup"] == pytest.approx(600 / 1500)
    assert (new["started_at"], new["accept_length"]) == ("2026-02-23T01:10:02", pytest.approx(3.2))
    assert new["verdicts"] == []
    assert data["headline"].startswith("Speculation is faster than the baseline")
    differ = "(newest of 2 server runs; earlier runs differ). Judged on the newest"
    assert differ in data["headline"]
    result = in_process("report", log, "--baseline-curve", CURVE)
    text = " ".join(result.stdout.split())  # unwrapped
    assert "Server runs (2):" in text
    # Each run names its setup (the same in both runs of this log).
    setup = "(EAGLE3, 4 draft tokens, draft /models/kimi-k25-eagle3)"
    assert (
        f"- 2026-02-23 00:10:49 to 2026-02-23 00:15:38 {setup}: accept length 1.00, 600 tok/s "
        "at 48 running, 0.4x: Speculative decoding collapsed: no draft token is accepted"
    ) in text
    assert (
        f"- 2026-02-23 01:10:49 to 2026-02-23 01:15:46 {setup}: accept length 3.20, 2,256 tok/s "
        "at 32 running, 2.2x: nothing wrong"
    ) in text
    status, _, doctor_text = doctor("--log-file", log, "--baseline-curve", CURVE)
    assert status == 0  # the node as it is now: the newest run
    assert (
        f"judged: earlier run 2026-02-23 00:10:49 to 2026-02-23 00:15:38 {setup}: accept length "
        "1.00"
    ) in doctor_text


def test_doctor_judges_by_the_config_file_and_names_its_key(tmp_path: Path) -> None:
    config = tmp_path / "specwatch.yaml"
    config.write_text(
        "targets:\n  - name: node-a\n    log_files: [/var/log/sglang/server.log]\n"
        "    baseline: {curve: '1:82'}\n    expected_accept_length: 3.0\n"
    )
    status, data, _ = doctor(
        "--log-file", write(tmp_path, collapsed_log()), "--config", str(config)
    )
    assert status == 3
    implausible = verdicts(data)["baseline_implausible"]
    assert f"baseline.curve in {config}'s 82 tok/s" in implausible["seen"]
    # A flag wins over the file.
    status, data, _ = doctor(
        "--log-file",
        write(tmp_path, collapsed_log()),
        "--config",
        str(config),
        "--baseline-tok-s",
        "2370",
    )
    assert "0.25x the baseline" in verdicts(data)["accept_length_collapsed"]["seen"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--baseline-curve", "48:1500,1:82"), "--baseline-curve: curve"),
        (("--expected-accept-length", "0.5"), "--expected-accept-length: must be at least 1"),
        (("--config", "/nonexistent/specwatch.yaml"), "--config:"),
    ],
)
def test_bad_judging_options_exit_2_naming_the_option(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = in_process("doctor", "--log-file", write(tmp_path, healthy_log()), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_daemon_finding_gives_doctor_s_draft_token_advice_word_for_word(tmp_path: Path) -> None:
    """The daemon's path (log feed, target state, insight) on the same undertrained log."""
    log = write(tmp_path, undertrained_log())
    target = Target.from_config(
        TargetConfig(name="node", log_files=[log], baseline=BaselineConfig(tok_s=90))
    )
    LogFeed(target.state).on_lines([line.encode() for line in undertrained_log()])
    snap, now = target.state.snapshot(), time.time()
    insight = inspect(target, snap, snap.fresh_windows(now, 60), now, 60)
    daemon_fix = next(f.fix for f in insight.findings if f.code == "draft_tokens_excessive")
    _, data, _ = doctor("--log-file", log, "--baseline-tok-s", "90")
    doctor_fix = next(f["fix"] for f in data["findings"] if f["code"] == "draft_tokens_excessive")
    assert daemon_fix == doctor_fix
    assert f"to about {break_even_count(2.25, 16, 55 / 90)} " in daemon_fix


def test_doctor_reads_a_gzipped_rotation_as_report_does(tmp_path: Path) -> None:
    path = tmp_path / "server.log.1.gz"
    path.write_bytes(gzip.compress(("\n".join(collapsed_log()) + "\n").encode()))
    status, data, _ = doctor("--log-file", str(path))
    assert status == 3
    assert data["sources"]["log"] == "41 stats lines"  # warm-up prefill, 20 prefills, 20 decodes
    assert list(verdicts(data)) == ["accept_length_collapsed"]
