"""SGLang 0.5.23's own ``/metrics`` (its metric definitions rendered by prometheus-client),
scraped over loopback: each DP rank counted once, whatever else SGLang splits its series by."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.engines.record import UpstreamValues
from exporter.sources.upstream import UpstreamScraper
from tests.support.daemon import config_file, doctor, run_daemon
from tests.support.fake_sglang import FakeSGLang, Route, fake_sglang, server_info
from tests.support.sglang_metrics import Rank, SGLangMetrics


@pytest.fixture
def sglang() -> Iterator[FakeSGLang]:
    with fake_sglang() as fake:
        yield fake


def scraped(server: FakeSGLang, metrics: SGLangMetrics, scraper: UpstreamScraper) -> UpstreamValues:
    server.routes["/metrics"] = Route(body=metrics.body())
    values = scraper.scrape_once().values
    assert values is not None
    return values


def busy(metrics: SGLangMetrics) -> SGLangMetrics:
    metrics.stats(0, Rank(running=30, usage=0.2))
    metrics.stats(1, Rank(running=31, usage=0.3, accept_length=2.7))
    metrics.finished(generated=3000, verify_calls=1200, requests=30)
    return metrics


def test_two_dp_ranks_read_as_the_node(sglang: FakeSGLang) -> None:
    values = scraped(sglang, busy(SGLangMetrics()), UpstreamScraper(f"{sglang.url}/metrics"))
    assert values.running_requests == 61
    assert values.queued_requests == 4
    assert values.gen_throughput == 1200
    assert values.token_usage == pytest.approx(0.3)
    assert values.accept_length == pytest.approx(2.6)
    assert values.drafts_total == 1200
    # 3000 tokens: one per verify call the target's own, each request's first from prefill
    assert values.accepted_tokens_total == 1770
    assert values.config is not None and values.config.active_steps == 3


def test_priority_scheduling_counts_each_queue_once(sglang: FakeSGLang) -> None:
    """With --enable-priority-scheduling each queue's total is under priority="" and its split
    by priority beside it: the split is the same requests again."""
    metrics = SGLangMetrics(priority=True)
    metrics.stats(0, Rank(running=30, queued=3, by_priority=((0, 20, 1), (5, 10, 2))))
    metrics.stats(1, Rank(running=31, queued=1, by_priority=((0, 31, 1),)))
    values = scraped(sglang, metrics, UpstreamScraper(f"{sglang.url}/metrics"))
    assert values.running_requests == 61
    assert values.queued_requests == 4
    assert values.accept_length == pytest.approx(2.5)


def test_metrics_of_every_scheduler_count_each_dp_rank_once(sglang: FakeSGLang) -> None:
    """--enable-metrics-for-all-schedulers: each of a DP rank's four TP ranks writes the batch
    they all run, under its own tp_rank."""
    values = scraped(
        sglang, busy(SGLangMetrics(tp_per_dp=4)), UpstreamScraper(f"{sglang.url}/metrics")
    )
    assert values.running_requests == 61
    assert values.gen_throughput == 1200
    assert values.accept_length == pytest.approx(2.6)


def test_cuda_graph_share_is_over_every_dp_rank(sglang: FakeSGLang) -> None:
    metrics = busy(SGLangMetrics())
    for rank in (0, 1):
        metrics.decode_passes(rank, graph=1000, eager=0)
    scraper = UpstreamScraper(f"{sglang.url}/metrics")
    assert scraped(sglang, metrics, scraper).cuda_graph_share is None  # one scrape says nothing
    metrics.decode_passes(0, graph=0, eager=1000)  # rank 0 fell out of its graphs
    metrics.decode_passes(1, graph=300, eager=0)
    assert scraped(sglang, metrics, scraper).cuda_graph_share == pytest.approx(300 / 1300)


@pytest.mark.e2e
def test_daemon_reads_a_priority_dp_node_and_names_its_eager_rank(
    tmp_path: Path, port: int
) -> None:
    """The daemon on the real exposition: each queue counted once, and a DP rank decoding
    without CUDA graphs is the cuda_graph_disabled finding, not hidden behind its neighbour."""
    metrics = SGLangMetrics(priority=True)
    metrics.stats(0, Rank(running=30, queued=3, by_priority=((0, 20, 1), (5, 10, 2))))
    metrics.stats(1, Rank(running=31, queued=1, by_priority=((0, 31, 1),)))
    for rank in (0, 1):
        metrics.decode_passes(rank, graph=1000, eager=0)
    with fake_sglang() as server:
        server.routes["/server_info"] = Route(
            body=server_info(speculative_algorithm="EAGLE3"), content_type="application/json"
        )
        server.routes["/metrics"] = Route(body=metrics.body())
        with run_daemon(["--config", str(config_file(tmp_path, server.url))], port) as d:
            d.wait_metric("specwatch_running_requests", lambda v: v == 61, target="sglang-0")
            assert d.scrape().value("specwatch_queued_requests", target="sglang-0") == 4
            metrics.decode_passes(0, graph=0, eager=1000)
            metrics.decode_passes(1, graph=300, eager=0)
            server.routes["/metrics"] = Route(body=metrics.body())
            d.wait_metric("specwatch_finding", lambda v: v == 1, code="cuda_graph_disabled")


def test_pipeline_stages_count_each_batch_once(sglang: FakeSGLang) -> None:
    """--pp-size 2: the TP0 scheduler of each stage writes the batch every stage runs, under
    its own pp_rank; summed, the node read twice its requests and throughput."""
    values = scraped(sglang, busy(SGLangMetrics(pp=2)), UpstreamScraper(f"{sglang.url}/metrics"))
    assert values.running_requests == 61
    assert values.queued_requests == 4
    assert values.gen_throughput == 1200
    assert values.accept_length == pytest.approx(2.6)


def test_a_pipeline_stage_out_of_its_cuda_graphs_shows_in_the_share(sglang: FakeSGLang) -> None:
    """Each stage replays graphs of its own layers: a stage running eagerly is no copy of the
    first stage's passes, and must not hide behind them."""
    metrics = busy(SGLangMetrics(dp=1, pp=2))
    metrics.decode_passes(0, graph=1000, eager=0)
    scraper = UpstreamScraper(f"{sglang.url}/metrics")
    scraped(sglang, metrics, scraper)
    metrics.decode_passes(0, graph=500, eager=0, pp=0)
    metrics.decode_passes(0, graph=0, eager=500, pp=1)
    assert scraped(sglang, metrics, scraper).cuda_graph_share == pytest.approx(0.5)


