"""How many CPUs this process may really use: its affinity, and its container's CPU quota.

A pod limited to 250m CPU still sees every core of the node in ``os.cpu_count()`` and in its
affinity; only the cgroup says it gets a quarter of one. Starting three helper processes there
would have them take turns on that quarter, each holding its memory meanwhile. The quota is
read from cgroup v2's ``cpu.max`` (the smallest along the process's cgroup path, as the kernel
enforces every level) or v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; an unreadable or
odd file is no limit rather than an error.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")
# v1 mounts the cpu controller under one of these names, depending on the distribution.
_V1_CPU_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def usable_cpus(root: Path | None = None, self_cgroup: Path | None = None) -> int:
    """Whole CPUs to plan work for: the affinity's cores, fewer under a CPU quota (rounded
    down, at least 1: 1.5 CPUs keep one process busy, not two). The cgroup files are
    ``CGROUP_ROOT`` and ``SELF_CGROUP`` unless given."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = cpu_quota(root or CGROUP_ROOT, self_cgroup or SELF_CGROUP)
    if quota is None:
        return max(cores, 1)
    return max(1, min(cores, math.floor(quota)))


def cpu_quota(root: Path, self_cgroup: Path) -> float | None:
    """The CPUs the cgroup quota allows (0.25 for 250m), or None when there is no quota."""
    try:
        membership = self_cgroup.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    v2, v1 = _paths(membership)
    if v2 is not None and (root / "cgroup.controllers").exists():
        return _v2_quota(root, v2)
    if v1 is not None:
        return _v1_quota(root, v1)
    return None


def _paths(membership: str) -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in v1's cpu controller."""
    v2 = v1 = None
    for line in membership.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _v2_quota(root: Path, path: str) -> float | None:
    """The smallest ``cpu.max`` from the process's cgroup up to the root it can see."""
    limits = []
    here = root / path.strip("/")
    while True:
        limits.append(_ratio(here / "cpu.max", None))
        if here == root or root not in here.parents:
            break
        here = here.parent
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _v1_quota(root: Path, path: str) -> float | None:
    """``cfs_quota_us / cfs_period_us`` of the cpu controller; in a container the process's
    own cgroup is the mount's root, so that is tried when its path is not there."""
    for name in _V1_CPU_DIRS:
        mount = root / name
        for directory in (mount / path.strip("/"), mount):
            quota = _ratio(directory / "cpu.cfs_quota_us", directory / "cpu.cfs_period_us")
            if quota is not None:
                return quota
    return None


def _ratio(quota_file: Path, period_file: Path | None) -> float | None:
    """A quota over its period; v2 keeps both in one file (``max 100000`` is no limit)."""
    try:
        text = quota_file.read_text(encoding="ascii").split()
        if period_file is not None:
            text += period_file.read_text(encoding="ascii").split()
        quota, period = int(text[0]), int(text[1])
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        return None  # "max", -1 (v1's no limit), absent or odd: no limit known here
    return quota / period if quota > 0 and period > 0 else None
