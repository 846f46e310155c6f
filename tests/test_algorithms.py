"""Each algorithm judged by its own standard: floors, collapses and fixes per family."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.analysis.algorithms import LOWEST_FLOOR, STANDARDS, floor_for, standard_for
from exporter.analysis.thresholds import DEFAULT
from exporter.engines import registry
from exporter.engines.engine import Engine
from tests.support.daemon import doctor
from tests.support.docs import doc, section
from tests.support.loglines import VLLM_START, stamp, vllm_interval
from tests.support.speclogs import decode, server_args

BASELINE = ("--baseline-curve", "1:82,48:1500,128:2370")


def _load(model_class: str, at: float) -> str:
    return (
        f"{stamp(at, 'TP0')} Load weight end. elapsed=9.41 s, type={model_class}, "
        "dtype=torch.bfloat16, avail mem=16.20 GB, mem usage=7.02 GB."
    )


def _doctor(tmp_path: Path, lines: list[str]) -> tuple[int, dict[str, Any]]:
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    result = doctor("--log-file", str(log), *BASELINE, "--json")
    return result.returncode, json.loads(result.stdout)


def _codes(report: dict[str, Any]) -> set[str]:
    items = [*report["verdicts"], *report["findings"]]
    return {item["code"] for item in items}


def _verdict(report: dict[str, object], code: str) -> dict[str, str]:
    found: list[dict[str, str]] = report["verdicts"]  # type: ignore[assignment]
    return next(verdict for verdict in found if verdict["code"] == code)


def _ngram(accept: float, tput: float) -> list[str]:
    lines = [server_args("NGRAM", steps=7, topk=1, draft_tokens=8)]
    return lines + [decode(300 + 5 * i, accept, draft_tokens=8, tput=tput) for i in range(8)]


def _sglang_mtp(accept: float, tput: float) -> list[str]:
    """DeepSeek with NEXTN: SGLang serves it as EAGLE, the draft loads as a NextN class."""
    lines = [
        server_args("EAGLE", draft_path="deepseek-ai/DeepSeek-V3.2", steps=3, draft_tokens=4),
        _load("DeepseekV32ForCausalLM", 20),
        _load("DeepseekV3ForCausalLMNextN", 30),
    ]
    return lines + [decode(300 + 5 * i, accept, tput=tput) for i in range(8)]


@pytest.mark.e2e
def test_healthy_ngram_node_is_neither_low_nor_wasting_draft_tokens(tmp_path: Path) -> None:
    """Accept length 1.6 with 8 lookup tokens, 1.25x the baseline: healthy for n-grams."""
    code, report = _doctor(tmp_path, _ngram(1.6, 1875.0))
    assert _codes(report) == set()
    assert code == 0


@pytest.mark.e2e
def test_healthy_mtp_node_is_not_judged_by_the_eagle_floor(tmp_path: Path) -> None:
    """1.65 is below EAGLE's 1.8 but healthy for MTP layers (floor 1.4)."""
    code, report = _doctor(tmp_path, _sglang_mtp(1.65, 1900.0))
    assert _codes(report) == set()
    assert code == 0


@pytest.mark.e2e
def test_mtp_below_its_own_floor_is_low_with_the_mtp_fix(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, _sglang_mtp(1.3, 1600.0))
    [verdict] = report["verdicts"]
    assert verdict["code"] == "accept_length_low"
    assert "below 1.40, the floor of MTP drafters" in verdict["seen"]
    assert "MTP layers" in verdict["fix"]
    assert code == 1


