"""What a running process holds, read from /proc, for tests that bound threads and memory."""

from __future__ import annotations

from pathlib import Path

# The memory limit the shipped deploy manifests set.
MEMORY_LIMIT_MIB = 128
# Prometheus's default scrape_timeout: a scrape that takes longer is a failed scrape. Tests
# wait this long for an answer that must come; how soon it comes is measured in bench/.
SCRAPE_TIMEOUT = 10.0


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def threads(pid: int) -> int:
    return int(_status(pid)["Threads"])


def rss_mib(pid: int) -> float:
    return int(_status(pid)["VmRSS"].split()[0]) / 1024
