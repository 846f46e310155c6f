"""``specwatch report`` on logs of broken drafters and of a healthy server.

The logs in ``tests/data/logs`` are Feb-2026 SGLang output (startup lines, prefill and decode
stats, access lines) written with known values, so every expected number below is worked out
by hand from what was put in:

* collapsed: EAGLE3, 4 draft tokens; 4 windows at 12 running, 300 tok/s; then 56 at
  48 running alternating 590 / 610 tok/s (mean 600); accept len 1.00 everywhere.
* undertrained: 16 draft tokens, disable_cuda_graph=True, single stream; accept len
  cycles 2.30 / 2.50 / 2.70 and throughput 55 / 57 / 59 over 30 windows.
* mismatched: 4 draft tokens, single stream; accept len 1.00 / 1.03 / 1.08, 50 / 52 /
  54 tok/s over 30 windows.
* healthy: 4 draft tokens, 32 running; accept len 3.0 / 3.2 / 3.4, 2156 / 2256 / 2356 tok/s.

The bench file gives 1560 tok/s at concurrency 48 and 1100 at 24, so the baseline at 32 is
1100 + 460 * 8 / 24 = 1253.3, and at 12 it is 610.5 + 489.5 * 4 / 16 = 732.9.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.analysis.baseline import Baseline
from exporter.cli import main
from exporter.parse.reader import Progress
from exporter.report import build_report
from exporter.simulate import SCENARIOS
from tests.support import speclogs
from tests.support.loglines import decode, startup

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
LOGS = DATA / "logs"
BENCH = str(DATA / "bench_serving_baseline.jsonl")
# The collapsed verdict's summary: a critical headline says it before any speed figure.
COLLAPSED = "Speculative decoding collapsed: no draft token is accepted"
CHART_TITLES = (
    "Accept length over time",
    "Throughput vs baseline over time",
    "Throughput vs baseline by concurrency band",
    "Running and queued requests over time",
)


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def json_report(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, _ = report(capsys, "--json", *args)
    assert code == 0
    loaded: dict[str, Any] = json.loads(out)
    return loaded


@pytest.mark.parametrize(
    ("log", "baseline", "headline"),
    [
        (  # 600 / 1560 = 0.385: 61.5% less
            "collapsed.log",
            ["--baseline-bench", BENCH],
            f"{COLLAPSED}. Speculation is slower than the baseline: 62% less throughput "
            "(0.38x), 600 tok/s at 48 running vs 1,560 tok/s baseline",
        ),
        (  # 57 / 90 = 0.633
            "undertrained.log",
            ["--baseline-tok-s", "90"],
            "Speculation is slower than the baseline: 37% less throughput (0.63x), 57 tok/s at "
            "1 running vs 90 tok/s baseline",
        ),
        (  # 52 / 82 = 0.634
            "mismatched.log",
            ["--baseline-curve", "1:82,48:1500,128:2370"],
            f"{COLLAPSED}. Speculation is slower than the baseline: 37% less throughput "
            "(0.63x), 52 tok/s at 1 running vs 82 tok/s baseline",
        ),
        (  # 2256 / 1253.3 = 1.800
            "healthy.log",
            ["--baseline-bench", BENCH],
            "Speculation is faster than the baseline: 80% more throughput (1.8x), 2,256 tok/s at "
            "32 running vs 1,253 tok/s baseline",
        ),
    ],
)
def test_headline_says_which_way_and_by_how_much(
    capsys: pytest.CaptureFixture[str], log: str, baseline: list[str], headline: str
) -> None:
    code, out, err = report(capsys, str(LOGS / log), *baseline)
    assert code == 0
    assert err == ""  # no progress bar: stderr is not a terminal here
    # Then what it was judged on, and since when.
    assert out.splitlines()[0].startswith(f"{headline}. Judged on the newest ")


def test_collapsed_drafter_evidence_and_bands(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(LOGS / "collapsed.log"), "--baseline-bench", BENCH)
    assert "Accept length: min 1.00, median 1.00, p90 1.00 over 60 windows" in out
    assert "Collapsed windows (accept length <= 1.05): 100%" in out
    assert "CUDA graph used in 100% of decode windows" in out
    assert re.search(r"8-31 +4 +300 +733 +0\.41x", out)
    assert re.search(r"32-63 +56 +600 +1,560 +0\.38x", out)
    assert "CRITICAL: Speculative decoding collapsed: no draft token is accepted" in out
    assert "drafter itself needs fixing" in out


def test_collapsed_drafter_numbers_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    data = json_report(capsys, str(LOGS / "collapsed.log"), "--baseline-bench", BENCH)
    # 60 decode windows; 61 prefill batches (one per window plus the warm-up request).
    assert (data["decode_windows"], data["prefill_windows"]) == (60, 61)
    assert data["lines"] == 215
    # From the warm-up prefill (09:02:30) to the last decode window (09:12:31).
    assert (data["first_time"], data["last_time"]) == ("2026-02-23T09:02:30", "2026-02-23T09:12:31")
    assert data["span_seconds"] == 601
    assert data["accept_length"]["collapsed_share"] == 1.0
    assert data["config"]["num_draft_tokens"] == 4
    assert data["config"]["algorithm"] == "EAGLE3"
    bands = {b["label"]: b for b in data["bands"]}
    assert bands["32-63"]["median_running"] == 48
    assert bands["32-63"]["speedup"] == pytest.approx(600 / 1560)
    assert bands["8-31"]["mean_baseline"] == pytest.approx(610.5 + 489.5 * 4 / 16)
    # Overall: (4 * 300 + 56 * 600) / (4 * 732.875 + 56 * 1560)
    overall = (4 * 300 + 56 * 600) / (4 * 732.875 + 56 * 1560)
    assert data["overall"]["speedup"] == pytest.approx(overall)
    assert data["breakeven"]["verdict"] == "fewer"
    assert data["breakeven"]["suggested_num_draft_tokens"] == 1


def test_undertrained_drafter_warns_on_three_counts(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(LOGS / "undertrained.log")
    _, out, _ = report(capsys, log, "--baseline-tok-s", "90")
    assert out.startswith("Speculation is slower than the baseline")  # count one
    assert "Accept length: min 2.30, median 2.50, p90 2.70 over 30 windows" in out
    assert "CUDA graph used in 0% of decode windows" in out
    assert "Fewer draft tokens would help" in " ".join(out.split())  # wherever it wraps
    data = json_report(capsys, log, "--baseline-tok-s", "90")
    findings = {f["code"]: f for f in data["findings"]}
    assert {"cuda_graph_disabled", "draft_tokens_excessive"} <= set(findings)  # counts two, three
    assert data["cuda_graph_share"] == 0.0
    assert data["breakeven"]["verdict"] == "fewer"
    # The finding's advice is the break-even count from the measured 57 / 90 tok/s.
    suggested = data["breakeven"]["suggested_num_draft_tokens"]
    assert f"to about {suggested} " in findings["draft_tokens_excessive"]["fix"]
    assert "measured speedup" in findings["draft_tokens_excessive"]["fix"]


def test_mismatched_drafter_accept_length_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(LOGS / "mismatched.log")
    data = json_report(capsys, log, "--baseline-curve", "1:82,48:1500,128:2370")
    assert data["accept_length"]["median"] == 1.03
    assert data["accept_length"]["collapsed_share"] == pytest.approx(20 / 30)
    assert data["accept_length"]["mean"] == pytest.approx((1.00 + 1.03 + 1.08) / 3)
    assert data["overall"]["speedup"] == pytest.approx(52 / 82)


def test_healthy_server_has_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(LOGS / "healthy.log"), "--baseline-bench", BENCH)
    assert "Findings: none" in out
    assert "4 draft tokens is about right" in " ".join(out.split())  # wherever it wraps


def test_without_baseline_the_headline_says_how_to_give_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = report(capsys, str(LOGS / "healthy.log"))
    assert out.splitlines()[0].startswith("Speculation does 2,256 tok/s at 32 running; no baseline")
    assert "--baseline-tok-s" in out.splitlines()[0]


def test_expected_accept_length_shortfall_is_stated(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(LOGS / "undertrained.log")
    # Mean (2.30 + 2.50 + 2.70) / 3 = 2.50; the alert's limit is 70% of the expected value.
    _, out, _ = report(capsys, log, "--expected-accept-length", "4")
    assert "WARNING: Accept length below expectation: mean accept length 2.50" in out
    [verdict] = json_report(capsys, log, "--expected-accept-length", "4")["verdicts"]
    assert (verdict["code"], verdict["severity"]) == ("accept_length_low", "warning")
    assert "below 2.80 (70% of the expected 4)" in verdict["seen"]
    # 70% of 3.2 is 2.24: 2.50 is short of the expectation but no verdict, as for the alert.
    _, out, _ = report(capsys, log, "--expected-accept-length", "3.2")
    assert "Accept length below expectation" not in out


def test_html_page_is_self_contained_with_four_matplotlib_charts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "report.html"
    log = str(LOGS / "collapsed.log")
    code, _, err = report(capsys, log, "--baseline-bench", BENCH, "--html", str(page))
    assert code == 0
    assert f"HTML report written to {page}" in err
    text = page.read_text(encoding="utf-8")
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)">', text)
    assert [alt for alt, _ in images] == list(CHART_TITLES)
    for _, data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    for title in CHART_TITLES:
        assert f"<h2>{title}</h2>" in text
    assert (
        f'<p class="headline">{COLLAPSED}. Speculation is slower than the baseline: 62% less'
        in text
    )
    assert not re.search(r'(src|href)="(https?:)?//', text)  # nothing fetched from elsewhere


@pytest.mark.e2e
def test_html_without_matplotlib_exits_2_naming_the_extra(tmp_path: Path) -> None:
    # A real process in which importing matplotlib fails, as on a node without the extra.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'matplotlib' or name.startswith('matplotlib.'):\n"
        "            raise ImportError('blocked for the test')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    page = tmp_path / "out.html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "report",
            str(LOGS / "healthy.log"),
            "--html",
            str(page),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    # specwatch is not on PyPI: the extra is installed from the checkout, never by a name
    # anyone could register there.
    assert "specwatch[report]" not in result.stderr
    assert "pip install '.[report]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not page.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--baseline-curve", "48:1500,1:82"], "--baseline-curve"),
        (["--baseline-tok-s", "-3"], "--baseline-tok-s"),
        (["--baseline-bench", str(DATA / "bench_serving_speculative.jsonl")], "--baseline-bench"),
        (["--expected-accept-length", "0.5"], "--expected-accept-length"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    code, out, err = report(capsys, str(LOGS / "healthy.log"), *args)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert named in err


def test_missing_log_file_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.log"
    code, _, err = report(capsys, str(missing))
    assert code == 2
    assert str(missing) in err


def test_files_are_read_in_order_and_gzip_rotations_transparently(tmp_path: Path) -> None:
    # The healthy log split in two, the older half gzipped as logrotate leaves it.
    lines = (LOGS / "healthy.log").read_bytes().splitlines(keepends=True)
    older, newer = tmp_path / "server.log.1.gz", tmp_path / "server.log"
    older.write_bytes(gzip.compress(b"".join(lines[:60])))
    newer.write_bytes(b"".join(lines[60:]))
    whole = build_report([str(LOGS / "healthy.log")])
    split = build_report([str(older), str(newer)])
    assert (split.lines, split.decode_windows) == (whole.lines, whole.decode_windows)
    assert split.accept == whole.accept
    assert split.overall == whole.overall
    assert split.config == whole.config


def test_overlong_lines_are_skipped_counted_and_the_rest_kept(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    shutil.copy(LOGS / "healthy.log", log)
    with log.open("ab") as f:
        f.write(b"[2026-02-23 09:08:00] " + b"x" * (2 << 20) + b"\n")
        f.write(
            b"[2026-02-23 09:08:10 TP0] Decode batch, #running-req: 32, #token: 38400, "
            b"token usage: 0.03, accept len: 3.20, accept rate: 0.80, cuda graph: True, "
            b"gen throughput (token/s): 2256.00, #queue-req: 0"  # no final newline: still read
        )
    result = build_report([str(log)])
    assert result.skipped_lines == {"too_long": 1}
    assert result.decode_windows == 31


def drained(leader: int) -> bytes:
    """All a closed terminal was sent: one read may return only the first write."""
    chunks = []
    while select.select([leader], [], [], 5.0)[0]:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the other end is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_progress_bar_is_drawn_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        progress = Progress(total_bytes=(LOGS / "healthy.log").stat().st_size, stream=terminal)
        progress.update(10)
        progress.close()
    drawn = drained(leader).decode()
    os.close(leader)
    assert "reading [" in drawn
    assert drawn.endswith("\r\x1b[K")


def test_progress_bar_stays_silent_off_a_terminal(tmp_path: Path) -> None:
    target = tmp_path / "stderr.txt"
    with target.open("w") as stream:
        progress = Progress(total_bytes=100, stream=stream)
        progress.update(50)
        progress.close()
    assert target.read_text() == ""


# "recovery" is two runs in one log: no single behaviour describes its overall speedup.
@pytest.mark.parametrize("scenario", sorted(set(SCENARIOS) - {"recovery"}))
def test_report_on_each_simulated_incident(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    """Every scenario as the simulator writes it, against its own baseline:
    the findings the scenario declares, and the verdict its throughput implies."""
    log = tmp_path / f"{scenario}.log"
    assert main(["simulate", "--scenario", scenario, "--out", str(log)]) == 0
    intended = SCENARIOS[scenario]
    data = json_report(capsys, str(log), "--baseline-curve", intended.baseline_flag())
    assert {f["code"] for f in data["findings"]} == set(intended.findings)
    behaviour = intended.phases[-1].behaviour
    expected = behaviour.gen_throughput / Baseline(intended.baseline, "scenario").at(
        behaviour.running
    )
    assert data["overall"]["speedup"] == pytest.approx(expected, rel=0.05)
    word = "faster" if expected > 1 else "slower"
    said = f"Speculation is {word} than the baseline"
    # A run that mostly did not draft (adaptive at high load) is not speculation being faster
    # or slower, only the node with speculation kept ready.
    run = data["runs"][-1]
    if run["drafting_off_windows"] >= 0.5 * run["decode_windows"]:
        said = "With drafting off the node runs "
        assert f"% {'above' if expected > 1 else 'below'} the baseline (" in data["headline"]
    # A critical state is said first: the collapse, before how slow it made the node.
    judged = data["verdicts"] + data["findings"]
    critical = "; ".join(v["summary"] for v in judged if v["severity"] == "critical")
    head = f"{critical}. " if critical else ""
    assert data["headline"].startswith(f"{head}{said}")


def test_after_a_restart_findings_and_advice_judge_the_last_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An undertrained drafter (16 draft tokens, eager decode) for 10 windows, then a restart
    # with 4 draft tokens and CUDA graphs: 6 healthy windows. Mixed together, 10 of 16 windows
    # ran eagerly.
    first = startup(num_draft_tokens=16, topk=4, steps=6, disable_cuda_graph=True)
    first += [decode(300 + 5 * i, 2.5, 0.16, graph=False, running=1, tput=57) for i in range(10)]
    second = [line.replace("[2026-02-23 00:", "[2026-02-23 01:") for line in startup()]
    second += [decode(4000 + 4 * i, 3.2, 0.8, running=8, tput=900) for i in range(6)]
    log = tmp_path / "server.log"
    log.write_text("\n".join(first + second) + "\n")
    data = json_report(capsys, str(log))
    assert data["findings"] == []
    assert (data["server_starts"], data["latest_start"]) == (2, "2026-02-23T01:10:02")
    assert data["config"]["num_draft_tokens"] == 4
    # Accept length 3.2 of 4 tokens: per-position acceptance a with 1 + a + a^2 + a^3 = 3.2.
    alpha = data["breakeven"]["per_position_acceptance"]
    assert 1 + alpha + alpha**2 + alpha**3 == pytest.approx(3.2)
    _, out, _ = report(capsys, str(log))
    assert "Server starts: 2; the headline, verdicts, findings and draft-token advice" in out


def test_mixin_config_thresholds_decide_what_counts_as_collapsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the user's mixin file, report calls collapsed what the user's alerts call collapsed:
    accept length 1.00 / 1.03 / 1.08 is collapsed at the shipped 1.05, not at 1.02."""
    log = str(LOGS / "mismatched.log")
    mixin = tmp_path / "mixin.yaml"
    mixin.write_text("thresholds:\n  collapsed_accept_length: 1.02\n")
    shipped = json_report(capsys, log)
    assert shipped["accept_length"]["collapsed_share"] == pytest.approx(20 / 30)
    own = json_report(capsys, log, "--mixin-config", str(mixin))
    assert own["accept_length"]["collapsed_share"] == pytest.approx(10 / 30)
    code, out, _ = report(capsys, log)
    assert "Speculative decoding collapsed" in out and "(accept length <= 1.05)" in out
    code, out, _ = report(capsys, log, "--mixin-config", str(mixin))
    assert code == 0
    assert "Speculative decoding collapsed" not in out and "(accept length <= 1.02)" in out
    assert "Accept length below expectation" in out  # still below any EAGLE drafter's floor


