"""SGLang's counters as SGLang means them, and its gauges only while it decodes.

A real SGLang 0.5.15 server counts each finished request's tokens, verify calls and the
request itself (``observe_one_finished_request``); the first token of every request comes from
its prefill, not from a verify call. Its scheduler gauges keep the last busy window's values
while the server idles (``num_running_reqs`` stayed at 1-6 on a real idle server). Both are
read here over loopback HTTP from SGLang's own metric definitions (``SGLangMetrics``), and
the counters through the shipped recording rule in the real promtool. Its log prints the accept
length with two decimals; the gauge of the same window is the unrounded value.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.analysis.thresholds import DEFAULT
from exporter.config import TargetConfig
from exporter.engines.record import StatsRecord
from exporter.target import Target
from tests.support.daemon import doctor
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang, server_info
from tests.support.recordings import Snapshot, serve_snapshots
from tests.support.sglang_metrics import Rank, SGLangMetrics
from tests.support.tools import RULE_FILES, require_tool
from tests.support.upstream_servers import Seen, scrape

COLLAPSED = DEFAULT.collapsed_accept_length  # 1.05: the collapse rule's threshold
# One scrape a minute for a quarter of an hour: the recording rule's 5-minute rate has data.
MINUTES = 15


@pytest.fixture
def sglang() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def sglang_target(server: FakeSGLang) -> Target:
    return Target.from_config(TargetConfig(name="s", metrics_url=f"{server.url}/metrics"))


def minute_of_traffic(
    metrics: SGLangMetrics, requests: int, tokens: int, drafts_accepted: int, accept: float
) -> None:
    """A minute of ``requests`` completions of ``tokens`` tokens, the scheduler decoding."""
    metrics.stats(0, Rank(running=6, accept_length=accept))
    metrics.decode_passes(0, graph=requests * (tokens - 1 - drafts_accepted), eager=0)
    metrics.completions(requests, tokens, drafts_accepted)


def counted(server: FakeSGLang, tokens: int, drafts_accepted: int, accept: float) -> list[Seen]:
    """What specwatch exports, scraped once a minute, of a node serving such completions."""
    metrics, target, seen = SGLangMetrics(dp=1), sglang_target(server), []
    for _ in range(MINUTES):
        minute_of_traffic(metrics, 120, tokens, drafts_accepted, accept)
        server.routes["/metrics"] = Route(body=metrics.body())
        seen.append(scrape(target))
    return seen


def counter_accept_length(seen: list[Seen]) -> float:
    """``1 + increase(accepted) / increase(drafts)`` over the scrapes."""
    first, last = seen[0], seen[-1]
    assert None not in (first["accepted"], first["drafts"], last["accepted"], last["drafts"])
    accepted = float(last["accepted"] or 0) - float(first["accepted"] or 0)
    drafts = float(last["drafts"] or 0) - float(first["drafts"] or 0)
    return 1 + accepted / drafts


# (tokens per completion, drafts kept per completion, SGLang's accept-length gauge): a dead
# draft keeps one draft in a few hundred rounds, as a random draft did on a real server.
COLLAPSES = {"short completions": (10, 0, 1.0), "long completions": (200, 1, 1.005)}


@pytest.mark.parametrize(("tokens", "kept", "gauge"), COLLAPSES.values(), ids=list(COLLAPSES))
def test_a_collapse_reads_below_the_threshold_from_the_counters(
    sglang: FakeSGLang, tokens: int, kept: int, gauge: float
) -> None:
    """Ten-token completions (classification, routing) of a dead draft: generated minus
    verify calls reads 1 + 1/9 = 1.11, above 1.05, and the page would never fire."""
    seen = counted(sglang, tokens, kept, gauge)
    rounds = tokens - 1 - kept
    assert counter_accept_length(seen) == pytest.approx(1 + kept / rounds)
    assert counter_accept_length(seen) <= COLLAPSED


def test_a_healthy_drafter_reads_its_own_accept_length_on_short_completions(
    sglang: FakeSGLang,
) -> None:
    # 10 tokens: 1 from prefill, then 3 rounds of 3 (2 drafts kept each): accept length 3.0.
    seen = counted(sglang, tokens=10, drafts_accepted=6, accept=3.0)
    assert counter_accept_length(seen) == pytest.approx(3.0)


def promtool_reading(seen: list[Seen], folder: Path) -> str:
    """The shipped recording rule over these scrapes, in the real promtool: whether
    ``target:specwatch_accept_length:rate5m`` is at most the collapse threshold at the end."""
    labels = 'job="specwatch",instance="node-0:9477",target="s"'

    def values(counts: list[float | None]) -> str:
        return " ".join(f"{count or 0:g}" for count in counts)

    scenario: dict[str, Any] = {
        "rule_files": [str(path) for path in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f"specwatch_accepted_tokens_total{{{labels}}}",
                        "values": values([s["accepted"] for s in seen]),
                    },
                    {
                        "series": f"specwatch_drafts_total{{{labels}}}",
                        "values": values([s["drafts"] for s in seen]),
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": f"target:specwatch_accept_length:rate5m <= bool {COLLAPSED}",
                        "eval_time": f"{MINUTES - 1}m",
                        "exp_samples": [{"labels": f"{{{labels}}}", "value": 1}],
                    }
                ],
            }
        ],
    }
    path = folder / "sglang-counters.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return "collapsed" if result.returncode == 0 else result.stdout + result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(("tokens", "kept", "gauge"), COLLAPSES.values(), ids=list(COLLAPSES))
def test_the_recording_rule_reads_a_collapse_in_promtool(
    sglang: FakeSGLang, tmp_path: Path, tokens: int, kept: int, gauge: float
) -> None:
    seen = counted(sglang, tokens, kept, gauge)
    assert promtool_reading(seen, tmp_path) == "collapsed"


@pytest.mark.e2e
def test_the_recording_rule_does_not_read_a_healthy_drafter_as_collapsed(
    sglang: FakeSGLang, tmp_path: Path
) -> None:
    seen = counted(sglang, tokens=10, drafts_accepted=6, accept=3.0)
    assert promtool_reading(seen, tmp_path) != "collapsed"


def test_a_request_finished_without_a_token_never_takes_the_counter_down(
    sglang: FakeSGLang,
) -> None:
    """A request aborted while queued counts as a request with no token: the derived sum dips
    by one, and Prometheus would read a dip as a restart (a rate of the whole counter)."""
    metrics, target = SGLangMetrics(dp=1), sglang_target(sglang)
    minute_of_traffic(metrics, 10, 20, 10, 2.1)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    before = scrape(target)["accepted"]
    metrics.finished(generated=0, verify_calls=0, requests=1)  # aborted in the queue
    sglang.routes["/metrics"] = Route(body=metrics.body())
    assert scrape(target)["accepted"] == before == 100
    minute_of_traffic(metrics, 10, 20, 10, 2.1)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    assert scrape(target)["accepted"] == 199


def test_an_idle_server_is_idle_whatever_its_gauges_kept(sglang: FakeSGLang) -> None:
    """SGLang's gauges hold the last busy window: 3 running requests at accept length 2.03.
    No decode pass between two scrapes says the server is idle."""
    metrics, target = SGLangMetrics(dp=1), sglang_target(sglang)
    minute_of_traffic(metrics, 40, 81, 40, 2.03)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    scrape(target)
    minute_of_traffic(metrics, 40, 81, 40, 2.03)
    metrics.stats(0, Rank(running=3, throughput=350.0, accept_length=2.03))
    sglang.routes["/metrics"] = Route(body=metrics.body())
    busy = scrape(target)
    assert busy["running"] == 3
    assert busy["accept_length"] == pytest.approx(2.0)  # 40 rounds, 40 drafts kept: the counters
    idle = scrape(target)  # nothing decoded since: the same counters, the same gauges
    assert idle["accept_length"] is None
    assert idle["running"] == 0
    assert idle["throughput"] == 0
    assert idle["accepted"] == busy["accepted"]  # the counters are still exported


def test_each_dp_rank_is_idle_by_its_own_decode_passes(sglang: FakeSGLang) -> None:
    metrics, target = SGLangMetrics(dp=2), sglang_target(sglang)
    for rank, accept in ((0, 2.0), (1, 3.0)):
        metrics.stats(rank, Rank(running=4, accept_length=accept))
        metrics.decode_passes(rank, graph=100, eager=0)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    scrape(target)
    metrics.decode_passes(1, graph=100, eager=0)  # only rank 1 decodes
    sglang.routes["/metrics"] = Route(body=metrics.body())
    seen = scrape(target)
    assert seen["accept_length"] == pytest.approx(3.0)  # rank 0's old 2.0 is not averaged in
    assert seen["running"] == 4


def logged_window_ratio(server: FakeSGLang, gauge: float, logged: float) -> Seen:
    """A fresh log window of ``logged`` (two decimals, as SGLang prints it) beside the
    server's accept-length gauge at ``gauge``, four draft tokens a round."""
    metrics = SGLangMetrics(dp=1)
    metrics.stats(0, Rank(running=6, accept_length=gauge))
    server.routes["/metrics"] = Route(body=metrics.body())
    server.routes["/server_info"] = Route(body=server_info(), content_type="application/json")
    target = Target.from_config(
        TargetConfig(
            name="s",
            metrics_url=f"{server.url}/metrics",
            server_info_url=f"{server.url}/server_info",
        )
    )
    window = StatsRecord("decode", "2026-12-01T10:00:00", accept_length=logged, running_requests=6)
    target.state.add_records([window], time.time())
    return scrape(target)


