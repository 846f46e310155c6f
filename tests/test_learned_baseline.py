"""A baseline learned from a log served without speculation: ``specwatch baseline`` and
``--baseline-log``, on logs written as SGLang 0.5.23 and vLLM 0.33 write them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from exporter.analysis.baseline import OWN_LOG, BaselineError
from exporter.analysis.load_bands import BAND_LABELS, PLAIN_BANDS, band_of
from exporter.analysis.plain_speed import DRAFTING_OFF_COST, MIN_BAND_WINDOWS, PlainSpeed
from exporter.cli import main
from exporter.config import BaselineConfig, TargetConfig
from exporter.exposition.landing import landing_page
from exporter.report.learn import baseline_from_log, learn_log
from exporter.simulate import generate
from exporter.state.feed import LogFeed
from exporter.target import Target
from tests.support.metrics import Clock, Scrape, render
from tests.support.plainlogs import sglang_plain, vllm_plain
from tests.support.speclogs import decode as spec_decode
from tests.support.speclogs import healthy_adaptive, runtime_switched

CURVE = ((1, 82.0), (48, 1500.0), (128, 2370.0))
LOADS = ((1, 20), (48, 30), (128, 25))
# The learned throughput is the mean of windows that wobble up to 3% around the curve.
TOLERANCE = 0.01


def test_every_load_falls_in_one_band_and_the_bands_are_contiguous() -> None:
    for index, (label, low, high) in enumerate(PLAIN_BANDS):
        assert band_of(low) == index, label
        if high is not None:
            assert band_of(high) == index, label
            assert band_of(high + 1) == index + 1, label
    assert band_of(10_000) == len(PLAIN_BANDS) - 1
    assert BAND_LABELS[band_of(48)] == "33-64"


def test_a_band_with_too_few_windows_gives_no_point() -> None:
    speed = PlainSpeed()
    for _ in range(MIN_BAND_WINDOWS - 1):
        speed.add(3, 240.0)
    for _ in range(MIN_BAND_WINDOWS):
        speed.add(48, 1500.0)
    speed.add(0, 10.0)  # an idle moment says nothing of speed
    assert [(p.band, p.windows) for p in speed.points()] == [("33-64", MIN_BAND_WINDOWS)]


@pytest.mark.parametrize("write", [sglang_plain, vllm_plain], ids=["sglang-0.5.23", "vllm-0.33"])
def test_the_curve_that_went_in_comes_back(tmp_path: Path, write: object) -> None:
    log = tmp_path / "plain.log"
    log.write_text(write(LOADS, CURVE))  # type: ignore[operator]
    learned = learn_log([str(log)])
    assert [(p.band, p.running, p.windows) for p in learned.points] == [
        ("1", 1.0, 20),
        ("33-64", 48.0, 30),
        ("65-128", 128.0, 25),
    ]
    for point, (_, tok_s) in zip(learned.points, CURVE, strict=True):
        assert point.tok_s == pytest.approx(tok_s, rel=TOLERANCE)


def test_a_learned_baseline_speaks_only_for_the_bands_it_saw(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_text(sglang_plain(LOADS, CURVE))
    baseline = baseline_from_log(log)
    assert baseline.kind == OWN_LOG
    assert baseline.covers(1) and baseline.covers(40) and baseline.covers(100)
    assert not baseline.covers(8)  # 5-8: no window there
    assert not baseline.covers(300)
    assert baseline.at(48) == pytest.approx(1500, rel=TOLERANCE)


def test_a_speculative_log_is_refused_with_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "spec.log"
    log.write_text("\n".join(generate("healthy", duration=120)) + "\n")
    with pytest.raises(BaselineError, match=r"speculative decoding \(its server arguments name "):
        learn_log([str(log)])


def test_a_log_without_start_lines_is_refused_by_its_accept_lengths(tmp_path: Path) -> None:
    lines = list(generate("healthy", duration=120))
    decodes = [line for line in lines if "Decode batch" in line]
    log = tmp_path / "tail.log"
    log.write_text("\n".join(decodes) + "\n")
    with pytest.raises(BaselineError, match="carries speculation figures"):
        learn_log([str(log)])


def test_command_prints_the_curve_the_flag_and_the_config_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "before-speculation.log"
    log.write_text(sglang_plain(((1, 12), (3, 4), (48, 12)), CURVE))
    assert main(["baseline", str(log)]) == 0
    out = capsys.readouterr().out
    assert "28 decode windows without speculation" in out
    curve = out.split('--baseline-curve "')[1].split('"')[0]
    assert [point.split(":")[0] for point in curve.split(",")] == ["1", "48"]
    assert f'    curve: "{curve}"' in out
    assert "Left out, under 10 windows each: 3-4 (4)." in out
    assert f"--baseline-log {log}" in out


def test_command_json_and_its_curve_is_accepted_by_the_curve_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "plain.log"
    log.write_text(vllm_plain(LOADS, CURVE))
    assert main(["baseline", "--json", str(log)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["windows"] for p in data["points"]] == [20, 30, 25]
    spec = tmp_path / "spec.log"
    spec.write_text("\n".join(generate("healthy", duration=60)) + "\n")
    assert main(["report", "--baseline-curve", data["curve"], str(spec)]) == 0


def test_command_refuses_a_speculative_log_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "spec.log"
    log.write_text("\n".join(generate("collapsed", duration=60)) + "\n")
    assert main(["baseline", str(log)]) == 2
    err = capsys.readouterr().err
    assert "specwatch baseline: error:" in err
    assert "name a speculative algorithm (EAGLE3)" in err
    assert "served without it" in err


def _daemon_scrape(lines: list[str], config: TargetConfig | None = None) -> Scrape:
    """The lines through the daemon's pipeline into a target, then one scrape."""
    target = Target.from_config(config or TargetConfig(name="node"))
    LogFeed(target.state, engine="sglang").on_lines([line.encode() for line in lines])
    clock = Clock()
    clock.now = time.time()
    return render([target], clock)