def test_the_first_pipeline_stage_speaks_for_the_batch(sglang: FakeSGLang) -> None:
    """Stages report at their own ticks, so their gauges can differ for a moment: every gauge
    is read from one stage, the first (the stage on the node serving /metrics)."""
    metrics = SGLangMetrics(dp=1, pp=3)
    for stage, running in ((2, 28), (1, 29), (0, 30)):
        metrics.stats(0, Rank(running=running, throughput=20.0 * running), pp=stage)
    values = scraped(sglang, metrics, UpstreamScraper(f"{sglang.url}/metrics"))
    assert (values.running_requests, values.gen_throughput) == (30, 600)


@pytest.mark.e2e
@pytest.mark.parametrize(("stages", "speedup"), [(1, 900 / 776), (2, None)])
def test_a_pipelined_server_is_not_held_to_the_baseline_at_a_micro_batch_load(
    tmp_path: Path, port: int, stages: int, speedup: float | None
) -> None:
    """--pp-size 2 (its /server_info says so): the running gauge is one micro-batch's, 24 of
    48, and the throughput the pipeline's; 900 tok/s is above the baseline at 24 (776) and
    below the one at 48 (1,500), so no speedup can be told. Without pipeline stages it can."""
    metrics = SGLangMetrics(dp=1, pp=stages)
    metrics.stats(0, Rank(running=24, throughput=900.0, accept_length=3.1))
    config = tmp_path / "specwatch.yaml"
    with fake_sglang() as server:
        server.routes["/server_info"] = Route(
            body=server_info(
                pp_size=stages,
                speculative_draft_model_path="lmsys/sglang-EAGLE-LLaMA3-Instruct-8B",
            ),
            content_type="application/json",
        )
        server.routes["/metrics"] = Route(body=metrics.body())
        config.write_text(
            f"targets:\n  - name: sglang-0\n    metrics_url: {server.url}/metrics\n"
            f"    server_info_url: {server.url}/server_info\n    scrape_interval: 1\n"
            '    baseline: {curve: "1:82,48:1500,128:2370"}\n'
        )
        with run_daemon(["--config", str(config)], port) as d:
            d.wait_metric("specwatch_running_requests", lambda v: v == 24, target="sglang-0")
            d.wait_metric(
                "specwatch_upstream_up", lambda v: v == 1, target="sglang-0", endpoint="server_info"
            )
            found = d.scrape().value("specwatch_speedup", target="sglang-0")
    assert found == (None if speedup is None else pytest.approx(speedup, rel=1e-3))


@pytest.mark.e2e
def test_doctor_says_why_a_pipelined_server_is_not_held_to_the_baseline() -> None:
    metrics = SGLangMetrics(dp=1, pp=2)
    metrics.stats(0, Rank(running=24, throughput=900.0, accept_length=3.1))
    with fake_sglang() as server:
        server.routes["/server_info"] = Route(
            body=server_info(
                pp_size=2, speculative_draft_model_path="lmsys/sglang-EAGLE-LLaMA3-Instruct-8B"
            ),
            content_type="application/json",
        )
        server.routes["/metrics"] = Route(body=metrics.body())
        run = doctor("--url", server.url, "--baseline-curve", "1:82,48:1500,128:2370")
    assert "speed not compared with the baseline: a pipeline stage's running requests" in run.stdout
    assert run.returncode == 0
