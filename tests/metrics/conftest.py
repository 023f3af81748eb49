"""Fixtures for the metrics tests: a real instrumented start-up in a subprocess that serves
its metrics, a real Prometheus scraping it, and the dashboards' PromQL.

Every server started here listens on 127.0.0.1 only and is stopped in a ``finally``; every
wait is bounded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DASHBOARDS = os.path.join(REPO, "dashboards")

# What the test start-up says about itself (OTEL_RESOURCE_ATTRIBUTES), and so what a user
# would pick in the dashboards' variables.
IDENTITY = {
    "service.name": "tiny-llama-server",
    "service.version": "2026.11.29",
    "host.type": "cpu-test-small",
    "coldstart.model.name": "tiny-llama",
}
# Grafana's substitution for each dashboard variable when the user picks the test's values.
CONCRETE_VARIABLES = {
    "model": IDENTITY["coldstart.model.name"],
    "instance_type": IDENTITY["host.type"],
    "version": IDENTITY["service.version"],
    "direction": "h2h",  # the only copy direction a CPU-only start-up has
}
ALL_VARIABLES = {name: ".*" for name in CONCRETE_VARIABLES}  # the variables' "All" value
# Grafana's built-in interval variables, as Grafana would fill them for a 15-minute view.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "15s", "__range": "15m"}

STARTUP_TIMEOUT_S = 180  # import torch on a loaded 2-core machine can be slow
SCRAPE_TIMEOUT_S = 60


def load_generator():
    spec = importlib.util.spec_from_file_location("dashboards_generate", os.path.join(DASHBOARDS, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_dashboards() -> dict[str, dict]:
    out = {}
    for name in sorted(os.listdir(DASHBOARDS)):
        if name.endswith(".json"):
            with open(os.path.join(DASHBOARDS, name), encoding="utf-8") as handle:
                out[name] = json.load(handle)
    return out


def panel_expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, rows included."""
    found = []

    def walk(panels):
        for panel in panels or ():
            for target in panel.get("targets") or ():
                if target.get("expr"):
                    found.append((panel.get("title", "?"), target["expr"]))
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    return found


LABEL_VALUES = re.compile(r"^label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*([A-Za-z_]\w*)\s*\)$")


def variable_queries(dashboard: dict) -> list[tuple[str, str, str]]:
    """(variable, metric, label) of every ``label_values(metric, label)`` variable."""
    out = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            match = LABEL_VALUES.match(query or "")
            assert match, f"variable {variable['name']}: unsupported query {query!r}"
            out.append((variable["name"], match.group(1), match.group(2)))
    return out


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's interpolation of ``$name`` / ``${name}`` (longest names first)."""
    merged = {**BUILTIN_VARIABLES, **variables}
    for name in sorted(merged, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", merged[name]).replace("$" + name, merged[name])
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_IDENT = re.compile(r"[A-Za-z_:][\w:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression refers to, from its tokens."""
    labels: set[str] = set()
    text = _STRING.sub('""', expr)
    for _keyword, names in _GROUPING.findall(text):
        labels.update(n.strip() for n in names.split(",") if n.strip())
    text = _GROUPING.sub(" ", text)
    for inner in _MATCHERS.findall(text):
        labels.update(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", inner))
    text = _MATCHERS.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    metrics = set()
    for match in _IDENT.finditer(text):
        name = match.group(0)
        following = text[match.end():].lstrip()
        if following.startswith("(") or name.lower() in _KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        metrics.add(name)
    return metrics, labels


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


# --- the start-up ------------------------------------------------------------------------

@dataclass
class ServedStartup:
    metrics_url: str
    trace_id: str
    checkpoint_dir: str
    tensor_names: list[str]
    process: subprocess.Popen

    def exposition(self) -> str:
        return http_get(self.metrics_url).decode("utf-8")


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory):
    """A small Llama-shaped checkpoint in 3 safetensors shards, its first shard evicted from
    the page cache (where the OS allows) so the start-up reads a cold shard and warm ones."""
    from otel_coldstart import demo

    sys.path.insert(0, HERE)
    try:
        from startup_app import TEST_SHAPE
    finally:
        sys.path.remove(HERE)
    directory = str(tmp_path_factory.mktemp("checkpoint"))
    paths = demo.generate_checkpoint(directory, TEST_SHAPE)
    demo.set_cache_state(paths, cold={0})
    return directory, [name for name, _ in TEST_SHAPE.tensors()]


@pytest.fixture(scope="session")
def served_startup(checkpoint_dir, tmp_path_factory):
    directory, tensor_names = checkpoint_dir
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("OTEL_") or name.lower() in ("traceparent", "tracestate"):
            del env[name]
    env.update({
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": "0",  # any free port; the app prints the one it got
        "OTEL_RESOURCE_ATTRIBUTES": ",".join(f"{k}={v}" for k, v in IDENTITY.items()),
        "OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path_factory.mktemp("traces")),
        "OTEL_COLDSTART_SUMMARY": "0",
        "OTEL_COLDSTART_TEST_SERVE_S": "600",
    })
    process = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "startup_app.py"), directory],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], STARTUP_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if not line:
            process.kill()
            _, err = process.communicate(timeout=30)
            pytest.fail(f"the instrumented start-up printed nothing (rc={process.returncode}):\n{err[-4000:]}")
        info = json.loads(line)
        assert info["metrics_url"], "the start-up serves no Prometheus endpoint"
        yield ServedStartup(info["metrics_url"], info["trace_id"], directory, tensor_names, process)
    finally:
        if process.poll() is None:
            process.stdin.close()  # the app's signal to stop serving
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        for stream in (process.stdout, process.stderr):
            stream.close()


# --- a real Prometheus ---------------------------------------------------------------------

PROMETHEUS_JOB = "otel-coldstart-test"


@dataclass
class PrometheusServer:
    url: str

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            body = http_get(f"{self.url}/api/v1/{path}?{query}")
        except urllib.error.HTTPError as exc:  # 400/422: a PromQL error, with its message
            body = exc.read()
        return json.loads(body)

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr, time=f"{time.time():.3f}")


@pytest.fixture(scope="session")
def prometheus(served_startup, tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (Debian: apt-get install prometheus); "
                    "the dashboards' PromQL cannot be checked against a real server")
    work = tmp_path_factory.mktemp("prometheus")
    target = urllib.parse.urlsplit(served_startup.metrics_url).netloc
    config = work / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        f"  - job_name: {PROMETHEUS_JOB}\n    static_configs:\n      - targets: ['{target}']\n",
        encoding="utf-8",
    )
    port = free_port()
    log = open(work / "prometheus.log", "w", encoding="utf-8")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT, cwd=str(work),
    )
    server = PrometheusServer(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + SCRAPE_TIMEOUT_S
        last_error = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                # Two scrapes at least, so every range window holds more than one sample.
                result = server.query(f'count_over_time(up{{job="{PROMETHEUS_JOB}"}}[1m]) >= 2 '
                                      f'and on() max(up{{job="{PROMETHEUS_JOB}"}}) == 1')
                if result.get("status") == "success" and result["data"]["result"]:
                    break
            except OSError as exc:  # not listening yet
                last_error = exc
            time.sleep(0.5)
        else:
            pytest.fail(f"Prometheus did not scrape the start-up within {SCRAPE_TIMEOUT_S}s ({last_error})")
        if process.poll() is not None:
            log.flush()
            pytest.fail(f"prometheus exited with {process.returncode}: {(work / 'prometheus.log').read_text()[-3000:]}")
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        log.close()