def _busy_hours_off_then_drafting(tput_drafting: float) -> list[str]:
    """An adaptive node busy at 96 running with drafting off (20 windows at 2,040 tok/s), then
    drafting again at the same load (3 steps, accept length 2.2) at ``tput_drafting``."""
    lines = healthy_adaptive(windows_off=20, tput_off=2040.0)
    lines.append(runtime_switched(0, 3, 260))
    lines += [spec_decode(265 + 5 * i, 2.2, running=96, tput=tput_drafting) for i in range(8)]
    return lines


def test_an_adaptive_node_learns_its_baseline_from_its_drafting_off_windows() -> None:
    scrape = _daemon_scrape(_busy_hours_off_then_drafting(1500.0))
    learned = 2040.0 / (1 - DRAFTING_OFF_COST)
    base = scrape.value(
        "specwatch_baseline_gen_throughput_tokens_per_second", target="node", source="drafting_off"
    )
    assert base == pytest.approx(learned)
    # The later band with drafting on is judged against it: slower than serving plainly.
    assert scrape.value("specwatch_speedup", target="node") == pytest.approx(1500 / learned)
    below = scrape.value("specwatch_windows_vs_baseline_total", target="node", speed="at_or_below")
    assert below == 8


def test_too_few_drafting_off_windows_teach_no_baseline() -> None:
    lines = healthy_adaptive(windows_off=MIN_BAND_WINDOWS - 1, tput_off=2040.0)
    scrape = _daemon_scrape(lines)
    assert scrape.values("specwatch_baseline_gen_throughput_tokens_per_second") == []
    assert scrape.value("specwatch_speedup") is None


def test_a_configured_baseline_wins_over_the_drafting_off_windows() -> None:
    config = TargetConfig(name="node", baseline=BaselineConfig(curve="1:82,96:2000"))
    scrape = _daemon_scrape(_busy_hours_off_then_drafting(1500.0), config)
    assert scrape.values("specwatch_baseline_gen_throughput_tokens_per_second", source="configured")
    assert scrape.value("specwatch_speedup") == pytest.approx(0.75)


