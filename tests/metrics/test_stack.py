"""examples/stack cannot run here (no container engine): its files are checked statically.
They parse, and the names, ports, uids and paths each file relies on exist in the others."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from metrics_testlib import DASHBOARDS, REPO, committed_dashboards

STACK = os.path.join(REPO, "examples", "stack")


def _load(*parts):
    with open(os.path.join(STACK, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module")
def stack():
    return {
        "compose": _load("compose.yaml"),
        "collector": _load("otel-collector.yaml"),
        "prometheus": _load("prometheus.yml"),
        "datasources": _load("grafana", "provisioning", "datasources", "datasources.yaml"),
        "dashboards": _load("grafana", "provisioning", "dashboards", "dashboards.yaml"),
    }


def _published(service: dict) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for mapping in service.get("ports", []):
        host, container = str(mapping).split(":")[-2:]
        out[int(container)] = int(host)
    return out


def _host_port(url_or_endpoint: str) -> tuple[str, int]:
    rest = url_or_endpoint.split("://")[-1].split("/")[0]
    host, port = rest.rsplit(":", 1)
    return host, int(port)


def _mounts(service: dict) -> dict[str, str]:
    """container path -> source (relative to the stack folder)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        out[target] = source
    return out


def test_compose_has_the_four_services_with_pinned_images(stack):
    services = stack["compose"]["services"]
    assert set(services) == {"otel-collector", "jaeger", "prometheus", "grafana"}
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), (name, image)
        for dependency in service.get("depends_on", []):
            assert dependency in services, (name, dependency)


def test_collector_pipelines_use_defined_components_and_reach_compose_services(stack):
    collector, services = stack["collector"], stack["compose"]["services"]
    defined = {kind: set(collector.get(kind) or {}) for kind in ("receivers", "processors", "exporters")}
    used = {kind: set() for kind in defined}
    for pipeline in collector["service"]["pipelines"].values():
        for kind in defined:
            assert set(pipeline.get(kind, [])) <= defined[kind]
            used[kind] |= set(pipeline.get(kind, []))
    assert used == defined, "a component is defined but unused"
    assert set(collector["service"]["pipelines"]) == {"traces", "metrics"}
    # OTLP in: the receiver's ports are the ones compose publishes to the host.
    published = _published(services["otel-collector"])
    for protocol, port in (("grpc", 4317), ("http", 4318)):
        assert _host_port(collector["receivers"]["otlp"]["protocols"][protocol]["endpoint"])[1] == port
        assert published[port] == port
    # Traces out: Jaeger's OTLP gRPC port on its compose service name, with OTLP enabled.
    host, port = _host_port(collector["exporters"]["otlp/jaeger"]["endpoint"])
    assert host in services and port == 4317
    assert "COLLECTOR_OTLP_ENABLED=true" in services[host]["environment"]
    assert collector["exporters"]["prometheus"]["enable_open_metrics"] is True  # exemplars


def test_prometheus_scrapes_the_collector_exporter_it_is_given(stack):
    collector, prometheus, services = stack["collector"], stack["prometheus"], stack["compose"]["services"]
    exporter_port = _host_port(collector["exporters"]["prometheus"]["endpoint"])[1]
    targets = [t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"otel-collector:{exporter_port}"]
    assert prometheus["scrape_configs"][0]["honor_labels"] is True
    command = services["prometheus"]["command"]
    config_path = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--config.file="))
    assert _mounts(services["prometheus"])[config_path] == "./prometheus.yml"
    assert "--enable-feature=exemplar-storage" in command
    collector_config = next(arg.split("=", 1)[1] for arg in services["otel-collector"]["command"])
    assert _mounts(services["otel-collector"])[collector_config] == "./otel-collector.yaml"


def test_grafana_data_sources_point_at_the_services_and_match_the_dashboards(stack):
    services = stack["compose"]["services"]
    datasources = stack["datasources"]["datasources"]
    by_uid = {ds["uid"]: ds for ds in datasources}
    for ds in datasources:
        host, port = _host_port(ds["url"])
        assert host in services and port in _published(services[host]), ds["name"]
    for destination in by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]:
        assert by_uid[destination["datasourceUid"]]["type"] == "jaeger"
    types = {ds["type"] for ds in datasources}
    for name, dashboard in committed_dashboards().items():
        wanted = {v["query"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"}
        assert wanted <= types, (name, wanted)


def test_grafana_provisions_the_repository_dashboards(stack):
    grafana = stack["compose"]["services"]["grafana"]
    mounts = _mounts(grafana)
    provider_path = stack["dashboards"]["providers"][0]["options"]["path"]
    source = os.path.normpath(os.path.join(STACK, mounts[provider_path]))
    assert source == os.path.normpath(DASHBOARDS)
    assert committed_dashboards(), "no dashboard JSON to provision"
    provisioning = os.path.normpath(os.path.join(STACK, mounts["/etc/grafana/provisioning"]))
    assert os.path.isdir(os.path.join(provisioning, "datasources"))
    assert os.path.isdir(os.path.join(provisioning, "dashboards"))


def test_readme_uses_the_published_ports(stack):
    with open(os.path.join(STACK, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    services = stack["compose"]["services"]
    assert f"http://localhost:{_published(services['otel-collector'])[4318]}" in readme
    assert f"http://localhost:{_published(services['jaeger'])[16686]}" in readme
    assert f"http://localhost:{_published(services['grafana'])[3000]}" in readme
    assert "docker compose up" in readme


@pytest.mark.process
def test_promtool_accepts_the_prometheus_config():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    result = subprocess.run([promtool, "check", "config", os.path.join(STACK, "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
