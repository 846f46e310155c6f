"""The repository, real external tools and free loopback ports."""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# Prometheus 3.5 LTS, promtool and a current Alertmanager (with amtool), as most users run them:
# `make tools` (scripts/install-prometheus.sh) puts them here, and the tests run only these.
# Debian 12's Prometheus 2 on the PATH is the floor, run by tests/test_prometheus_floor.py.
TOOLS_BIN = REPO / ".tools" / "bin"
PINNED_TOOLS = ("prometheus", "promtool", "prometheus-alertmanager", "amtool")
# The default mixin rendering: recording rules first, since the alerts read them.
RULE_FILES = (REPO / "alerts" / "prometheus_rules.yaml", REPO / "alerts" / "prometheus_alerts.yaml")


def shipped_rules() -> dict[str, Any]:
    """Both shipped rule files as one rule file's content (every group, in load order)."""
    groups = [g for path in RULE_FILES for g in load_yaml(path)["groups"]]
    return {"groups": groups}


def load_yaml(path: Path) -> Any:
    """``path``'s YAML, read as ``yaml.safe_load`` reads it, by libyaml: a tenth of the CPU
    of the pure-Python reader, for the rule and scenario files tests read again and again."""
    return parse_yaml(path.read_text())


def parse_yaml(text: str) -> Any:
    """YAML text read as ``yaml.safe_load`` reads it, by libyaml (``load_yaml``)."""
    return yaml.load(text, Loader=yaml.CSafeLoader)


@cache
def speed_budget_rendering() -> dict[str, str]:
    """The mixin rendered with the optional speed-budget rules, at the ``speed_slo`` of 0.99
    its promtool scenarios are written for: half a CPU-second, made once a process."""
    # Imported here: the conftest imports this module, and most test processes render nothing.
    from exporter.mixin.render import render
    from exporter.mixin_config import MixinConfig

    return render(MixinConfig(speed_slo=0.99))


def group_order_problem(scenario: dict[str, Any], groups: list[dict[str, Any]]) -> str | None:
    """Why a promtool scenario file's ``group_eval_order`` is unsafe for these rule groups.

    Without a fixed order promtool evaluates the groups in a random order at each step, so an
    alert can read a recording rule's value of the step before and a scenario at an edge passes
    or fails by chance. Every group must be listed, recording groups before alerting ones.
    """
    order = scenario.get("group_eval_order", [])
    records = {g["name"]: any("record" in rule for rule in g["rules"]) for g in groups}
    if sorted(order) != sorted(records):
        return f"group_eval_order must list every group: {sorted(records)}, got {order}"
    kinds = [records[name] for name in order]
    if kinds != sorted(kinds, reverse=True):
        return f"recording groups must come first: {order}"
    return None


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration_seconds(text: str) -> int:
    """Seconds of a Prometheus duration such as ``5m`` or ``1h30m``."""
    parts = re.findall(r"(\d+)([smh])", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"unsupported duration {text!r}"
    return sum(int(n) * DURATION_UNITS[u] for n, u in parts)


def fast_rules() -> dict[str, Any]:
    """The shipped rules with every minute of ``for``/``keep_firing_for`` turned into a second."""
    rules = shipped_rules()
    for group in rules["groups"]:
        for rule in group["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = f"{max(1, duration_seconds(rule[key]) // 60)}s"
    return rules


def require_tool(name: str) -> str:
    """Path of a real external tool; in CI a missing tool fails the test instead of skipping.

    Prometheus' tools are the pinned ones of ``TOOLS_BIN`` only, never whichever the PATH has,
    so a test says which version it proved.
    """
    if name in PINNED_TOOLS:
        pinned = TOOLS_BIN / name
        if pinned.exists():
            return str(pinned)
        missing(f"{name} is not installed here (make tools: scripts/install-prometheus.sh)")
    path = shutil.which(name)
    if path:
        return path
    missing(f"{name} is not installed (make test installs it: scripts/install-system-deps.sh)")


def floor_tool(name: str) -> str:
    """The system's Prometheus 2 ``name`` (Debian 12's), the oldest version specwatch supports."""
    others = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != TOOLS_BIN
    )
    path = shutil.which(name, path=others)
    if path is None:
        missing(f"{name} 2.x is not installed (scripts/install-system-deps.sh)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    if not re.search(r"version 2\.", version.stdout + version.stderr):
        missing(f"{path} is not Prometheus 2: {version.stdout.splitlines()[:1]}")
    return path


def missing(message: str) -> NoReturn:
    """Skip a test whose tool is absent; in CI, where every tool is installed, fail it."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# Ports tests hand out lie beneath Linux's ephemeral range (32768 and up by default): a port
# the kernel picked for ``bind(0)`` could meanwhile be given to some client connection before
# the daemon meant to listen on it binds it. Picked at random, as bind(0) picks, so that
# pytest-xdist workers and other test runs on the machine rarely try the same one; one that
# is taken is passed over, and none is handed out twice in a process.
_PORTS = range(20_000, 32_768)
_handed_out: set[int] = set()
# Ports handed out by any test process of the machine (another worker, another run): a file
# each, made only where none is, removed when the process that made it exits. Two processes
# that both found a port free could otherwise both hand it out before either's server bound
# it. A claim a killed run left is taken back after a day.
_CLAIMS = Path(tempfile.gettempdir()) / "specwatch-test-ports"
_CLAIM_DAYS = 1
_claimed: list[Path] = []


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before by any test process."""
    for _ in range(1000):
        port = random.choice(_PORTS)
        if port in _handed_out or not _claim(port):
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use, or lingering after an earlier test: try another
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {_PORTS}")


def _claim(port: int) -> bool:
    """Whether this process now holds ``port`` against every other test process; True, too,
    where no claim can be made (a temporary directory it may not write)."""
    path = _CLAIMS / str(port)
    try:
        _CLAIMS.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if time.time() - path.stat().st_mtime > _CLAIM_DAYS * 86400:
                path.unlink()
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:
        return True
    _claimed.append(path)
    return True


@atexit.register
def _release_claims() -> None:
    for path in _claimed:
        with contextlib.suppress(OSError):
            path.unlink()


def unprivileged() -> list[str]:
    """Command prefix under which file permissions apply (root ignores them by default)."""
    if os.geteuid() != 0:
        return []
    return [require_tool("setpriv"), "--bounding-set=-dac_override,-dac_read_search"]


def promtool_check(expressions: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` on the expressions wrapped as recording rules."""
    rules = [{"record": f"dashboard:query_{i}:check", "expr": e} for i, e in enumerate(expressions)]
    path = tmp_path / "dashboard-queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    return subprocess.run(
        [require_tool("promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