@pytest.mark.parametrize(
    ("algorithm", "draft", "collapse_words"),
    [
        ("NGRAM", None, "does not repeat its context"),
        ("STANDALONE", "meta-llama/Llama-3.2-1B-Instruct", "tokenizer"),
        ("DFLASH", "z-lab/DeepSeek-V3.2-DFlash", "block draft model"),
        ("UNO", "/models/uno-adapter", "UNO draft adapter"),
        ("EAGLE", "/models/eagle3", "EAGLE3 algorithm"),
        # Served with EAGLE3 already: no advice to switch to it.
        ("EAGLE3", "/models/eagle3", "trained for this target model and version"),
    ],
)
@pytest.mark.e2e
def test_collapsed_node_of_every_family_is_critical_with_its_own_fix(
    tmp_path: Path, algorithm: str, draft: str | None, collapse_words: str
) -> None:
    lines = [server_args(algorithm, draft_path=draft, draft_tokens=4)]
    lines += [decode(300 + 5 * i, 1.0, tput=600.0) for i in range(8)]
    code, report = _doctor(tmp_path, lines)
    collapsed = [v for v in report["verdicts"] if v["code"] == "accept_length_collapsed"]
    assert collapsed and collapsed[0]["severity"] == "critical"
    assert collapse_words in collapsed[0]["fix"]
    assert code == 3


@pytest.mark.e2e
def test_a_collapse_is_fixed_in_the_flags_of_the_engine_that_logged_it(tmp_path: Path) -> None:
    """The on-call of a vLLM node reads vLLM's settings, an SGLang node's on-call SGLang's;
    neither reads the other engines' flags or TensorRT-LLM's."""
    eagle = VLLM_START.replace("method='eagle3'", "method='eagle'")
    vllm = [eagle] + [line for i in range(6) for line in vllm_interval(10 * i)]
    _, report = _doctor(tmp_path, vllm)
    collapse = _verdict(report, "accept_length_collapsed")
    assert 'vLLM "method": "eagle3" in --speculative-config' in collapse["fix"]
    assert "SGLang" not in collapse["fix"] and "TensorRT-LLM" not in collapse["fix"]
    sglang = [server_args("EAGLE", draft_path="/models/eagle3")]
    sglang += [decode(300 + 5 * i, 1.0, tput=600.0) for i in range(8)]
    _, report = _doctor(tmp_path, sglang)
    collapse = _verdict(report, "accept_length_collapsed")
    assert "SGLang --speculative-algorithm EAGLE3" in collapse["fix"]
    assert "vLLM" not in collapse["fix"] and "TensorRT-LLM" not in collapse["fix"]


@pytest.mark.e2e
def test_collapsed_sglang_mtp_is_critical(tmp_path: Path) -> None:
    code, report = _doctor(tmp_path, _sglang_mtp(1.0, 600.0))
    assert "accept_length_collapsed" in _codes(report)
    assert code == 3


@pytest.mark.e2e
def test_unknown_algorithm_is_judged_on_speed_only_and_says_so(tmp_path: Path) -> None:
    """A plugin's algorithm at 1.00: no accept-length verdict, an info finding, and the speed
    verdict still holds (here: faster than the baseline, so nothing wrong)."""
    lines = [server_args("MY_SPEC", draft_path="/models/mine")]
    lines += [decode(300 + 5 * i, 1.0, tput=1600.0) for i in range(8)]
    code, report = _doctor(tmp_path, lines)
    assert _codes(report) == {"algorithm_unknown"}
    assert code == 0
    lines = [*lines[:1], *(decode(400 + 5 * i, 1.0, tput=600.0) for i in range(8))]
    code, report = _doctor(tmp_path, lines)
    assert _codes(report) == {"algorithm_unknown", "slower_than_baseline"}


@pytest.mark.parametrize(
    ("engine", "name", "architecture", "family"),
    [
        ("vllm", "eagle3", None, "EAGLE"),
        ("vllm", "deepseek_mtp", None, "MTP"),
        ("vllm", "qwen3_next_mtp", None, "MTP"),
        ("vllm", "mtp", None, "MTP"),
        ("vllm", "ngram_gpu", None, "NGRAM"),
        ("vllm", "suffix", None, "SUFFIX"),
        ("vllm", "draft_model", None, "DRAFT_MODEL"),
        ("vllm", "dspark", None, "BLOCK_DRAFT"),
        ("vllm", "medusa", None, "MEDUSA"),
        ("sglang", "NEXTN", None, "MTP"),
        ("sglang", "FROZEN_KV_MTP", None, "MTP"),
        ("sglang", "STANDALONE", None, "DRAFT_MODEL"),
        ("sglang", "DFLASH", None, "BLOCK_DRAFT"),
        ("sglang", "UNO", None, "UNO"),
        # NEXTN as its server arguments show it: EAGLE, the draft loaded as a NextN class.
        ("sglang", "EAGLE", "DeepseekV3ForCausalLMNextN", "MTP"),
        ("sglang", "EAGLE", "LlamaForCausalLMEagle3", "EAGLE"),
        ("trtllm", "DRAFT_MODEL", None, "DRAFT_MODEL"),
        ("trtllm", "Eagle3", None, "EAGLE"),
        # Nothing names the engine: the first that knows the name says.
        (None, "deepseek_mtp", None, "MTP"),
        (None, "STANDALONE", None, "DRAFT_MODEL"),
        (None, "EAGLE", "DeepseekV3ForCausalLMNextN", "MTP"),
    ],
)
def test_each_engines_names_map_to_their_family(
    engine: str | None, name: str, architecture: str | None, family: str
) -> None:
    standard = standard_for(name, architecture, engine)
    assert standard is not None and standard.family == family


