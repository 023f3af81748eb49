"""Fixtures for the metrics tests: a real instrumented start-up in a subprocess that serves
its metrics, and a real Prometheus scraping it.

Every server started here listens on 127.0.0.1 only and is stopped in a ``finally``; every
wait is bounded.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.error
import urllib.parse
from dataclasses import dataclass

import pytest

import _prometheus
from _child import stop_app
from metrics_testlib import HERE, IDENTITY, PROMETHEUS_JOB, SCRAPE_TIMEOUT_S, STARTUP_TIMEOUT_S, http_get

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
        stop_app(process)
        process.stdout.close()
        err_file.close()


# --- a real Prometheus ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def prometheus(served_startup, tmp_path_factory):
    target = urllib.parse.urlsplit(served_startup.metrics_url).netloc
    with _prometheus.running(tmp_path_factory.mktemp("prometheus"), [target], PROMETHEUS_JOB,
                             extra_args=["--web.enable-lifecycle"]) as server:
        # Two scrapes at least, so every range window holds more than one sample.
        server.wait_for(f'count_over_time(up{{job="{PROMETHEUS_JOB}"}}[1m]) >= 2 '
                        f'and on() max(up{{job="{PROMETHEUS_JOB}"}}) == 1', SCRAPE_TIMEOUT_S)
        yield server
