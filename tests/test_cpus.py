"""Range helpers count the CPUs the container's quota allows, from its cgroup files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter import cpus
from exporter.cpus import cpu_quota, usable_cpus
from exporter.parse import ranges

# /proc/self/cgroup of a process in a pod, on a cgroup v2 host and on a v1 host.
V2_SELF = "0::/kubepods.slice/kubepods-burstable.slice/pod1/cri-containerd-abc.scope\n"
V1_SELF = (
    "12:memory:/kubepods/burstable/pod1/abc\n"
    "4:cpu,cpuacct:/kubepods/burstable/pod1/abc\n"
    "1:name=systemd:/kubepods/burstable/pod1/abc\n"
    "0::/\n"
)


def _v2(tmp_path: Path, limits: dict[str, str]) -> tuple[Path, Path]:
    """A v2 hierarchy under ``tmp_path``: ``cpu.max`` per directory relative to the root."""
    root = tmp_path / "cgroup"
    (root / V2_SELF.strip()[4:]).mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for directory, limit in limits.items():
        (root / directory / "cpu.max").write_text(limit + "\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(V2_SELF)
    return root, self_cgroup


def _v1(tmp_path: Path, quota: str, period: str, mount: str = "cpu,cpuacct") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    directory = root / mount / "kubepods/burstable/pod1/abc"
    directory.mkdir(parents=True)
    (directory / "cpu.cfs_quota_us").write_text(quota + "\n")
    (directory / "cpu.cfs_period_us").write_text(period + "\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(V1_SELF)
    return root, self_cgroup


LEAF = V2_SELF.strip()[4:]


@pytest.mark.parametrize(
    ("limits", "quota"),
    [
        ({LEAF: "25000 100000"}, 0.25),  # the shipped DaemonSet's 250m
        ({LEAF: "200000 100000"}, 2.0),
        ({LEAF: "max 100000"}, None),
        ({}, None),
        # A limit on the pod's slice binds the container below it too.
        (
            {"kubepods.slice/kubepods-burstable.slice/pod1": "150000 100000", LEAF: "max 100000"},
            1.5,
        ),
        ({"kubepods.slice": "400000 100000", LEAF: "300000 100000"}, 3.0),
        ({LEAF: "garbage"}, None),
        ({LEAF: "0 100000"}, None),
    ],
)
def test_cgroup_v2_cpu_max(tmp_path: Path, limits: dict[str, str], quota: float | None) -> None:
    assert cpu_quota(*_v2(tmp_path, limits)) == quota


def test_a_container_that_sees_its_own_cgroup_as_the_root(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "cpu.max").write_text("50000 100000\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text("0::/\n")
    assert cpu_quota(root, self_cgroup) == 0.5


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("25000", "100000", 0.25), ("150000", "100000", 1.5), ("-1", "100000", None)],
)
def test_cgroup_v1_cfs_quota(
    tmp_path: Path, quota: str, period: str, expected: float | None
) -> None:
    assert cpu_quota(*_v1(tmp_path, quota, period)) == expected


def test_cgroup_v1_mounted_as_cpu_with_the_container_at_its_root(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(V1_SELF)
    assert cpu_quota(root, self_cgroup) == 1.0


def test_no_cgroup_files_is_no_limit(tmp_path: Path) -> None:
    assert cpu_quota(tmp_path / "none", tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("limit", "cores", "usable"),
    [("25000 100000", 4, 1), ("150000 100000", 4, 1), ("250000 100000", 4, 2),
     ("800000 100000", 4, 4), ("max 100000", 3, 3)],
)  # fmt: skip
def test_usable_cpus_is_the_affinity_capped_by_the_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str, cores: int, usable: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert usable_cpus(*_v2(tmp_path, {LEAF: limit})) == usable


def test_a_quarter_core_starts_no_range_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped DaemonSet (250m) on an 8-core node: the reader reads alone."""
    root, self_cgroup = _v2(tmp_path, {LEAF: "25000 100000"})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(cpus, "CGROUP_ROOT", root)
    monkeypatch.setattr(cpus, "SELF_CGROUP", self_cgroup)
    assert ranges.helpers_available() == 0
    (root / LEAF / "cpu.max").write_text("300000 100000\n")
    assert ranges.helpers_available() == 2