def test_an_engine_judges_only_its_own_spellings() -> None:
    """SGLang's NEXTN is no vLLM method, nor vLLM's suffix decoding an SGLang algorithm: each
    engine is asked for the names it logs, and none other decides for it."""
    assert standard_for("NEXTN", engine="vllm") is None
    assert standard_for("suffix", engine="sglang") is None
    assert standard_for("UNO", engine="trtllm") is None


@pytest.mark.parametrize("engine", registry.ENGINES, ids=registry.NAMES)
def test_every_engine_judges_by_a_standard_there_is(engine: Engine) -> None:
    """What an engine answers is a neutral name with a standard, never a spelling of its own
    that would leave its algorithm judged on speed only."""
    spellings = {*STANDARDS, "NEXTN", "STANDALONE", "FROZEN_KV_MTP", "NGRAM_GPU", "DFLASH"}
    spellings |= {"DSPARK", "DRAFTTARGET", "DEEPSEEK_MTP", "SUFFIX", "MY_SPEC", "CUSTOM_CLASS"}
    for spelled in (*spellings, *(name.lower() for name in spellings)):
        for architecture in (None, "DeepseekV3ForCausalLMNextN", "LlamaForCausalLMEagle3"):
            judged = engine.judged_as(spelled, architecture)
            assert judged is None or judged in STANDARDS, (spelled, judged)


def test_each_name_in_the_algorithms_table_is_judged_by_its_row_as_its_engine_judges_it() -> None:
    """docs/metrics.md's Algorithms table gives each engine's own spellings in a column under
    its title; every one is judged by its row's family, as that engine judges it (a note in
    parentheses is read as prose)."""
    table = [
        row for row in section(doc("metrics.md"), "## Algorithms").splitlines() if row[:1] == "|"
    ]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    titles = {engine.title: engine.name for engine in registry.ENGINES}
    columns = {index: titles[title] for index, title in enumerate(header) if title in titles}
    assert set(columns.values()) == {"sglang", "vllm", "trtllm"}
    checked = 0
    for row in table[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for index, engine in columns.items():
            for name in re.findall(r"`([^`*]+)`", re.sub(r"\([^)]*\)", "", cells[index])):
                standard = standard_for(name, engine=engine)
                assert standard is not None and standard.family == cells[0], (engine, name)
                checked += 1
    assert checked >= 25


def test_unknown_names_have_no_standard_and_an_unnamed_method_holds_for_every_method() -> None:
    """Nothing names the method (vLLM's /metrics): judged by the lowest floor of any method,
    never by EAGLE's (an n-gram drafter at 1.5 is not low)."""
    assert standard_for("custom_class") is None
    unknown = standard_for(None)
    assert unknown is not None and unknown.family == "unknown method"
    assert unknown.floor == LOWEST_FLOOR == 1.2
    assert "EAGLE" not in unknown.collapse_fix


def test_floor_is_capped_for_few_draft_steps_and_collapse_stays_below_every_floor() -> None:
    eagle = standard_for("EAGLE3")
    assert eagle is not None
    assert floor_for(eagle, 1) == 1.5
    assert floor_for(eagle, 3) == eagle.floor
    assert DEFAULT.collapsed_accept_length < LOWEST_FLOOR
