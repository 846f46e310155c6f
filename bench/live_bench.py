"""The sidecar's own cost on a live node, beside mtail and node_exporter in the same run.

What a node pays for watching its server: all three programs run at once on the same live
files, each scraped every ``--scrape-interval`` seconds with the headers Prometheus sends
(gzip, OpenMetrics first), while this script appends log lines one ``write`` per line (as a
logging process flushes each record). Per phase, each program's CPU (user + system from
``/proc``, all its threads) as a share of one core, its RSS and threads at the end; for
specwatch also the time to answer ``/metrics``, from 20 scrapes ``--latency-every`` seconds
apart (0.25; Prometheus's usual 15 takes five minutes) after the CPU window (so they do not
count in it). Phases:

- ``idle``: one log, nothing written;
- ``ranks8``: one 8-DP-rank server at 1 decode line per rank per second, plus 4 prefill and
  4 access lines (16 lines/s, each written at its own moment);
- ``heavy``: one log at ``--heavy-rate`` lines/s (the busy log of ``busy_log.py``);
- ``files100``: ``--files`` logs at about 6 lines/s each, one target each (a node of many
  servers: each scrape renders every target), or all of one target with ``--one-target``;
- ``start``: launch to ready (``/healthz`` 200 for specwatch, the HTTP port for the others),
  wall and CPU seconds, ``--starts`` times.

mtail runs ``bench/mtail/sglang.mtail`` (the numbers specwatch takes from the same lines);
node_exporter runs Debian's defaults and reads no log: it is the cost of the exporter every
node already has. CPU is what the node pays and is comparable across a busy machine; wall
figures are not. Each phase prints the load average it ran under.

    nice .venv/bin/python bench/live_bench.py [--seconds 60] [--runs 1] [--phases ...]
"""

from __future__ import annotations

import argparse
import compileall
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from benchlib import SPECWATCH, free_port, memory_kib, percentile, scrape
from busy_log import second_of, write_busy_log

import exporter

HERE = Path(__file__).parent
MTAIL_PROGRAMS = HERE / "mtail"
NODE_EXPORTER = "prometheus-node-exporter"
PHASES = ("idle", "ranks8", "heavy", "files100", "start")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Program:
    """One running program: its process and where it is scraped."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    scrapes: list[float] = field(default_factory=list)

    def cpu(self) -> float:
        """User + system CPU seconds of every thread the process has had."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def scrape(self) -> float:
        return scrape(self.url)


