"""A target's render is reused between scrapes only while it is current: a changed value,
a window going stale or a failed render is shown at the very next scrape; and the lean
writer writes the bytes prometheus_client would."""

from __future__ import annotations

import gzip
import math
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import HistogramMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from exporter.analysis.baseline import Baseline
from exporter.config import TargetConfig
from exporter.engines.server_config import ServerConfig
from exporter.exposition import collector as collector_module
from exporter.exposition.collector import REUSE_SECONDS, SpecwatchCollector
from exporter.exposition.families import Families
from exporter.exposition.landing import landing_page
from exporter.exposition.text import EOF, filled, header, sample_lines, template
from exporter.sources.tail import FileTailer
from exporter.state.feed import LogFeed
from exporter.state.target_state import TargetState
from exporter.target import Target
from tests.support.daemon import run_daemon
from tests.support.files import append
from tests.support.loglines import decode_line
from tests.support.metrics import T0, Clock, Scrape
from tests.support.records import decode
from tests.support.speclogs import server_args

STALE = 60.0


def node(name: str = "node-a", draft: ServerConfig | None = None) -> Target:
    baseline = Baseline.from_curve("1:82,48:1500,128:2370")
    return Target(TargetConfig(name=name), TargetState(name), baseline, draft or ServerConfig())


def scrape(collector: SpecwatchCollector) -> Scrape:
    return Scrape(collector.exposition("text").decode())


def test_a_changed_value_is_shown_at_the_next_scrape_at_the_same_instant() -> None:
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    target.state.add_record(decode(accept_length=2.5), observed_at=T0)
    assert scrape(collector).value("specwatch_accept_length") == 2.5
    target.state.add_record(decode(accept_length=1.2), observed_at=T0)
    assert scrape(collector).value("specwatch_accept_length") == 1.2


def test_an_unchanged_target_is_reused_and_rendered_again_after_reuse_seconds() -> None:
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    target.state.add_record(decode(accept_length=2.5), observed_at=T0)
    first = collector.view(target)
    clock.now = T0 + REUSE_SECONDS / 2
    assert collector.view(target) is first
    clock.now = T0 + REUSE_SECONDS
    again = collector.view(target)
    assert again is not None and again is not first and again.now == clock.now


def test_each_change_of_a_logs_troubles_is_shown_at_the_next_scrape() -> None:
    """A log's trouble counts are rendered once and kept while they hold (most renders of a
    live log change only its line counts): every one of them that moves is shown at once."""
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    state, path = target.state, "/var/log/sglang.log"
    steps: list[tuple[Callable[[], None], str, dict[str, str]]] = [
        (lambda: state.add_skipped("too_long"), "log_skipped_lines_total", {"reason": "too_long"}),
        (lambda: state.add_skipped("too_long"), "log_skipped_lines_total", {"reason": "too_long"}),
        (state.add_unrecognized, "log_unrecognized_stats_lines_total", {}),
        (state.add_rotation, "log_rotations_total", {}),
        (state.add_truncation, "log_truncations_total", {}),
        (state.add_read_error, "log_read_errors_total", {}),
        (
            lambda: state.add_fallback("too_long"),
            "log_chunk_fallbacks_total",
            {"reason": "too_long"},
        ),
    ]
    shown: dict[str, float] = {}
    for change, name, labels in steps:
        before = scrape(collector).value("specwatch_" + name, **labels) or 0.0
        change()
        assert scrape(collector).value("specwatch_" + name, **labels) == before + 1, name
        shown[name] = before + 1
    state.set_log_source(path, "ok")
    assert scrape(collector).value("specwatch_log_source_up", path=path, reason="ok") == 1
    state.set_log_source(path, "missing")
    s = scrape(collector)
    assert s.value("specwatch_log_source_up", path=path, reason="missing") == 0
    assert s.value("specwatch_log_source_up", path=path, reason="ok") is None
    # Another collector's target of the same name shows its own counts, not those kept.
    other = SpecwatchCollector([node()], STALE, clock)
    assert scrape(other).value("specwatch_log_rotations_total") == 0
    assert scrape(collector).value("specwatch_log_rotations_total") == shown["log_rotations_total"]


