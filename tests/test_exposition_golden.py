"""What ``/metrics`` shows of a scenario, byte for byte, pinned by hashes.

Each simulated scenario (and each recording) is followed through the daemon's real path, a
stepped tailer on a file, a feed, the target's state and the collector, on a hand-moved
clock: a batch of lines every few seconds of the log's own time, and a scrape after each, in
the lean text and OpenMetrics writers and through prometheus_client's. The hashes were made
by the code before the render and the tail pass were cut for a node of many servers, so a
change that alters one byte of any of those scrapes (a value, a label, an order, a series
that lingers or vanishes at another moment) fails here, naming the scenario. A change of the
exposition made on purpose takes the new hash the failure shows, in the same commit.

Each case costs a fifth of a CPU-second and the hours of one nearly a whole one: ``make unit``
follows a case of each engine, state and request log (``UNIT_CASES``), ``make test`` them all
(``tests/support/sweep.py``).
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter import clock
from exporter.analysis.baseline import Baseline
from exporter.config import TargetConfig
from exporter.exposition.collector import SpecwatchCollector
from exporter.simulate import events, scenario
from exporter.simulate.scenarios import SCENARIOS, logging_requests
from exporter.sources.tail.file import FileTailer
from exporter.state.feed import LogFeed
from exporter.state.target_state import TargetState
from exporter.target import Target
from tests.support.metrics import T0, Clock
from tests.support.sweep import sweep

STALE = 60.0
BATCH_SECONDS = 10.0  # log time between two reads, and two scrapes
DURATION = 600.0  # of each scenario: several stretches of the judge
# Of the long cases: past the drift check's two hours, with episodes past and long since-whens.
LONG = 9000.0
RECORDINGS = Path(__file__).parent / "recordings"

# sha256 (its first half) of every scrape of each case, made by the code before the cut.
GOLDEN: dict[str, str] = {
    "sglang-adaptive": "ff83c4564e1f32ba2ba0ea752999fbb8",
    "sglang-adaptive-given-up": "344737f05487fea4831c1aeee8546bfe",
    "sglang-collapsed": "72d7edfd56a1af603992033131967c30",
    "sglang-eagle-flag": "d0cd51d337b383e0020babf76a722798",
    "sglang-healthy": "6d6bd5f45b024644be34fb65baf5be31",
    "sglang-healthy-requests-text": "df87122bbab7a88549e4c25fa54b2837",
    "sglang-hidden-share": "aae29a306ac6e54d88aa7cc7425e8bac",
    "sglang-mismatched": "c435b1ab78790aee63425746e95c3b90",
    "sglang-mtp": "11800d8a9393fb5bea38cb4d9d21ffd8",
    "sglang-ngram": "b99b65cd8b360aa378002956da705ee0",
    "sglang-recovery": "57343d2623a739fad886d91bbabce9c4",
    "sglang-recovery-requests-json": "ee7be4ad457c425e3ae7f4ce63d2f7e2",
    "sglang-undertrained": "44b904e0f1aa371006b58d4ac270e135",
    "vllm-collapsed": "308020329c1266cf40794e3644b525c6",
    "vllm-healthy": "6e5ed35d445beeb66bc93e4890f254d0",
    "sglang-recovery-hours": "f6c736559384c6d59378a47099e9e866",
    "sglang-0.5.15/collapsed": "045180a126a2681fc95e369b73b19b57",
    "sglang-0.5.15/cuda-graphs-off": "02d5656176516992d717ba98839727b5",
    "sglang-0.5.15/eagle3": "940281e101695bcf53b9f05e34f3318c",
    "sglang-0.5.15/eagle3-as-eagle": "97cf503e9640442573e0e1e5104c15e2",
    "sglang-0.5.15/healthy": "61dd3b8ccf233c755002faadedb0b88f",
    "sglang-0.5.15/ngram": "3bac28a52848787adfa3591e706f5463",
    "vllm-0.24.0/collapsed": "cd65428cce9ef3f0bf4334dc8a7e3f2b",
    "vllm-0.24.0/cuda-graphs-off": "5f56a348aee4d5560d0b848f34b62120",
    "vllm-0.24.0/healthy": "100311a1d463dc61e70dae066fc5c8c2",
    "vllm-0.24.0/ngram": "3bb7783bdeb281aa511f2f8e08fd9b26",
}


def _simulated(
    name: str, engine: str, requests: str | None, duration: float = DURATION
) -> Iterator[tuple[float, str]]:
    """The scenario's lines and their offsets, its clock starting at T0."""
    chosen = scenario(name)
    if requests is not None:
        chosen = logging_requests(chosen, requests)
    start = datetime.fromtimestamp(T0, timezone.utc).replace(tzinfo=None)
    for event in events(chosen, engine=engine, duration=duration):
        yield event.offset, event.render(start + timedelta(seconds=event.offset))


