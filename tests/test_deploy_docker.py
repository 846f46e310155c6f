"""The container image definition, checked without a Docker engine.

No engine runs in CI, so the Dockerfile is parsed: the final stage's user, entrypoint and
default command, the multi-stage wheel build, that every COPY source exists and survives
``.dockerignore``, and the HEALTHCHECK command is run for real against a running daemon.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.daemon import run_daemon
from tests.support.deploy import effective_config, log_dirs_of
from tests.support.tools import REPO

DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name or self.base} has no {keyword}"
        return found[-1]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their instructions; continuation lines joined, comments dropped."""
    logical = re.sub(r"\\\n(?:\s*#[^\n]*\n)*", " ", text)
    stages: list[Stage] = []
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, arg = line.partition(" ")
        keyword, arg = keyword.upper(), arg.strip()
        if keyword == "FROM":
            words = arg.split()
            stages.append(Stage(words[0], words[2] if len(words) == 3 else None))
        elif stages:
            stages[-1].instructions.append((keyword, arg))
    return stages


def exec_form(arg: str) -> list[str]:
    """A JSON-array instruction argument; the shell form would break signals and PID 1."""
    value = json.loads(arg)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arg
    return value


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern.lstrip("!").strip("/")
        regex = re.escape(glob).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        if any(re.fullmatch(regex.replace(r"\?", "[^/]"), c) for c in candidates):
            excluded = not negate
    return excluded


def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def test_wheels_are_built_in_a_builder_stage_and_installed_offline(stages: list[Stage]) -> None:
    builder, final = stages[0], stages[-1]
    assert len(stages) == 2 and builder.name
    assert any("pip wheel" in run for run in builder.all("RUN"))
    install = next(run for run in final.all("RUN") if "pip install" in run)
    assert "--no-index" in install, "the final stage must install only the built wheels"
    assert f"from={builder.name}" in install
    for stage in stages:
        assert re.match(r"python:\$\{PYTHON_VERSION\}-slim", stage.base), stage.base


def test_the_image_holds_specwatchs_bytecode(stages: list[Stage]) -> None:
    """The root filesystem is read-only: bytecode not there at build time would be compiled
    in memory at every start."""
    install = next(run for run in stages[-1].all("RUN") if "pip install" in run)
    assert "--no-compile" not in install
    assert "python -m compileall" in install and "import exporter" in install


def test_final_stage_runs_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    user, _, group = stages[-1].last("USER").partition(":")
    # Numeric so Kubernetes' runAsNonRoot can verify it.
    assert user.isdigit() and int(user) != 0
    assert not group or (group.isdigit() and int(group) != 0)


def test_entrypoint_is_specwatch_and_default_command_starts_the_daemon(
    stages: list[Stage],
) -> None:
    final = stages[-1]
    assert exec_form(final.last("ENTRYPOINT")) == ["specwatch"]
    argv = exec_form(final.last("CMD"))
    baked = copied_file(final, argv[argv.index("--config") + 1])
    config = effective_config(argv, baked)
    assert log_dirs_of(config) == {"/var/log/sglang"}
    assert config.listen.endswith(":9477")
    assert "9477" in final.last("EXPOSE").split()


def copied_file(stage: Stage, destination: str) -> Path:
    """The repository file a COPY instruction puts at ``destination`` in the image."""
    for arg in stage.all("COPY"):
        words = [w for w in arg.split() if not w.startswith("--")]
        if words[-1] == destination:
            return REPO / words[0]
    raise AssertionError(f"nothing is copied to {destination}")


def test_every_copy_source_exists_and_is_in_the_build_context(stages: list[Stage]) -> None:
    patterns = ignore_patterns()
    for stage in stages:
        for arg in stage.all("COPY"):
            if "--from=" in arg:
                continue
            for source in [w for w in arg.split() if not w.startswith("--")][:-1]:
                assert (REPO / source).exists(), f"COPY {source}: no such file"
                assert not dockerignore_excludes(patterns, source.rstrip("/")), source


def test_dockerignore_keeps_checkouts_and_caches_out_of_the_context() -> None:
    patterns = ignore_patterns()
    for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "exporter/__pycache__"):
        assert dockerignore_excludes(patterns, path), path
    for path in ("pyproject.toml", "exporter/cli.py", "exporter/engines/sglang.py"):
        assert not dockerignore_excludes(patterns, path), path


def test_oci_labels_name_the_image(stages: list[Stage]) -> None:
    labels = " ".join(stages[-1].all("LABEL"))
    for key in ("title", "description", "version", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def healthcheck_argv(stage: Stage) -> list[str]:
    arg = stage.last("HEALTHCHECK")
    command = exec_form(arg[arg.index("CMD") + 3 :].strip())
    assert command[0] == "python", "the slim image has python, not curl"
    return [sys.executable, *command[1:]]


def default_healthcheck_url(stage: Stage) -> str:
    env = " ".join(stage.all("ENV"))
    match = re.search(r"HEALTHCHECK_URL=(\S+)", env)
    assert match, "the image must set HEALTHCHECK_URL"
    return match.group(1)


def test_healthcheck_targets_healthz_on_the_exposed_port(stages: list[Stage]) -> None:
    final = stages[-1]
    url = default_healthcheck_url(final)
    assert url == f"http://127.0.0.1:{final.last('EXPOSE')}/healthz"


@pytest.mark.e2e
def test_healthcheck_command_passes_on_a_running_daemon_and_fails_without_one(
    stages: list[Stage], tmp_path: Path, port: int
) -> None:
    final = stages[-1]
    argv = healthcheck_argv(final)
    baked = copied_file(final, "/etc/specwatch/specwatch.yaml")
    url = default_healthcheck_url(final).replace(":9477/", f":{port}/")
    env = {**os.environ, "HEALTHCHECK_URL": url}
    with run_daemon(["--config", str(baked), "--log-file", str(tmp_path / "server.log")], port):
        assert subprocess.run(argv, env=env, capture_output=True, timeout=10).returncode == 0
    down = subprocess.run(argv, env=env, capture_output=True, timeout=10)
    assert down.returncode != 0, "a stopped daemon must make the container unhealthy"