def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            resp.read()
            return True
    except OSError:
        return False


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float = 30) -> float:
    """Seconds until ``url`` answers 200, polled every 10 ms."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited {proc.returncode}")
        if _get(url):
            return time.perf_counter() - start
        time.sleep(0.01)
    raise SystemExit(f"{url} not ready in {timeout} s")


@contextmanager
def _launched(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def specwatch_argv(
    logs: Sequence[Path], folder: Path, port: int, one_target: bool = False
) -> list[str]:
    """``specwatch run`` with one target per log, or one for all of them (through a config
    file beyond one log)."""
    listen = ["--listen", f"127.0.0.1:{port}"]
    if len(logs) == 1:
        return [*SPECWATCH, "run", "--log-file", str(logs[0]), *listen]
    config = folder / "specwatch.yaml"
    lines = ["targets:"]
    if one_target:
        lines += ["  - name: server", "    log_files:", *(f"      - {log}" for log in logs)]
    for number, log in enumerate([] if one_target else logs):
        lines += [f"  - name: server-{number}", f"    log_files: [{log}]"]
    config.write_text("\n".join(lines) + "\n")
    return [*SPECWATCH, "run", "--config", str(config), *listen]


def mtail_argv(logs: Sequence[Path], port: int) -> list[str]:
    paths = [arg for log in logs for arg in ("--logs", str(log))]
    progs = ["--progs", str(MTAIL_PROGRAMS), "--address", "127.0.0.1", "--port", str(port)]
    return ["mtail", *progs, *paths, "--logtostderr"]


@contextmanager
def programs(logs: Sequence[Path], folder: Path, one_target: bool) -> Iterator[list[Program]]:
    """specwatch, mtail and node_exporter running and ready, the first two on ``logs``."""
    ports = [free_port() for _ in range(3)]
    argvs = {
        "specwatch": (specwatch_argv(logs, folder, ports[0], one_target), "/healthz"),
        "mtail": (mtail_argv(logs, ports[1]), "/metrics"),
        "node_exporter": (
            [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{ports[2]}"],
            "/metrics",
        ),
    }
    with ExitStack() as stack:
        running = []
        for (name, (argv, ready)), port in zip(argvs.items(), ports, strict=True):
            proc = stack.enter_context(_launched(argv))
            _wait_ready(proc, f"http://127.0.0.1:{port}{ready}")
            running.append(Program(name, proc, f"http://127.0.0.1:{port}/metrics"))
        yield running


class Writer:
    """Appends pre-made lines to logs, one ``write`` per line, each at its own moment."""

    def __init__(self, schedule: list[tuple[float, int, bytes]], logs: Sequence[Path]) -> None:
        self._schedule = schedule  # (seconds from start, log index, line), in time order
        self._fds = [os.open(log, os.O_WRONLY | os.O_APPEND) for log in logs]
        self._next = 0
        self._start = time.perf_counter()

    def run_until(self, deadline: float) -> None:
        """Write what is due until ``deadline`` (perf_counter), sleeping between writes."""
        schedule = self._schedule
        while (now := time.perf_counter()) < deadline:
            elapsed = now - self._start
            while self._next < len(schedule) and schedule[self._next][0] <= elapsed:
                _, index, line = schedule[self._next]
                os.write(self._fds[index], line)
                self._next += 1
            due = schedule[self._next][0] if self._next < len(schedule) else float("inf")
            time.sleep(max(0.0, min(deadline - now, self._start + due - now, 0.5)))

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)


def _spread(
    seconds: list[list[str]], log: int, rng: random.Random
) -> list[tuple[float, int, bytes]]:
    """Each second's lines at random moments within it."""
    out = []
    for number, lines in enumerate(seconds):
        moments = sorted(rng.random() for _ in lines)
        out += [
            (number + at, log, (line + "\n").encode())
            for at, line in zip(moments, lines, strict=True)
        ]
    return out


def node_seconds(
    rng: random.Random, seconds: int, ranks: int, extra: tuple[int, int, int]
) -> list[list[str]]:
    start = datetime(2026, 2, 1, 12, 0, 0)
    return [
        second_of(rng, start + timedelta(seconds=n), ranks, 2.8, *extra) for n in range(seconds)
    ]


def schedule_for(
    phase: str, logs: list[Path], seconds: int, args: argparse.Namespace
) -> list[tuple[float, int, bytes]]:
    rng = random.Random(11)
    span = span_of(seconds, args)
    if phase == "idle":
        return []
    if phase == "ranks8":
        return _spread(node_seconds(rng, span, 8, (4, 4, 0)), 0, rng)
    if phase == "heavy":
        busy = logs[0].parent / "busy-source.log"
        write_busy_log(busy, args.heavy_rate * span + 200)
        lines = busy.read_bytes().splitlines(keepends=True)[200:]
        busy.unlink()
        return [(n / args.heavy_rate, 0, line) for n, line in enumerate(lines)]
    schedule: list[tuple[float, int, bytes]] = []
    for index in range(len(logs)):  # files100: 1 decode, 1 prefill, 3 access, 1 request a second
        schedule += _spread(node_seconds(rng, span, 1, (1, 3, 1)), index, rng)
    schedule.sort(key=lambda item: item[0])
    return schedule


LATENCY_SCRAPES = 20


