"""Fixtures for the metrics tests: a real instrumented start-up in a subprocess that serves
its metrics, and a real Prometheus scraping it.

Every server started here listens on 127.0.0.1 only and is stopped in a ``finally``; every
wait is bounded.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass

import pytest

from metrics_testlib import HERE, IDENTITY, PROMETHEUS_JOB, SCRAPE_TIMEOUT_S, STARTUP_TIMEOUT_S, free_port, http_get

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
    # stderr to a file: a pipe nobody reads could fill up and stall the app.
    err_path = tmp_path_factory.mktemp("startup-app") / "stderr.txt"
    err_file = open(err_path, "w", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "startup_app.py"), directory],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err_file, text=True,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], STARTUP_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if not line:
            process.kill()
            process.wait(timeout=30)
            err_file.flush()
            pytest.fail(f"the instrumented start-up printed nothing (rc={process.returncode}):\n"
                        f"{err_path.read_text()[-4000:]}")
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
        process.stdout.close()
        err_file.close()


# --- a real Prometheus ---------------------------------------------------------------------

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
