"""``specwatch doctor --url`` on a vLLM server: no ``/server_info`` asked, accept length from
its counters between two scrapes, and the same figure the daemon's scrape of it shows.

The server is a loopback HTTP server writing vLLM's counter names
(``vllm:spec_decode_num_drafts_total`` ...), advanced by the test between the two scrapes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.config import TargetConfig
from exporter.target import Target
from tests.support.daemon import specwatch_cmd
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang
from tests.support.upstream_servers import scrape, vllm_schema
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

BEFORE = {"drafts": 1000, "accepted": 1500, "per_position": (700, 500, 300)}


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def serve(server: FakeSGLang, counters: dict[str, Any]) -> None:
    server.routes["/metrics"] = Route(body=vllm_schema("vllm:", **counters))


def doctor_across(server: FakeSGLang, after: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    """doctor --url while the counters move from BEFORE to ``after`` between its scrapes."""
    serve(server, BEFORE)
    cmd = specwatch_cmd("doctor", "--url", server.url, "--scrape-gap", "2", "--json")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(server.seen_auth) >= 1, timeout=15)
    serve(server, after)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, json.loads(out), err


def daemon_accept_length(server: FakeSGLang, after: dict[str, Any]) -> object:
    """What the daemon's scraper shows for the same two expositions."""
    target = Target.from_config(TargetConfig(name="v", metrics_url=f"{server.url}/metrics"))
    serve(server, BEFORE)
    scrape(target)
    serve(server, after)
    return scrape(target)["accept_length"]


def test_collapsed_vllm_is_critical_from_two_scrapes_as_the_daemon_sees_it(
    server: FakeSGLang,
) -> None:
    # 400 drafts and not one token accepted since the first scrape
    after = {"drafts": 1400, "accepted": 1500, "per_position": (700, 500, 300)}
    code, report, err = doctor_across(server, after)
    assert code == 3, report
    assert [v["code"] for v in report["verdicts"]] == ["accept_length_collapsed"]
    assert "two scrapes 2 s apart" in report["verdicts"][0]["seen"]
    assert report["problems"] == []
    assert report["sources"] == {"metrics": "ok (vLLM at /metrics; two scrapes 2 s apart)"}
    assert server.paths == ["/metrics", "/metrics"]  # never /server_info
    assert "waiting 2 s for a second scrape" in err
    assert daemon_accept_length(server, after) == pytest.approx(1.0)


def test_healthy_vllm_is_nothing_wrong(server: FakeSGLang) -> None:
    # 400 drafts, 1040 accepted: 1 + 1040 / 400 = 3.6
    after = {"drafts": 1400, "accepted": 2540, "per_position": (1060, 860, 620)}
    code, report, _ = doctor_across(server, after)
    assert code == 0, report
    assert report["verdicts"] == [] and report["problems"] == []
    assert report["notes"][0] == (
        "accept length 3.60 from the server's counters between two scrapes 2 s apart "
        "(400 draft rounds)"
    )
    # vLLM's /metrics names no method: said, and only what holds for every method judged.
    assert report["notes"][1].startswith("method unknown: nothing read names it")
    assert report["verdict"]["method"]["known"] is False
    assert daemon_accept_length(server, after) == pytest.approx(3.6)


def test_idle_vllm_is_not_judged_and_says_so(server: FakeSGLang) -> None:
    code, report, _ = doctor_across(server, BEFORE)
    assert code == 1
    assert report["verdicts"] == []
    assert report["problems"] == [
        "accept length not judged: /metrics gave no draft in the 2 s between two scrapes (an "
        "idle server, or speculation off); give --log-file to judge its history"
    ]


def test_a_collapse_of_an_unnamed_method_is_told_without_naming_eagle(server: FakeSGLang) -> None:
    """vLLM's /metrics names no method: a collapsed draft model is not told to fix "the EAGLE
    draft" nor to try eagle3."""
    after = {"drafts": 1400, "accepted": 1500, "per_position": (700, 500, 300)}
    code, report, _ = doctor_across(server, after)
    assert code == 3
    [verdict] = report["verdicts"]
    assert verdict["code"] == "accept_length_collapsed"
    assert "EAGLE" not in verdict["why"] + verdict["fix"]
    assert "eagle3" not in verdict["fix"]
    assert "Nothing read names the speculative method" in verdict["fix"]
    assert report["verdict"]["drafts"] == 400


def test_an_unnamed_method_is_held_to_the_lowest_floor_not_eagles(server: FakeSGLang) -> None:
    """1 + 200 / 400 = 1.5: low for EAGLE (1.8), healthy for n-gram (1.2); nothing says which,
    so only what holds for every method is judged."""
    after = {"drafts": 1400, "accepted": 1700, "per_position": (850, 550, 300)}
    code, report, _ = doctor_across(server, after)
    assert report["verdicts"] == []
    assert report["verdict"]["state"] == "healthy"
    assert code == 0