def test_the_accept_ratio_of_a_logged_window_is_from_the_unrounded_gauge(
    sglang: FakeSGLang,
) -> None:
    """The log said 2.03 and SGLang's gauge 2.0326 for the same window: (2.0326 - 1) / 3 =
    0.3442, as SGLang's own rate gauge read, not 0.3433 from the rounded value."""
    seen = logged_window_ratio(sglang, gauge=2.0326, logged=2.03)
    assert seen["accept_length"] == pytest.approx(2.03)  # the log's window is what is shown
    assert seen["accept_rate"] == pytest.approx(1.0326 / 3)


def test_a_gauge_of_another_window_leaves_the_logged_ratio(sglang: FakeSGLang) -> None:
    seen = logged_window_ratio(sglang, gauge=2.4471, logged=2.03)
    assert seen["accept_rate"] == pytest.approx(1.03 / 3)


def test_a_window_s_accept_length_is_its_counters_not_the_gauge(sglang: FakeSGLang) -> None:
    """The gauge is the last logged window's (40 batches), counting drafts accepted past a
    request's last token: each scrape window's accept length is SGLang's own measure over it,
    1 + accepted / verify calls, from the counters' increase."""
    metrics, target = SGLangMetrics(dp=1), sglang_target(sglang)
    minute_of_traffic(metrics, 10, 20, 10, 2.1)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    first = scrape(target)
    assert first["accept_length"] == pytest.approx(2.1)  # nothing to compare with yet
    shown = []
    for kept, gauge in ((6, 2.1), (0, 1.9)):  # 19 tokens: 13 rounds, then 19 rounds
        minute_of_traffic(metrics, 10, 20, kept, gauge)
        sglang.routes["/metrics"] = Route(body=metrics.body())
        shown.append(scrape(target)["accept_length"])
    assert shown == pytest.approx([1 + 6 / 13, 1.0])


