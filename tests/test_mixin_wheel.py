"""``specwatch mixin`` from a wheel in a fresh virtualenv: a pip user renders without a checkout.

The wheel is built from what the container image's build context holds (the package and the
runbook), installed with its dependencies into a new virtualenv outside the repository, and
run from an empty directory. Its default rendering must be the repository's committed files,
and a user's config must reach the rules, the PrometheusRule and the dashboards.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.tools import REPO, require_tool

pytestmark = pytest.mark.e2e

# The files a wheel is built from: the Docker build context's (see .dockerignore).
CONTEXT = ("pyproject.toml", "README.md", "exporter", "alerts/runbook.md")
COMMITTED = {
    "prometheus_alerts.yaml": REPO / "alerts" / "prometheus_alerts.yaml",
    "prometheus_rules.yaml": REPO / "alerts" / "prometheus_rules.yaml",
    "prometheusrule.yaml": REPO / "deploy" / "kubernetes" / "base" / "prometheusrule.yaml",
    "runbook.md": REPO / "alerts" / "runbook.md",
    "dashboards_out/specwatch-node.json": REPO / "dashboards" / "specwatch-node.json",
    "dashboards_out/specwatch-fleet.json": REPO / "dashboards" / "specwatch-fleet.json",
    "rendered.json": REPO / "specwatch-mixin" / "rendered.json",
    "dashboards_v2_out/specwatch-node.json": REPO / "dashboards-v2" / "specwatch-node.json",
    "dashboards_v2_out/specwatch-fleet.json": REPO / "dashboards-v2" / "specwatch-fleet.json",
}


def run(*args: str | Path, cwd: Path) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ``specwatch`` script of a fresh virtualenv holding only the wheel and its deps."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    for name in CONTEXT:
        src, dest = REPO / name, source / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest)
    pip = (sys.executable, "-m", "pip")
    run(*pip, "wheel", "--no-deps", "--wheel-dir", base / "dist", source, cwd=base)
    (wheel,) = (base / "dist").glob("specwatch-*.whl")
    # The virtualenv without a pip of its own, installed into by this one (`pip --python`):
    # its own pip's bootstrap and start were a third of the set-up. Nothing is compiled ahead
    # (a fifth): the commands below compile what they import.
    run(sys.executable, "-m", "venv", "--without-pip", base / "venv", cwd=base)
    venv_python = base / "venv" / "bin" / "python"
    run(*pip, "--python", venv_python, "install", "--quiet", "--no-compile", wheel, cwd=base)
    yield base / "venv" / "bin" / "specwatch"


def test_the_wheel_renders_the_committed_files_by_default(installed: Path, tmp_path: Path) -> None:
    run(installed, "mixin", "--out", tmp_path / "out", cwd=tmp_path)
    written = {
        p.relative_to(tmp_path / "out").as_posix()
        for p in (tmp_path / "out").rglob("*")
        if p.is_file()
    }
    assert written == set(COMMITTED)
    for name, committed in COMMITTED.items():
        text = (tmp_path / "out" / name).read_text(encoding="utf-8")
        assert text == committed.read_text(encoding="utf-8"), name


def test_the_wheel_renders_a_users_labels_that_promtool_loads(
    installed: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mixin.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "selector": 'job="llm-spec", namespace="prod"',
                "rule_labels": {"prometheus": "k8s"},
                "alert_labels": {"team": "inference"},
                "dashboard_uid_prefix": "prod",
            }
        )
    )
    out = tmp_path / "out"
    run(installed, "mixin", "--config", config, "--out", out, cwd=tmp_path)
    rules = [out / "prometheus_rules.yaml", out / "prometheus_alerts.yaml"]
    run(require_tool("promtool"), "check", "rules", *rules, cwd=tmp_path)
    alerts = yaml.safe_load(rules[1].read_text())["groups"]
    assert all(r["labels"]["team"] == "inference" for g in alerts for r in g["rules"])
    assert 'namespace="prod"' in rules[0].read_text()
    operator = yaml.safe_load((out / "prometheusrule.yaml").read_text())
    assert operator["metadata"]["labels"]["prometheus"] == "k8s"
    node = json.loads((out / "dashboards_out" / "specwatch-node.json").read_text())
    assert node["uid"] == "prod-node"
    assert "## SpecDecodeAcceptLengthCollapsed" in (out / "runbook.md").read_text()


def test_the_installed_package_is_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    python = installed.with_name("python")
    where = run(python, "-c", "import exporter.mixin; print(exporter.mixin.__file__)", cwd=tmp_path)
    assert Path(where.strip()).is_relative_to(installed.parent.parent)
