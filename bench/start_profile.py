"""Where a start's CPU and memory go: each module a ready ``specwatch run`` imported, by package.

First a real ``specwatch run --log-file X`` is started with ``-X importtime`` and read until
``/healthz`` answers: its CPU by then, and the modules it imported, in the order they finished
(each after every module it imports). Then ``--rounds`` fresh interpreters import that list in
that order, timing each module alone (CPU seconds, so a loaded machine slows the figures less
than it does wall time) with the resident memory it adds: a module's figure is its own body
(its classes, regexes, the shared libraries it loads), its imports being loaded already. The
medians are summed by top-level package (specwatch's by subpackage); a package's own
``__init__`` counts in the first of its modules imported. What the imports leave of the CPU by
ready is the config's validation, the targets and the first pass, within the noise of a
loaded machine.

    nice .venv/bin/python bench/start_profile.py [--rounds 5] [--top 25]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchlib import SPECWATCH, cpu_seconds, fetch, free_port

# Run in each fresh interpreter: the modules on stdin, imported in order; one line of JSON.
# RSS from /proc/self/statm, kept open: reading /proc/self/status cost more than the smaller
# modules' imports, and the peak RSS of getrusage lags behind a shared library's pages.
_IMPORT_EACH = """
import importlib, json, os, sys, time
STATM, PAGE_MIB = os.open("/proc/self/statm", os.O_RDONLY), os.sysconf("SC_PAGE_SIZE") / 2**20
def rss():
    return int(os.pread(STATM, 200, 0).split()[1]) * PAGE_MIB
out = []
for name in json.load(sys.stdin):
    if name in sys.modules:
        continue
    memory, cpu = rss(), time.process_time()
    try:
        importlib.import_module(name)
    except Exception:
        continue
    out.append((name, time.process_time() - cpu, rss() - memory))
print(json.dumps(out))
"""
_IMPORTED = re.compile(r"^import time:\s*\d+ \|\s*\d+ \|\s*(\S+)$", re.MULTILINE)


def ready_run(folder: Path) -> tuple[float, list[str]]:
    """CPU seconds of a ``specwatch run`` by ready, and the modules it imported by then."""
    log, trace = folder / "server.log", folder / "importtime.txt"
    log.write_bytes(b"")
    port = free_port()
    argv = [*SPECWATCH, "run", "--log-file", str(log), "--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    with trace.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            cpu = _cpu_by_ready(proc, port)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    names = _IMPORTED.findall(trace.read_text())
    return cpu, [name for name in names if not name.endswith("__main__")]


def _cpu_by_ready(proc: subprocess.Popen[bytes], port: int) -> float:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"specwatch run exited {proc.returncode}")
        try:
            fetch(f"http://127.0.0.1:{port}/healthz")
            return cpu_seconds(proc.pid)
        except OSError:
            time.sleep(0.01)
    raise SystemExit("specwatch run was not ready within 60 s")


def import_each(names: list[str]) -> list[tuple[str, float, float]]:
    """(module, CPU seconds, MiB added) of each module, imported alone in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
    )
    return [(name, cpu, mib) for name, cpu, mib in json.loads(done.stdout)]


def interpreter_cpu() -> float:
    """CPU seconds of an interpreter that starts (site included) and imports nothing else."""
    code = "import time; print(time.process_time())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return float(done.stdout)


def group(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "exporter" else parts[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="modules listed one by one")
    args = parser.parse_args()
    ready: list[float] = []
    cpus: dict[str, list[float]] = defaultdict(list)
    mibs: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="specwatch-start-") as tmp:
        for _ in range(args.rounds):
            cpu_by_ready, names = ready_run(Path(tmp))
            ready.append(cpu_by_ready)
            for name, seconds, added in import_each(names):
                cpus[name].append(seconds)
                mibs[name].append(added)
    cpu = {name: statistics.median(values) for name, values in cpus.items()}
    mib = {name: statistics.median(values) for name, values in mibs.items()}
    group_cpu: dict[str, float] = defaultdict(float)
    group_mib: dict[str, float] = defaultdict(float)
    for name in cpu:
        group_cpu[group(name)] += cpu[name]
        group_mib[group(name)] += mib[name]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load}; Python {sys.version.split()[0]}; median of {args.rounds}")
    print(
        f"CPU by ready {statistics.median(ready):.3f} s (of which the interpreter's start "
        f"{interpreter_cpu():.3f} s); the {len(cpu)} modules' imports {sum(cpu.values()):.3f} s"
    )
    print("\n| package | CPU ms | RSS MiB |\n|---|---|---|")
    for name in sorted(group_cpu, key=lambda each: -group_cpu[each]):
        if group_cpu[name] >= 0.002:
            print(f"| {name} | {group_cpu[name] * 1000:.1f} | {group_mib[name]:.2f} |")
    print("\n| module | CPU ms | RSS MiB |\n|---|---|---|")
    for name in sorted(cpu, key=lambda each: -cpu[each])[: args.top]:
        print(f"| {name} | {cpu[name] * 1000:.1f} | {mib[name]:.2f} |")


if __name__ == "__main__":
    main()