def test_a_busy_window_with_no_request_finished_shows_the_gauge(sglang: FakeSGLang) -> None:
    """Long requests: the node decoded between two scrapes, but none finished, so the counters
    (counted at a request's end) did not move; the gauge of its newest logged window is the
    figure there is. No decode pass either: idle, and no accept length at all."""
    metrics, target = SGLangMetrics(dp=1), sglang_target(sglang)
    minute_of_traffic(metrics, 10, 20, 10, 2.1)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    scrape(target)
    metrics.stats(0, Rank(running=6, accept_length=2.4))
    metrics.decode_passes(0, graph=400, eager=0)
    sglang.routes["/metrics"] = Route(body=metrics.body())
    assert scrape(target)["accept_length"] == pytest.approx(2.4)
    assert scrape(target)["accept_length"] is None


def url_notes(bodies: list[bytes]) -> str:
    """doctor --url's notes of a server answering ``bodies`` at its scrapes, in order."""
    snapshots = [Snapshot(float(i), 200, body.decode()) for i, body in enumerate(bodies)]
    with serve_snapshots({"": snapshots}) as server:
        done = doctor("--url", server.url, "--scrape-gap", "0.5", "--json")
    assert server.served == [0, 1], done.stderr
    return " ".join(json.loads(done.stdout)["notes"])


@pytest.mark.e2e
def test_doctor_on_the_url_says_which_accept_length_it_judged() -> None:
    """Between its two scrapes: the counters' 1 + 6/13, not the gauge's 2.1 of the first;
    where no request finished between them, the gauge, named as such."""
    finished, unfinished = SGLangMetrics(dp=1), SGLangMetrics(dp=1)
    for metrics in (finished, unfinished):
        minute_of_traffic(metrics, 10, 20, 10, 2.1)
    first = finished.body()
    minute_of_traffic(finished, 10, 20, 6, 2.1)
    notes = url_notes([first, finished.body()])
    counted = "accept length 1.46 from the server's counters between two scrapes 0.5 s apart"
    assert f"{counted} (130 draft rounds)" in notes
    unfinished.stats(0, Rank(running=6, accept_length=2.4))
    unfinished.decode_passes(0, graph=400, eager=0)
    notes = url_notes([first, unfinished.body()])
    gauge = "accept length 2.40 from the server's /metrics gauge of its newest window"
    assert f"{gauge} (its counters counted no round in the 0.5 s between two scrapes)" in notes
    assert "draft rounds" not in notes
