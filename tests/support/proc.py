"""What a running process costs, read from /proc, for tests that bound threads and memory."""

from __future__ import annotations

import os
from pathlib import Path

# The memory limit the shipped deploy manifests set.
MEMORY_LIMIT_MIB = 128
SCRAPE_BUDGET = 3.0  # seconds a normal scrape may take while an attack runs


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def threads(pid: int) -> int:
    return int(_status(pid)["Threads"])


def rss_mib(pid: int) -> float:
    return int(_status(pid)["VmRSS"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
