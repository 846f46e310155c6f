"""What a scrape's render costs when every target moved, in process and stepped.

``--targets`` targets as ``fleet.py`` makes them (a log each and, with ``--upstream``, its
server's ``/metrics`` and ``/server_info`` on loopback), each followed by a tailer that moves
only when told. Before each render every log gets a decode line, every tailer one pass and,
with ``--upstream``, every upstream one scrape, as between two of Prometheus's scrapes 15 s
apart; then the collector writes the specwatch families of ``/metrics``. The figure is the
render's CPU (this thread's) and nothing else: not the reading of the lines, not HTTP. The
interpreter runs with the daemon's collector settings (``runtime.tune_gc``).

``--judge-every SECONDS`` renders as the daemon's scrapes do (``daemon.JUDGE_SECONDS``, 5): each
target's judgement kept from the first render is shown again (the daemon's judging thread pays
for judging, every 5 s, whether or not anything scrapes); without it, every render judges.

A second line gives the passes' CPU: the thread time of the ``--targets`` tailers' passes
before each render, each reading the one new line of its log, as a scrape waits for them
(``TailLoop.sync``) before it renders.

``--check`` also renders each time with a collector that never rendered before, its groups of
kept samples built afresh, and holds the two bodies to the same bytes (what the kept renders,
templates and groups must not change).
``--profile FILE`` writes cProfile's statistics of the renders.

    .venv/bin/python bench/scrape_bench.py [--targets 100] [--upstream] [--renders 30]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from fleet import decode_line, upstreams

from exporter.config import TargetConfig
from exporter.exposition import collector as collector_module
from exporter.exposition.collector import SpecwatchCollector
from exporter.runtime import tune_gc
from exporter.sources.tail import FileTailer
from exporter.state.feed import LogFeed
from exporter.target import Target

WARM_RENDERS = 5


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--upstream", action="store_true")
    parser.add_argument("--renders", type=int, default=30)
    parser.add_argument("--judge-every", type=float, default=0.0, help="seconds (0: each render)")
    parser.add_argument("--check", action="store_true", help="against a fresh collector")
    parser.add_argument("--profile", type=Path, help="cProfile statistics of the renders")
    args = parser.parse_args()
    tune_gc()
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(upstreams()) if args.upstream else None
        targets, tailers, fds = [], [], []
        for number in range(args.targets):
            path = folder / f"{number}.log"
            path.touch()
            config = TargetConfig(
                name=f"node-{number}",
                log_files=[str(path)],
                url=None if url is None else f"{url}/{number}",
                engine="sglang",
            )
            target = Target.from_config(config)
            feed = LogFeed(target.state, target.custom_rules, config.engine)
            tailer = FileTailer(str(path), feed)
            stack.callback(tailer.stop)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            stack.callback(os.close, fd)
            targets.append(target)
            tailers.append(tailer)
            fds.append(fd)
        now = [time.time()]
        collector = SpecwatchCollector(targets, 60.0, lambda: now[0], args.judge_every)
        rng = random.Random(7)

        passes: list[float] = []

        def moved() -> None:
            """A line in every log, read (the passes timed); every upstream scraped; the
            clock on."""
            for number, fd in enumerate(fds):
                os.write(fd, decode_line(number, rng))
            start = time.thread_time()
            for tailer in tailers:
                tailer.poll()
            passes.append(time.thread_time() - start)
            for target in targets:
                if target.upstream is not None:
                    target.upstream.scrape_once()
            now[0] = time.time()

        for _ in range(WARM_RENDERS):
            moved()
            collector.exposition("text")
        passes.clear()
        profile = cProfile.Profile() if args.profile else None
        spent = []
        for _ in range(args.renders):
            moved()
            start = time.thread_time()
            if profile is not None:
                profile.enable()
            body = collector.exposition("text")
            if profile is not None:
                profile.disable()
            spent.append(time.thread_time() - start)
            if args.check:
                collector_module._GROUPS.clear()  # every group built afresh, too
                fresh = SpecwatchCollector(targets, 60.0, lambda: now[0], args.judge_every)
                assert fresh.exposition("text") == body, "a kept render differs"
        if profile is not None:
            profile.dump_stats(args.profile)
    load = loadavg()
    middle, least = statistics.median(spent), min(spent)
    print(
        f"{args.renders} renders of {args.targets} targets, every one moved "
        f"(upstream {url is not None}, judged every {args.judge_every:g} s): CPU median "
        f"{middle * 1e3:.1f} ms, least {least * 1e3:.1f} ms "
        f"({least / args.targets * 1e3:.3f} ms a target); load average {load}"
    )
    middle, least = statistics.median(passes), min(passes)
    print(
        f"{len(passes)} times {args.targets} passes, one new line each: CPU median "
        f"{middle * 1e3:.2f} ms, least {least * 1e3:.2f} ms ({middle / args.targets * 1e6:.1f} "
        f"µs a pass by the median); load average {load}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