def test_a_restart_with_another_setup_is_shown_at_the_next_scrape(tmp_path: Path) -> None:
    """A target's setup is rendered once and kept while it holds (most renders of a live log
    change only its windows and counts): a restart with other draft steps is shown at once,
    its earlier setup gone."""
    path = tmp_path / "sglang.log"
    append(path, server_args("EAGLE3", steps=3, draft_tokens=4))
    target = Target.from_config(TargetConfig(name="node-a", log_files=[str(path)]))
    tailer = FileTailer(str(path), LogFeed(target.state, target.custom_rules))
    collector = SpecwatchCollector([target], STALE, time.time)
    try:
        tailer.poll()
        before = scrape(collector)
        append(path, server_args("EAGLE3", steps=5, draft_tokens=6))
        tailer.poll()
        after = scrape(collector)
    finally:
        tailer.stop()
    assert before.value("specwatch_speculative_steps") == 3
    assert before.value("specwatch_speculative_info", num_steps="3", num_draft_tokens="4") == 1
    assert after.value("specwatch_speculative_steps") == 5
    assert after.value("specwatch_speculative_draft_tokens") == 6
    assert after.value("specwatch_speculative_info", num_steps="5", num_draft_tokens="6") == 1
    assert after.value("specwatch_speculative_info", num_steps="3") is None


def test_a_family_is_written_from_its_samples_once_others_join_its_kept_lines() -> None:
    """A family's lines given with its samples stand for it only while they are all of it."""
    families = Families()
    kept = [Sample("specwatch_log_lines_total", {"target": "a"}, 1.0)]
    families.extend("specwatch_log_lines", kept, sample_lines(kept))
    assert families.written("specwatch_log_lines") == sample_lines(kept)
    families.add("log_lines", {"target": "b"}, 2.0)
    assert families.written("specwatch_log_lines") is None


def test_each_render_writes_the_lines_of_its_samples_whether_kept_joined_or_moved() -> None:
    """A render's lines are those its samples make, render after render: a kept family that
    others join, then do not, then do again, and a family whose values move or hold."""
    last = None
    for value, join in [(1.0, True), (2.0, False), (2.0, True), (3.0, True), (3.0, False)]:
        families = Families()
        kept = [Sample("specwatch_log_lines_total", {"target": "a"}, 1.0)]
        families.extend("specwatch_log_lines", kept, sample_lines(kept))
        if join:
            families.add("log_lines", {"target": "b"}, value)
        families.add("accept_length", {"target": "a"}, value)
        render = collector_module._Render((), T0, T0, None, families, {}, {})
        collector_module._lines(families, last, render.lines, render.templates)
        assert render.lines == {n: sample_lines(s) for n, s in families.by_family.items()}
        last = render


def test_a_window_going_stale_ends_the_reuse_at_that_moment() -> None:
    """Rendered just before its window goes stale, the render is not reused past it."""
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    target.state.add_record(decode(accept_length=2.5), observed_at=T0)
    clock.now = T0 + STALE - REUSE_SECONDS / 4
    assert scrape(collector).value("specwatch_accept_length") == 2.5
    clock.now = T0 + STALE
    s = scrape(collector)
    assert s.value("specwatch_accept_length") is None
    assert s.value("specwatch_gen_throughput_tokens_per_second") is None
    assert s.value("specwatch_decode_windows_total", cuda_graph="true") == 1


def test_a_clock_stepped_back_renders_again() -> None:
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    target.state.add_record(decode(), observed_at=T0)
    clock.now = T0 + 0.5
    later = collector.view(target)
    clock.now = T0 + 0.2
    assert collector.view(target) is not later


def test_only_the_target_that_changed_is_rendered_again() -> None:
    clock, quiet, busy = Clock(), node("quiet"), node("busy")
    collector = SpecwatchCollector([quiet, busy], STALE, clock)
    for target in (quiet, busy):
        target.state.add_record(decode(accept_length=2.5), observed_at=T0)
    views = collector.view(quiet), collector.view(busy)
    busy.state.add_record(decode(accept_length=3.0), observed_at=T0)
    assert scrape(collector).value("specwatch_accept_length", target="busy") == 3.0
    assert collector.view(quiet) is views[0]
    assert collector.view(busy) is not views[1]


