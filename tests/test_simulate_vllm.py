"""``specwatch simulate --engine vllm``: the incidents as a vLLM server logs them, read back."""

from __future__ import annotations

import subprocess
from statistics import fmean

import pytest

from exporter.engines.record import StatsRecord
from exporter.engines.vllm_sim import FORMATS
from exporter.parse.pipeline import LineProcessor
from exporter.simulate import SCENARIOS, generate, playable
from tests.support.daemon import specwatch_cmd
from tests.support.sinks import ListSink


def read_back(lines: list[str]) -> list[StatsRecord]:
    sink = ListSink()
    processor = LineProcessor(sink)  # detected, as a user without --engine gets it
    processor.process([line.encode() for line in lines])
    processor.finish()
    assert processor.engine == "vllm"
    assert sink.unrecognized == []
    return sink.records


def test_vllm_plays_the_scenarios_whose_incident_is_the_drafters() -> None:
    """The others need a flag vLLM lacks (adaptive speculation, an SGLang algorithm name) or
    lines it never writes (finished requests)."""
    assert playable("vllm") == ("healthy", "collapsed", "mismatched", "recovery")


@pytest.mark.parametrize("name", playable("vllm"))
def test_each_scenario_reads_back_as_its_intended_accept_length(name: str) -> None:
    records = read_back(list(generate(name, engine="vllm", duration=600)))
    intended = SCENARIOS[name].phases[-1].behaviour
    last_run = records[-20:]
    assert fmean(r.accept_length for r in last_run if r.accept_length) == pytest.approx(
        intended.accept_length, abs=0.1
    )
    assert {r.running_requests for r in last_run} == {intended.running}
    assert fmean(r.gen_throughput or 0 for r in last_run) == pytest.approx(
        intended.gen_throughput, rel=0.1
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_holds_together_as_vllm_computes_it(fmt: str) -> None:
    records = read_back(list(generate("healthy", engine="vllm", fmt=fmt, duration=120)))
    assert records
    for record in records:
        counts = record.draft_counts
        assert counts is not None and counts.draft_tokens
        assert record.accept_rate == pytest.approx(counts.accepted_tokens / counts.draft_tokens)
        positions = counts.accept_rate_by_position
        if positions is None:
            continue  # the 0.8.3 line has neither per-position rates nor draft rounds
        # Drafts may be shorter than k (vLLM counts rounds, not full drafts): never longer, and
        # never empty.
        assert counts.drafts is not None
        assert counts.drafts * len(positions) >= counts.draft_tokens >= counts.drafts
        assert record.accept_length is not None
        assert record.accept_length == pytest.approx(
            1 + counts.accepted_tokens / counts.drafts, abs=0.006
        )
        assert sum(positions) == pytest.approx(record.accept_length - 1, abs=0.01)


def test_collapsed_drafter_accepts_nothing_in_any_window() -> None:
    records = read_back(list(generate("collapsed", engine="vllm", duration=120)))
    assert {r.accept_length for r in records} == {1.0}
    assert {r.draft_counts.accepted_tokens for r in records if r.draft_counts} == {0}


def test_same_seed_same_bytes() -> None:
    first = list(generate("recovery", engine="vllm", seed=7, duration=200))
    assert first == list(generate("recovery", engine="vllm", seed=7, duration=200))
    assert first != list(generate("recovery", engine="vllm", seed=8, duration=200))


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--scenario", "eagle-flag", "--engine", "vllm"], "--scenario eagle-flag"),
        (["--scenario", "healthy", "--engine", "vllm", "--format-version", "2026-05"], "2026-05"),
        (["--scenario", "healthy", "--format-version", "vllm-0.11"], "vllm-0.11"),
    ],
)
@pytest.mark.e2e
def test_a_scenario_or_format_the_engine_lacks_is_a_usage_error(
    flags: list[str], named: str
) -> None:
    result = subprocess.run(
        specwatch_cmd("simulate", *flags, "--duration", "10"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert named in line
