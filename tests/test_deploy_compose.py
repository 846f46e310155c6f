"""The one-host Compose stack: valid for docker-compose, and its pieces fit together.

``docker-compose config`` checks the file against the Compose schema. The rest follows the
wiring a user would otherwise debug on a GPU host: every mounted file exists, SGLang's log
reaches specwatch, Prometheus loads the rules where they are mounted and scrapes specwatch
where it listens, and Grafana finds the dashboards and Prometheus.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from exporter.config import Config, parse_listen
from tests.support.deploy import effective_config, log_dirs_of
from tests.support.tools import REPO, require_tool

COMPOSE_DIR = REPO / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yaml"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    compose: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    by_name: dict[str, dict[str, Any]] = compose["services"]
    return by_name


def mounts(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(source, container path, read-only) of the short volume syntax."""
    found = []
    for spec in service.get("volumes", []):
        parts = spec.split(":")
        found.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
    return found


def bind_source(source: str) -> Path | None:
    """The repository path of a relative bind mount; None for volumes and host paths."""
    return (COMPOSE_DIR / source).resolve() if source.startswith(".") else None


def host_file(service: dict[str, Any], container_path: str) -> Path:
    """The repository file (or folder) mounted at ``container_path``."""
    for source, target, _ in mounts(service):
        if container_path == target or container_path.startswith(target + "/"):
            base = bind_source(source)
            assert base, f"{container_path} is not a bind mount from the repository"
            return base / container_path.removeprefix(target).lstrip("/")
    raise AssertionError(f"nothing is mounted at {container_path}")


def flag(args: list[str], name: str) -> str:
    """The value of ``--name=value`` or ``--name value`` in an argument list."""
    for i, arg in enumerate(args):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name:
            return args[i + 1]
    raise AssertionError(f"{name} not given in {args}")


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def specwatch_config(services: dict[str, Any]) -> Config:
    argv = services["specwatch"]["command"]
    return effective_config(argv, host_file(services["specwatch"], flag(argv, "--config")))


def sglang_script(services: dict[str, Any]) -> str:
    script: str = services["sglang"]["command"][0]
    return script