def test_scrapes_share_one_body_until_a_target_or_a_process_wide_count_changes() -> None:
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    target.state.add_record(decode(accept_length=2.5), observed_at=T0)
    first = collector.exposition("text")
    assert collector.exposition("text") is first
    assert collector.exposition("openmetrics") is not first
    target.drafts.get("/models/\x00draft")  # a draft path the server named, unreadable
    counted = collector.exposition("text")
    assert b'specwatch_draft_config_errors_total{reason="bad_name"} 1.0' in counted
    target.state.add_record(decode(accept_length=1.5), observed_at=T0)
    assert Scrape(collector.exposition("text").decode()).value("specwatch_accept_length") == 1.5


class FlakyState(TargetState):
    """A state whose snapshot fails while ``broken`` is set."""

    broken = False

    def snapshot(self):  # type: ignore[no-untyped-def]
        if self.broken:
            raise RuntimeError("state bug")
        return super().snapshot()


def test_a_render_that_fails_is_not_replaced_by_the_last_good_one() -> None:
    clock = Clock()
    state = FlakyState("node-a")
    target = Target(TargetConfig(name="node-a"), state)
    collector = SpecwatchCollector([target], STALE, clock)
    state.add_record(decode(accept_length=2.5), observed_at=T0)
    assert scrape(collector).value("specwatch_accept_length") == 2.5
    state.broken = True
    s = scrape(collector)
    assert s.value("specwatch_accept_length") is None
    assert s.value("specwatch_render_errors_total", target="node-a") == 1
    state.broken = False
    assert scrape(collector).value("specwatch_accept_length") == 2.5


def test_the_landing_page_shows_a_change_at_once_from_the_shared_render() -> None:
    clock, target = Clock(), node()
    collector = SpecwatchCollector([target], STALE, clock)
    target.state.add_record(decode(accept_length=2.5), observed_at=T0)
    assert "accept length 2.50" in landing_page([target], STALE, clock, collector.view).decode()
    target.state.add_record(decode(accept_length=1.25), observed_at=T0)
    page = landing_page([target], STALE, clock, collector.view).decode()
    assert "accept length 1.25" in page and "accept length 2.50" not in page


HOSTILE = 'quo"te back\\slash new\nline \u00e9\u4e2d \ud800 {a="b"} # HELP x'


def test_the_lean_exposition_is_prometheus_clients_bytes_in_both_formats() -> None:
    """Every kind of family, DP ranks, hostile label values from a server's setup."""
    clock = Clock()
    hostile = ServerConfig(algorithm=HOSTILE, draft_model_path="/m/" + HOSTILE * 5)
    plain, ranked = node("node-a", hostile), node("node-b")
    plain.state.add_record(decode(accept_length=2.6), observed_at=T0)
    for rank in (0, 1):
        ranked.state.add_record(decode(dp_rank=rank, cuda_graph=False), observed_at=T0)
    plain.state.add_skipped("too_long")
    collector = SpecwatchCollector([plain, ranked], STALE, clock)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = collector.exposition("text").decode()
    assert text.encode() == generate_latest(registry)
    om = collector.exposition("openmetrics").decode() + EOF
    assert om.encode() == openmetrics.generate_latest(registry)
    assert 'algorithm="quo\\"te back\\\\slash new\\nline' in text
    parsed = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.labels.get("algorithm") for s in parsed} >= {HOSTILE.replace("\ud800", "?")}
    assert [s for f in om_parse(om) for s in f.samples]


labels = st.dictionaries(
    st.sampled_from(["target", "reason", "path", "served_model", "le_x"]),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
    max_size=4,
)
values = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
)


@given(st.lists(st.tuples(st.sampled_from(["log_lines", "accept_length"]), labels, values)))
def test_the_lean_writer_writes_any_sample_as_prometheus_client_does(
    series: list[tuple[str, dict[str, str], float]],
) -> None:
    families = Families()
    for short, labelset, value in series:
        families.add(short, labelset, value)
    lean = ""
    for name in families.names():
        kind, doc = families.kind(name)
        lean += header(name, kind, doc, "text") + sample_lines(families.samples(name))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    assert lean.encode() == generate_latest(registry)