def test_bad_mixin_config_exits_2_naming_flag_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixin = tmp_path / "mixin.yaml"
    mixin.write_text("thresholds:\n  collapsed_for: soon\n")
    code, out, err = report(capsys, str(LOGS / "healthy.log"), "--mixin-config", str(mixin))
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert "--mixin-config" in err and "collapsed_for" in err


def test_each_run_line_says_what_the_restart_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A drafter swapped for another and the tree narrowed: each run names its own setup."""
    first = startup(num_draft_tokens=16, topk=4, steps=6)
    first += [decode(260 + 4 * i, 1.0, 0.0, tput=600) for i in range(5)]
    second = startup(draft_path="/models/kimi-k25-eagle3-v2")
    second += [decode(260 + 4 * i, 3.0, 0.67, tput=2600) for i in range(5)]
    log = tmp_path / "runs.log"
    log.write_text("".join(f"{line}\n" for line in first + second))
    code, out, _ = report(capsys, str(log))
    assert code == 0
    assert "(EAGLE3, 16 draft tokens, draft /models/kimi-k25-eagle3)" in " ".join(out.split())
    assert "(EAGLE3, 4 draft tokens, draft /models/kimi-k25-eagle3-v2)" in " ".join(out.split())
    runs = json_report(capsys, str(log))["runs"]
    assert [(r["algorithm"], r["num_draft_tokens"], r["draft_model"]) for r in runs] == [
        ("EAGLE3", 16, "/models/kimi-k25-eagle3"),
        ("EAGLE3", 4, "/models/kimi-k25-eagle3-v2"),
    ]


def test_report_names_the_graph_the_engine_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SGLang on an Ascend NPU logs ``npu graph: True``: the report speaks of NPU graphs."""
    lines = [speclogs.server_args("DSPARK", draft_path="/models/dspark")]
    lines += [speclogs.decode(60 + 4 * i, 3.4, graph="npu graph") for i in range(6)]
    log = tmp_path / "npu.log"
    log.write_text("\n".join(lines) + "\n")
    _, out, _ = report(capsys, str(log))
    assert "NPU graph used in 100% of decode windows" in out
    assert "CUDA graph" not in out