@pytest.mark.e2e
def test_docker_compose_accepts_the_file() -> None:
    compose = require_tool("docker-compose")
    result = subprocess.run(
        [compose, "--project-directory", str(COMPOSE_DIR), "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_every_bind_mounted_file_exists(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for source, _, _ in mounts(service):
            path = bind_source(source)
            assert path is None or path.exists(), f"{name}: {source} does not exist"
            assert path is None or REPO in path.parents, f"{name}: {source} is outside the repo"


def test_specwatch_image_is_built_from_the_repository_dockerfile(services: dict[str, Any]) -> None:
    build = services["specwatch"]["build"]
    context = (COMPOSE_DIR / build["context"]).resolve()
    assert context == REPO
    assert (context / build["dockerfile"]).is_file()


def test_sglang_log_reaches_specwatch_through_a_shared_read_only_directory(
    services: dict[str, Any],
) -> None:
    config = specwatch_config(services)
    (log_dir,) = log_dirs_of(config)
    reader = {target: (src, ro) for src, target, ro in mounts(services["specwatch"])}
    writer = {target: (src, ro) for src, target, ro in mounts(services["sglang"])}
    volume, read_only = reader[log_dir]
    assert read_only and writer[log_dir] == (volume, False)
    assert volume in yaml.safe_load(COMPOSE_FILE.read_text())["volumes"]
    (log_file,) = config.targets[0].log_files
    tee = re.search(r"python3 (\S+) (\S+)", sglang_script(services))
    assert tee and tee.group(2) == log_file
    assert host_file(services["sglang"], tee.group(1)).name == "sglang-log-tee.py"


def sglang_port(services: dict[str, Any]) -> int:
    args = shlex.split(sglang_script(services).split("sglang.launch_server", 1)[1])
    assert "--enable-metrics" in args, "specwatch scrapes /metrics"
    return int(flag(args, "--port"))


def test_the_read_only_specwatch_container_has_a_bounded_writable_tmp(
    services: dict[str, Any],
) -> None:
    """Catching up on a long backlog spools to /tmp (at most 256 MiB of a log at once)."""
    specwatch = services["specwatch"]
    assert specwatch["read_only"] is True
    assert specwatch["tmpfs"] == ["/tmp:size=256m,mode=1777"]


def test_specwatch_scrapes_sglang_where_it_listens(services: dict[str, Any]) -> None:
    target = specwatch_config(services).targets[0]
    for url in (target.url,):
        assert url is not None
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.port == sglang_port(services)


def listen_ports(services: dict[str, Any]) -> dict[str, int]:
    grafana_env = services["grafana"]["environment"]
    return {
        "sglang": sglang_port(services),
        "specwatch": parse_listen(specwatch_config(services).listen)[1],
        "prometheus": port_of(flag(services["prometheus"]["command"], "--web.listen-address")),
        "alertmanager": port_of(flag(services["alertmanager"]["command"], "--web.listen-address")),
        "grafana": int(grafana_env["GF_SERVER_HTTP_PORT"]),
    }


def test_services_on_the_host_network_use_distinct_ports(services: dict[str, Any]) -> None:
    assert all(s.get("network_mode") == "host" for s in services.values())
    ports = listen_ports(services)
    assert len(set(ports.values())) == len(ports), ports


@pytest.mark.e2e
def test_prometheus_loads_the_mounted_rules_and_config(
    services: dict[str, Any], tmp_path: Path
) -> None:
    """promtool checks the config with the files laid out as they are in the container."""
    promtool = require_tool("promtool")
    prometheus = services["prometheus"]
    config_path = PurePosixPath(flag(prometheus["command"], "--config.file"))
    for _, target, _ in mounts(prometheus):
        if target.startswith(str(config_path.parent) + "/"):
            local = tmp_path / PurePosixPath(target).relative_to(config_path.parent)
            local.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(host_file(prometheus, target), local)
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / config_path.name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout + result.stderr


def test_prometheus_scrapes_specwatch_and_alerts_to_alertmanager(services: dict[str, Any]) -> None:
    prometheus = services["prometheus"]
    config = yaml.safe_load(
        host_file(prometheus, flag(prometheus["command"], "--config.file")).read_text()
    )
    ports = listen_ports(services)
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "specwatch")
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert f"localhost:{ports['specwatch']}" in targets
    managers = [
        t
        for am in config["alerting"]["alertmanagers"]
        for sc in am["static_configs"]
        for t in sc["targets"]
    ]
    assert managers == [f"localhost:{ports['alertmanager']}"]


def test_grafana_finds_the_dashboards_and_prometheus(services: dict[str, Any]) -> None:
    grafana = services["grafana"]
    provisioning = host_file(grafana, "/etc/grafana/provisioning")
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "specwatch.yaml").read_text())[
        "providers"
    ]
    dashboards = host_file(grafana, provider["options"]["path"])
    assert {"specwatch-node.json", "specwatch-fleet.json"} <= {
        p.name for p in dashboards.glob("*.json")
    }
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "specwatch.yaml").read_text())[
        "datasources"
    ]
    url = urlsplit(datasource["url"])
    # On the host network a service name resolves only through an extra_hosts entry.
    assert (
        f"{url.hostname}:127.0.0.1" in grafana.get("extra_hosts", []) or url.hostname == "localhost"
    )
    assert url.port == listen_ports(services)["prometheus"]


def versions_under_test() -> dict[str, str]:
    """Package -> upstream version of what the tests run (scripts/install-prometheus.sh)."""
    script = (REPO / "scripts" / "install-prometheus.sh").read_text(encoding="utf-8")
    return dict(re.findall(r'^  "([\w-]+) (\d+\.\d+\.\d+)\S* [0-9a-f]{64}"$', script, re.M))


def test_compose_runs_the_prometheus_and_alertmanager_the_tests_run(
    services: dict[str, Any],
) -> None:
    versions = versions_under_test()
    assert services["prometheus"]["image"] == f"prom/prometheus:v{versions['prometheus']}"
    alertmanager = versions["prometheus-alertmanager"]
    assert services["alertmanager"]["image"] == f"prom/alertmanager:v{alertmanager}"
