"""``specwatch doctor --url`` carries what its scrape found: the engine, whose flags alone it
names, and whether the draft's files are mounted where it runs.

A real SGLang 0.5.15 server, its EAGLE-3 head collapsed, was diagnosed as "metrics: ok
(SGLang)" with ``config.engine`` null, and its fix listed TensorRT-LLM's and vLLM's flags and
advised switching to EAGLE3, the algorithm it was already served with.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import doctor, specwatch_cmd
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang, server_info
from tests.support.sglang_metrics import Rank, SGLangMetrics
from tests.support.upstream_servers import vllm_schema
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

OTHER_ENGINES = {
    "sglang": ("vLLM", "TensorRT-LLM", "--speculative-config", "speculative_config"),
    "vllm": ("SGLang", "TensorRT-LLM", "--speculative-algorithm"),
}


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def collapsed_sglang(
    server: FakeSGLang, algorithm: str, draft: str = "/models/llama-eagle3-head"
) -> dict[str, Any]:
    """doctor --url --json of an SGLang server whose draft accepts nothing."""
    metrics = SGLangMetrics(dp=1)
    metrics.stats(0, Rank(running=6, accept_length=1.0003))
    server.routes["/metrics"] = Route(body=metrics.body())
    info = server_info(speculative_algorithm=algorithm, speculative_draft_model_path=draft)
    server.routes["/server_info"] = Route(body=info, content_type="application/json")
    result = doctor("--url", server.url, "--json")
    assert result.returncode == 3, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def texts(report: dict[str, Any]) -> str:
    items = [*report["verdicts"], *report["findings"]]
    return "\n".join(f"{item['why']} {item['fix']}" for item in items)


def test_sglang_served_with_eagle3_gets_sglang_texts_and_no_advice_to_use_eagle3(
    server: FakeSGLang,
) -> None:
    report = collapsed_sglang(server, "EAGLE3")
    assert report["config"]["engine"] == "sglang"
    assert [v["code"] for v in report["verdicts"]] == ["accept_length_collapsed"]
    said = texts(report)
    assert not [word for word in OTHER_ENGINES["sglang"] if word in said]
    assert "EAGLE3" not in said  # the run already is EAGLE3: nothing to switch to
    assert "trained for this target model and version" in said


def test_sglang_served_with_eagle_is_told_sglang_s_flag_alone(server: FakeSGLang) -> None:
    """The incident: an EAGLE-3 head under EAGLE. The fix names SGLang's flag, once."""
    report = collapsed_sglang(server, "EAGLE")
    assert report["config"]["engine"] == "sglang"
    said = texts(report)
    assert "SGLang --speculative-algorithm EAGLE3" in said
    assert not [word for word in OTHER_ENGINES["sglang"] if word in said]


def test_vllm_carries_its_engine_and_only_its_flags(server: FakeSGLang) -> None:
    server.routes["/metrics"] = Route(body=vllm_schema("vllm:", 1000, 1500, (700, 500, 300)))
    cmd = specwatch_cmd("doctor", "--url", server.url, "--scrape-gap", "1", "--json")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(server.seen_auth) >= 1, timeout=15)
    # 1000 rounds since, 2 drafts accepted: collapsed.
    server.routes["/metrics"] = Route(body=vllm_schema("vllm:", 2000, 1502, (701, 501, 300)))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    report = json.loads(out)
    assert report["config"]["engine"] == "vllm"
    said = texts(report)
    assert said and not [word for word in OTHER_ENGINES["vllm"] if word in said]


def test_doctor_says_the_draft_s_files_are_not_mounted_here(
    server: FakeSGLang, tmp_path: Path
) -> None:
    missing = tmp_path / "eagle3-head"
    report = collapsed_sglang(server, "EAGLE3", str(missing))
    assert report["config"]["draft_config"] == "absent"
    assert report["config"]["draft_architecture"] is None
    note = next(n for n in report["notes"] if n.startswith(f"draft {missing}"))
    assert "not mounted" in note and "known only from the algorithm (EAGLE3)" in note


def test_doctor_says_the_draft_s_kind_was_read_from_its_mounted_files(
    server: FakeSGLang, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    report = collapsed_sglang(server, "EAGLE", str(tmp_path))
    assert report["config"]["draft_config"] == "read"
    assert (
        f"draft {tmp_path}: LlamaForCausalLMEagle3, read from its config.json here"
        in (report["notes"])
    )
    assert "eagle3_draft_with_eagle_algorithm" in [f["code"] for f in report["findings"]]
