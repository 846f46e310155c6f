"""Every specwatch config and command line shipped in ``deploy/`` is one specwatch accepts.

Deployment files are only read by users' machines, so nothing else would notice a renamed flag
or config key before a pod crash-loops. The helpers here are shared by the other deploy tests.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
import yaml

from exporter.config import Config, TargetConfig, load_config
from tests.support.deploy import DEPLOY, EXAMPLE, parse_specwatch_argv
from tests.support.docs import DOC_PAGES, doc
from tests.support.tools import REPO

# Folders of deploy/ holding other programs' configs (which may also be named specwatch.yaml).
OTHER_PROGRAMS = ("grafana", "prometheus", "alertmanager")
# Every file in deploy/ that specwatch itself reads as --config.
SHIPPED_CONFIGS = sorted(
    p
    for p in DEPLOY.rglob("specwatch*.yaml")
    if p.relative_to(DEPLOY).parts[0] not in OTHER_PROGRAMS
)


def test_deploy_ships_the_expected_configs() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in SHIPPED_CONFIGS}
    assert {
        "specwatch.example.yaml",
        "docker/specwatch.yaml",
        "compose/specwatch.yaml",
        "kubernetes/overlays/sidecar/specwatch.yaml",
        "kubernetes/overlays/daemonset/specwatch.yaml",
    } <= names


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: p.relative_to(DEPLOY).as_posix())
def test_shipped_config_loads_with_specwatch_loader(path: Path) -> None:
    config = load_config(path, environ={})
    assert config.targets, "a shipped config must watch something"
    for target in config.targets:
        assert target.engine == "sglang"
        assert target.log_files or target.url, f"{target.name} has no source"
        # Log paths are where the file is on the node or in the container: absolute.
        assert all(p == "-" or p.startswith("/") for p in target.log_files), target.log_files


def test_example_config_shows_every_key() -> None:
    """The example is the reference users copy: a key missing there is a key nobody finds."""
    text = EXAMPLE.read_text(encoding="utf-8")
    shown = set(re.findall(r"^\s*#?\s*(?:- )?([a-z_]+):", text, flags=re.MULTILINE))
    keys = {f.name for model in (Config, TargetConfig) for f in msgspec.structs.fields(model)}
    missing = keys - shown
    assert not missing, f"{EXAMPLE.name} does not mention {sorted(missing)}"
    assert {"tok_s", "curve", "bench_file"} <= shown


def test_example_config_is_annotated_yaml_with_defaults_matching_the_loader() -> None:
    """Values documented as defaults in the example must be the loader's real defaults."""
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    defaults = Config()
    for key in ("listen", "stale_after", "max_line_bytes", "from_beginning", "web_config"):
        assert data[key] == getattr(defaults, key), key
    assert data["targets"][0]["scrape_interval"] == TargetConfig().scrape_interval


def test_bad_flag_in_a_deploy_command_line_is_caught() -> None:
    """The guard the other deploy tests rely on really rejects an unknown flag."""
    with pytest.raises(pytest.fail.Exception, match="--log-files"):
        parse_specwatch_argv(["run", "--log-files", "/x"])


# Deploy files (and the pages that explain them) that may name repository paths.
REFERRING_FILES = [
    REPO / ".dockerignore",
    *DOC_PAGES,
    *(
        p
        for p in DEPLOY.rglob("*")
        if p.is_file() and p.relative_to(DEPLOY).parts[0] not in OTHER_PROGRAMS
    ),
]
# A repository-relative path: starts at a top-level folder, not inside an absolute path or URL.
_REPO_PATH = re.compile(r"(?<![\w./-])((?:deploy|alerts|dashboards|exporter|scripts)/[\w./-]*\w)")


def test_repository_paths_named_in_deploy_files_exist() -> None:
    referenced = {
        (path.relative_to(REPO).as_posix(), ref)
        for path in REFERRING_FILES
        for ref in _REPO_PATH.findall(path.read_text(encoding="utf-8", errors="replace"))
    }
    assert len(referenced) > 5, "the pattern no longer finds the references"
    # A path is the repository's, or (a link of a page in docs/) its own folder's.
    missing = [
        (where, ref)
        for where, ref in sorted(referenced)
        if not ((REPO / ref).exists() or (REPO / where).parent.joinpath(ref).exists())
    ]
    assert not missing, missing


def test_the_deployment_page_covers_every_path_and_how_to_scale() -> None:
    deploying = doc("deployment.md")
    paths = ["deploy/docker/Dockerfile", "deploy/compose", "deploy/systemd"] + [
        overlay.relative_to(REPO).as_posix()
        for overlay in sorted((DEPLOY / "kubernetes" / "overlays").iterdir())
    ]
    assert len(paths) >= 5
    for path in paths:
        assert f"`{path}`" in deploying, f"docs/deployment.md does not mention {path}"
    subsections = re.findall(r"^## (.+)$", deploying, flags=re.MULTILINE)
    for how in ("Container image", "Kubernetes", "Compose", "systemd", "Scaling"):
        assert any(s.startswith(how) for s in subsections), f"no subsection on {how}"
    scaling = deploying.split("## Scaling", 1)[1]
    assert "One specwatch per serving node" in scaling
    assert "Thanos" in scaling and "Mimir" in scaling
    # What one node adds: a measured number of series, not only a bound (test_cardinality.py
    # measures it again).
    assert re.search(r"^\| SGLang, healthy, one rank[^|]*\| \d+ \|$", deploying, re.MULTILINE)