def span_of(seconds: int, args: argparse.Namespace) -> int:
    """Seconds of lines to write: the latency scrapes after the CPU window keep its load."""
    every: float = args.latency_every
    return seconds + math.ceil(LATENCY_SCRAPES * every) + 35


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_phase(phase: str, folder: Path, args: argparse.Namespace) -> None:
    count = args.files if phase == "files100" else 1
    logs = [folder / f"{phase}-{n}.log" for n in range(count)]
    for log in logs:
        log.write_bytes(b"")
    schedule = schedule_for(phase, logs, args.seconds, args)
    rate = len(schedule) / span_of(args.seconds, args)
    targets = 1 if args.one_target else count
    print(
        f"\n## {phase}: {count} log(s), {targets} target(s), {rate:.1f} lines/s, "
        f"load average {loadavg()}"
    )
    with programs(logs, folder, args.one_target) as progs:
        writer = Writer(schedule, logs)
        try:
            writer.run_until(time.perf_counter() + 3)  # settle: first passes, first scrapes
            before = {p.name: p.cpu() for p in progs}
            start = time.perf_counter()
            next_scrape = start
            while (now := time.perf_counter()) < start + args.seconds:
                if now >= next_scrape:
                    for prog in progs:
                        prog.scrapes.append(prog.scrape())
                    next_scrape += args.scrape_interval
                writer.run_until(min(next_scrape, start + args.seconds))
            spent = time.perf_counter() - start
            used = {p.name: p.cpu() - before[p.name] for p in progs}
            latencies: list[float] = []
            for _ in range(LATENCY_SCRAPES):
                latencies.append(progs[0].scrape())
                writer.run_until(time.perf_counter() + args.latency_every)
        finally:
            writer.close()
        print(f"load average at the end {loadavg()}; window {spent:.1f} s")
        print("| program | CPU % of a core | RSS MiB | threads |")
        print("|---|---|---|---|")
        for prog in progs:
            pid = prog.proc.pid
            rss = memory_kib(pid, "VmRSS") / 1024
            threads = memory_kib(pid, "Threads")
            print(f"| {prog.name} | {100 * used[prog.name] / spent:.3f} | {rss:.1f} | {threads} |")
        p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
        print(
            f"specwatch /metrics: p50 {p50 * 1e3:.1f} ms, max {p99 * 1e3:.1f} ms "
            f"({LATENCY_SCRAPES} scrapes {args.latency_every:g} s apart)"
        )
        window = ", ".join(f"{seconds * 1e3:.1f}" for seconds in progs[0].scrapes)
        every = f"{args.scrape_interval:g} s apart"
        print(f"specwatch /metrics in the CPU window, {every}: {window} ms")


def _child_cpu(proc: subprocess.Popen[bytes]) -> float:
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def start_phase(folder: Path, starts: int) -> None:
    log = folder / "start.log"
    log.write_bytes(b"")
    print(f"\n## start to ready, {starts} launches each, load average {loadavg()}")
    print("| program | wall s (each) | CPU s by ready (median) |")
    print("|---|---|---|")
    for name in ("specwatch", "mtail", "node_exporter"):
        walls, cpus = [], []
        for _ in range(starts):
            port = free_port()
            argv, path = {
                "specwatch": (specwatch_argv([log], folder, port), "/healthz"),
                "mtail": (mtail_argv([log], port), "/metrics"),
                "node_exporter": (
                    [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"],
                    "/metrics",
                ),
            }[name]
            with _launched(argv) as proc:
                walls.append(_wait_ready(proc, f"http://127.0.0.1:{port}{path}"))
                cpus.append(_child_cpu(proc))
        shown = ", ".join(f"{wall:.3f}" for wall in walls)
        print(f"| {name} | {shown} | {statistics.median(cpus):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="CPU window per phase (max 60)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each phase")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument(
        "--latency-every", type=float, default=0.25, help="seconds between the latency scrapes"
    )
    parser.add_argument("--heavy-rate", type=int, default=2000, help="lines/s of `heavy`")
    parser.add_argument("--files", type=int, default=100, help="logs of `files100`")
    parser.add_argument("--one-target", action="store_true", help="`files100` as one target")
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    args.seconds = min(args.seconds, 60)
    for tool in ("mtail", NODE_EXPORTER):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (make bench installs the Debian package)")
    print(f"{os.cpu_count()} CPUs; specwatch on {sys.version.split()[0]}")
    # As installed from the wheel: pip compiles every module. A source checkout run under
    # PYTHONDONTWRITEBYTECODE (or read-only) would compile changed modules at every start.
    compileall.compile_dir(Path(exporter.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory(prefix="specwatch-live-") as tmp:
        for phase in args.phases:
            for _ in range(args.runs if phase != "start" else 1):
                if phase == "start":
                    start_phase(Path(tmp), args.starts)
                else:
                    run_phase(phase, Path(tmp), args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