def _recorded(path: Path) -> Iterator[tuple[float, str]]:
    """A recording's lines, 40 a batch (its own times are years before T0)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as log:
        for number, line in enumerate(log):
            yield number // 40 * BATCH_SECONDS, line.rstrip("\n")


def _scrapes(
    lines: Iterator[tuple[float, str]], folder: Path, baseline: bool, batch: float = BATCH_SECONDS
) -> Iterator[bytes]:
    """Every scrape of one target following ``lines`` (offsets in seconds from T0)."""
    now = Clock()
    path = folder / "server.log"
    path.write_bytes(b"")
    known = Baseline.from_curve("1:82,48:1500,128:2370") if baseline else None
    config = TargetConfig(name="node", log_files=[str(path)])
    target = Target(config, TargetState("node", baseline=known), known)
    tailer = FileTailer(str(path), LogFeed(target.state, target.custom_rules, "auto"))
    collector = SpecwatchCollector([target], STALE, now)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    mp = pytest.MonkeyPatch()
    mp.setattr(clock, "now", now)
    try:
        tailer.poll()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        batch_end = batch
        pending: list[str] = []
        for offset, line in [*lines, (float("inf"), "")]:
            while offset >= batch_end:
                if pending:
                    os.write(fd, "".join(f"{text}\n" for text in pending).encode())
                    pending = []
                now.now = T0 + batch_end
                tailer.poll()
                now.now += 0.5
                yield from _forms(collector, registry)
                yield collector.exposition("text")  # reused: the same bytes
                batch_end += batch
                if offset == float("inf"):
                    break
            pending.append(line)
        os.close(fd)
        for later in (STALE / 2, STALE + 1, 301.0, 3601.0):  # windows go stale, runs end
            now.now = T0 + batch_end + later
            yield from _forms(collector, registry)
    finally:
        mp.undo()
        tailer.stop()


def _forms(collector: SpecwatchCollector, registry: CollectorRegistry) -> Iterator[bytes]:
    yield collector.exposition("text")
    yield collector.exposition("openmetrics")
    yield generate_latest(registry)


CASES = {
    **{f"sglang-{name}": (name, "sglang", None, True) for name in SCENARIOS},
    "sglang-healthy-requests-text": ("healthy", "sglang", "text", True),
    "sglang-recovery-requests-json": ("recovery", "sglang", "json", False),
    "vllm-healthy": ("healthy", "vllm", None, True),
    "vllm-collapsed": ("collapsed", "vllm", None, False),
}
LONG_CASES = {
    "sglang-recovery-hours": ("recovery", "sglang", None, True),
}
# The cases make unit follows: each engine, a collapse, drafting turned off, a restart with the
# requests logged in JSON, and a recording of each engine.
UNIT_CASES = {
    "sglang-healthy",
    "sglang-collapsed",
    "sglang-adaptive",
    "sglang-recovery-requests-json",
    "vllm-collapsed",
    "sglang-0.5.15/healthy",
    "vllm-0.24.0/collapsed",
}


def _digest(scrapes: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for body in scrapes:
        digest.update(body)
        digest.update(b"\0")
    return digest.hexdigest()[:32]


@pytest.mark.parametrize("case", sweep(sorted(CASES), UNIT_CASES & CASES.keys()))
def test_a_simulated_scenarios_scrapes_are_byte_for_byte_the_same(
    case: str, tmp_path: Path
) -> None:
    name, engine, requests, baseline = CASES[case]
    got = _digest(_scrapes(_simulated(name, engine, requests), tmp_path, baseline))
    assert got == GOLDEN[case]


@pytest.mark.parametrize("case", sweep(sorted(LONG_CASES), UNIT_CASES & LONG_CASES.keys()))
def test_hours_of_a_scenario_scrape_byte_for_byte_the_same(case: str, tmp_path: Path) -> None:
    """Hours of one run, read a minute at a time: the judge's stretches pile up."""
    name, engine, requests, baseline = LONG_CASES[case]
    lines = _simulated(name, engine, requests, LONG)
    got = _digest(_scrapes(lines, tmp_path, baseline, batch=60.0))
    assert got == GOLDEN[case]


RECORDED = sorted(
    str(p.relative_to(RECORDINGS).parent) for p in RECORDINGS.glob("*/*/server.log.gz")
)


@pytest.mark.parametrize("recording", sweep(RECORDED, UNIT_CASES & set(RECORDED)))
def test_a_recordings_scrapes_are_byte_for_byte_the_same(recording: str, tmp_path: Path) -> None:
    lines = _recorded(RECORDINGS / recording / "server.log.gz")
    got = _digest(_scrapes(lines, tmp_path, baseline=False))
    assert got == GOLDEN[recording]