def test_the_node_exports_its_throughput_by_band_and_mode() -> None:
    config = TargetConfig(name="node", served_model="kimi-k2.5", hardware="8xH200")
    scrape = _daemon_scrape(_busy_hours_off_then_drafting(1500.0), config)
    name = "specwatch_band_gen_throughput_tokens_per_second"
    labels = {"target": "node", "served_model": "kimi-k2.5", "hardware": "8xH200"}
    off = {**labels, "band": "65-128", "mode": "drafting_off"}
    on = {**labels, "band": "65-128", "mode": "drafting"}
    assert scrape.value(f"{name}_count", **off) == 20
    assert scrape.value(f"{name}_sum", **off) == pytest.approx(20 * 2040.0)
    assert scrape.value(f"{name}_count", **on) == 8
    small = {**labels, "band": "3-4", "mode": "drafting"}  # the 6 windows at 4 running
    assert scrape.value(f"{name}_count", **small) == 6
    assert scrape.values(f"{name}_count", mode="plain") == []


def test_a_server_without_speculation_exports_plain_bands(tmp_path: Path) -> None:
    text = sglang_plain(((1, 12), (48, 12)), CURVE)
    scrape = _daemon_scrape(text.splitlines())
    name = "specwatch_band_gen_throughput_tokens_per_second_count"
    assert scrape.value(name, band="1", mode="plain") == 12
    assert scrape.value(name, band="33-64", mode="plain") == 12
    assert scrape.values("specwatch_speedup") == []


def test_doctor_report_and_the_daemon_give_one_baseline_and_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An adaptive node busy with drafting off, then drafting again at the same load."""
    lines = _busy_hours_off_then_drafting(1500.0)
    log = tmp_path / "adaptive.log"
    log.write_text("\n".join(lines) + "\n")
    learned = 2040.0 / (1 - DRAFTING_OFF_COST)
    assert main(["report", "--json", str(log)]) == 0
    report = json.loads(capsys.readouterr().out)
    main(["doctor", "--json", "--log-file", str(log)])
    doctor = json.loads(capsys.readouterr().out)
    daemon = _daemon_scrape(lines).value(
        "specwatch_baseline_gen_throughput_tokens_per_second", source="drafting_off"
    )
    assert report["baseline_source"] == doctor["baseline"]["source"] == "drafting_off"
    assert doctor["baseline"]["points"] == [{"running": 96.0, "tok_s": pytest.approx(learned)}]
    assert daemon == pytest.approx(learned)
    # The later windows with drafting on are the ones judged against it: 1,500 tok/s.
    newest = report["runs"][-1]
    assert newest["speedup"] == pytest.approx(1500 / learned)
    assert newest["throughput"] == pytest.approx(1500)


def test_a_configured_baseline_is_named_configured_in_report_and_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "adaptive.log"
    log.write_text("\n".join(_busy_hours_off_then_drafting(1500.0)) + "\n")
    curve = ["--baseline-curve", "1:82,96:2000"]
    main(["report", "--json", *curve, str(log)])
    assert json.loads(capsys.readouterr().out)["baseline_source"] == "configured"
    main(["doctor", "--json", *curve, "--log-file", str(log)])
    assert json.loads(capsys.readouterr().out)["baseline"]["source"] == "configured"


def test_the_landing_page_names_the_learned_baseline_and_the_speed_against_it() -> None:
    target = Target.from_config(TargetConfig(name="node"))
    lines = _busy_hours_off_then_drafting(1500.0)
    LogFeed(target.state, engine="sglang").on_lines([line.encode() for line in lines])
    page = landing_page([target], 1e9, time.time).decode()
    learned = 2040.0 / (1 - DRAFTING_OFF_COST)
    assert f"{1500 / learned:.2f}x the baseline (learned from this node's windows" in page
    assert f"baseline: {learned:,.0f} tok/s" in page