@given(st.lists(st.tuples(labels, values, values), min_size=1, max_size=8))
def test_lines_given_new_values_are_the_lines_written_afresh(
    series: list[tuple[dict[str, str], float, float]],
) -> None:
    """A live target's counters move on between renders: their lines keep the names and
    labels written before (their template, where a label's ``%`` is doubled) and take the
    new values, as if written afresh."""
    before, after = Families(), Families()
    for labelset, old, new in series:
        before.add("log_lines", labelset, old)
        after.add("log_lines", labelset, new)
    name = "specwatch_log_lines"
    names, labelled, _ = before.columns[name]
    text = filled(template(names, labelled), after.columns[name][2])
    assert text == sample_lines(after.samples(name))


def test_a_float_written_again_is_written_as_prometheus_client_writes_it() -> None:
    """The lean writer writes a float as prometheus_client does, by ``repr`` below 1e6 and
    by prometheus_client above: each value written a second time reads as the first, an
    integral float apart from an int, -0.0 apart from 0.0, either side of 1e6."""
    values: list[float] = [0.1, 2.5, 1e-7, 5e-324, 1e16, 123456789.0, 1.5e308, math.inf]
    values += [1.0, 1, True, 0.0, -0.0, -2.5, 10**6, 10.0**6, 999999.9999999999, -1e7]
    values += [-math.inf, math.nan, 1796231782.0401227]
    for value in [*values, *values]:
        line = sample_lines([Sample("x", {}, value)])
        assert line == f"x {floatToGoString(value)}\n", value


def test_a_histogram_and_a_summary_are_the_samples_prometheus_client_makes() -> None:
    labels = {"target": "node", "traffic_class": 'a "b"'}
    buckets = [("1.0", 0.0), ("2.5", 3.0), ("+Inf", 5.0)]
    families = Families()
    families.add_histogram("request_accept_length", labels, buckets, 9.5)
    families.add_summary("band_gen_throughput_tokens_per_second", labels, 4, 800.0)
    histogram = HistogramMetricFamily("specwatch_request_accept_length", "", labels=list(labels))
    histogram.add_metric(list(labels.values()), buckets, 9.5)
    summary = SummaryMetricFamily(
        "specwatch_band_gen_throughput_tokens_per_second", "", labels=list(labels)
    )
    summary.add_metric(list(labels.values()), 4, 800.0)
    assert families.samples("specwatch_request_accept_length") == histogram.samples
    assert families.samples("specwatch_band_gen_throughput_tokens_per_second") == summary.samples


class _Fixed:
    def __init__(self, families: Families) -> None:
        self._families = families

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self._families)


PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


def get(port: int, path: str = "/metrics", **headers: str) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(answer.headers), answer.read()


def specwatch_samples(families: Iterable[Metric]) -> set[tuple[str, str, float]]:
    return {
        (s.name, repr(sorted(s.labels.items())), s.value)
        for f in families
        for s in f.samples
        if s.name.startswith("specwatch_") and "timestamp" not in s.name
    }


@pytest.mark.e2e
def test_the_daemon_answers_each_format_filter_and_compression_a_scraper_asks_for(
    tmp_path: Path, port: int
) -> None:
    log = tmp_path / "server.log"
    append(log, decode_line(2.5))
    with run_daemon(["--log-file", str(log)], port) as daemon:
        daemon.wait_metric("specwatch_accept_length", lambda v: v == 2.5)
        kinds, plain = get(port)
        om_kinds, om = get(port, Accept=PROMETHEUS_ACCEPT)
        zipped_kinds, zipped = get(port, **{"Accept-Encoding": "gzip"})
        _, only = get(port, "/metrics?name[]=specwatch_accept_length")
    assert kinds["Content-Type"].startswith("text/plain; version=0.0.4")
    assert om_kinds["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert om.decode().count("# EOF") == 1 and om.endswith(b"# EOF\n")
    assert zipped_kinds["Content-Encoding"] == "gzip"
    assert zipped[8] == 4  # the header's XFL: zlib's fastest level (Prometheus always asks)
    text, strict = plain.decode(), list(om_parse(om.decode()))  # strict: any flaw raises
    assert "process_cpu_seconds_total " in text and "python_gc_objects_collected_total" in text
    assert specwatch_samples(text_string_to_metric_families(text)) == specwatch_samples(strict)
    unzipped = gzip.decompress(zipped).decode()
    assert unzipped.split("# HELP specwatch_")[1:] == text.split("# HELP specwatch_")[1:]
    assert [f.name for f in text_string_to_metric_families(only.decode())] == [
        "specwatch_accept_length"
    ]
