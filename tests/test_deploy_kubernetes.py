"""The Kubernetes overlays: they build, validate, and wire specwatch to the right logs and port.

Each overlay is built with the real ``kubectl kustomize``. Built-in kinds are validated against
the Kubernetes OpenAPI schemas (kubernetes-validate, offline). The Prometheus Operator kinds
are validated against the subset of their documented API (monitoring.coreos.com/v1, see
https://prometheus-operator.dev/docs/api-reference/api/) that these manifests use, with unknown
fields rejected so a misspelt key fails here and not silently in the operator.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.deploy import OPERATOR_SCHEMAS, effective_config, log_dirs_of
from tests.support.tools import REPO, require_tool

KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAYS = ("sidecar", "daemonset")
# Oldest and newest Kubernetes minor releases the manifests must be valid for.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
OPERATOR_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}


def build_overlay(name: str) -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl")
    result = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES / "overlays" / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, "deprecated kustomize fields: " + result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, build_overlay(request.param)


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet")]


def specwatch_containers(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for every container running the specwatch image."""
    found = []
    for workload in workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        found += [(pod, c) for c in pod["containers"] if c["image"].startswith("specwatch:")]
    return found


@pytest.mark.e2e
def test_core_resources_match_the_kubernetes_schemas(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = overlay
    core = [d for d in docs if d["kind"] not in OPERATOR_KINDS]
    assert core
    for version in KUBERNETES_VERSIONS:
        for doc in core:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.e2e
def test_operator_resources_match_their_documented_api(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    """The alert rules and one scrape config, each valid: a loop over no resource of these
    kinds checked nothing."""
    _, docs = overlay
    operator = [doc for doc in docs if doc["kind"] in OPERATOR_KINDS]
    kinds = sorted(doc["kind"] for doc in operator)
    assert kinds in (["PodMonitor", "PrometheusRule"], ["PrometheusRule", "ServiceMonitor"])
    for doc in operator:
        jsonschema.validate(doc, OPERATOR_SCHEMAS[doc["kind"]])


def test_operator_schema_rejects_a_misspelt_field() -> None:
    """Guard for the schema above: it must not accept anything."""
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "podMetricsEndpoints": [{"port": "m", "intervall": "15s"}]},
    }
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.validate(monitor, OPERATOR_SCHEMAS["PodMonitor"])


@pytest.mark.e2e
def test_each_overlay_carries_the_alert_rules_and_exactly_one_scrape_config(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = overlay
    rules = of_kind(docs, "PrometheusRule")
    assert len(rules) == 1
    alerts = {r["alert"] for g in rules[0]["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {
        "SpecDecodeAcceptLengthCollapsed",
        "SpecDecodeMisconfigured",
        "SpecwatchAbsent",
    } <= alerts
    # Two scrape configs for one pod would double every series.
    assert len(of_kind(docs, "PodMonitor")) + len(of_kind(docs, "ServiceMonitor")) == 1


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def scraped_pods(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The scrape endpoint and the pod templates it reaches (through a Service if needed)."""
    for monitor in of_kind(docs, "PodMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        pods = [w["spec"]["template"] for w in workloads(docs)]
        reached = [p for p in pods if matches(selector, p["metadata"]["labels"])]
        return monitor["spec"]["podMetricsEndpoints"][0], reached
    monitor = of_kind(docs, "ServiceMonitor")[0]
    endpoint = monitor["spec"]["endpoints"][0]
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in of_kind(docs, "Service") if matches(selector, s["metadata"]["labels"])]
    assert len(services) == 1, "the ServiceMonitor must select exactly one Service"
    port = next(p for p in services[0]["spec"]["ports"] if p["name"] == endpoint["port"])
    assert port["targetPort"] == "specwatch"
    pods = [w["spec"]["template"] for w in workloads(docs)]
    return endpoint, [
        p for p in pods if matches(services[0]["spec"]["selector"], p["metadata"]["labels"])
    ]


@pytest.mark.e2e
def test_scrape_config_reaches_the_specwatch_port_as_job_specwatch(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = overlay
    endpoint, pods = scraped_pods(docs)
    assert len(pods) == 1, "the scrape config must select the pods that run specwatch"
    ports = {
        p["name"]: p["containerPort"]
        for c in pods[0]["spec"]["containers"]
        for p in c.get("ports", [])
    }
    assert ports.get("specwatch") == 9477
    assert endpoint["path"] == "/metrics"
    job = [r for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
    assert job == [{"targetLabel": "job", "replacement": "specwatch"}]


@pytest.mark.e2e
def test_specwatch_container_is_probed_limited_and_locked_down(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = overlay
    (_pod, container), *others = specwatch_containers(docs)
    assert not others
    port_names = {p["name"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
        assert container[probe]["httpGet"]["port"] in port_names
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]


@pytest.mark.e2e
def test_a_read_only_specwatch_container_has_a_bounded_writable_tmp(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    """Catching up on a long backlog spools to /tmp; with a read-only root and no /tmp
    volume, reading stayed in one process (and before that, stopped)."""
    _, docs = overlay
    ((pod, container),) = specwatch_containers(docs)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert not mount.get("readOnly")
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["sizeLimit"] == "256Mi"
    assert volume["emptyDir"].get("medium") != "Memory"  # that would count against 128Mi


def mounted_config(
    pod: dict[str, Any], container: dict[str, Any], docs: list[dict[str, Any]], path: str
) -> str:
    """Text of the ConfigMap key that appears at ``path`` inside ``container``."""
    for mount in container["volumeMounts"]:
        if path.startswith(mount["mountPath"] + "/"):
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            name = volume["configMap"]["name"]
            data = next(
                c["data"] for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"] == name
            )
            text: str = data[path.removeprefix(mount["mountPath"] + "/")]
            return text
    raise AssertionError(f"{path} is not on any volume of {container['name']}")


@pytest.mark.e2e
def test_specwatch_runs_with_a_valid_config_whose_logs_are_on_a_mounted_directory(
    overlay: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    _, docs = overlay
    ((pod, container),) = specwatch_containers(docs)
    argv = container["args"]
    config_file = tmp_path / "specwatch.yaml"
    config_file.write_text(mounted_config(pod, container, docs, argv[argv.index("--config") + 1]))
    config = effective_config(argv, config_file)
    log_dirs = log_dirs_of(config)
    assert log_dirs, "the config reads no log file"
    for log_dir in log_dirs:
        # A whole directory, read-only and without subPath, so rotation stays visible.
        mount = next(
            m for m in container["volumeMounts"] if f"{log_dir}/".startswith(m["mountPath"] + "/")
        )
        assert mount.get("readOnly") is True and "subPath" not in mount


@pytest.mark.e2e
def test_sidecar_shares_the_log_directory_sglang_writes_through_the_tee(tmp_path: Path) -> None:
    docs = build_overlay("sidecar")
    ((pod, specwatch),) = specwatch_containers(docs)
    sglang = next(c for c in pod["containers"] if c["name"] == "sglang")
    log_mount = next(m for m in specwatch["volumeMounts"] if m["mountPath"] == "/var/log/sglang")
    volume = next(v for v in pod["volumes"] if v["name"] == log_mount["name"])
    assert "emptyDir" in volume and volume["emptyDir"]["sizeLimit"]
    writer = next(m for m in sglang["volumeMounts"] if m["name"] == log_mount["name"])
    assert writer["mountPath"] == "/var/log/sglang" and not writer.get("readOnly")
    script = sglang["args"][0]
    tee_path = script.split("python3 ", 1)[1].split()[0]
    tee_text = mounted_config(pod, sglang, docs, tee_path)
    assert tee_text == (KUBERNETES / "overlays" / "sidecar" / "sglang-log-tee.py").read_text()
    assert f"{tee_path} /var/log/sglang/server.log" in script
    assert "exec python3 -m sglang.launch_server" in script
    # specwatch_config scrapes /metrics, which SGLang serves only with --enable-metrics.
    assert "--enable-metrics" in script


@pytest.mark.e2e
def test_daemonset_reads_pod_logs_from_the_host_read_only() -> None:
    docs = build_overlay("daemonset")
    ((pod, container),) = specwatch_containers(docs)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/var/log/pods")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/var/log/pods"
    assert mount["readOnly"] is True
