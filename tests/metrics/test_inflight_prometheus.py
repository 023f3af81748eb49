"""Start-ups in flight, seen by a real Prometheus while the start-up runs.

A fresh process serves its metrics; a real Prometheus (Debian's, on loopback, its own
ephemeral port) scrapes it every second while it reads its shards in ``phase("load")``,
one every 1.5 s, and then waits in ``phase("warmup")``. The scrapes must show the bytes
loaded growing and the phase changing; the dashboard's in-flight panels must return data;
after ``ready()`` the in-flight series must be gone.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import time
import urllib.parse

import pytest

import _prometheus
from _child import stop_app
from metrics_testlib import (
    ALL_VARIABLES,
    CONCRETE_VARIABLES,
    HERE,
    IDENTITY,
    SCRAPE_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    committed_dashboards,
    is_inflight,
    panel_expressions,
    substitute,
)
from otel_coldstart.inflight import index_expected_bytes

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

JOB = "otel-coldstart-inflight-test"
LOADED = "model_startup_inflight_loaded_bytes"
EXPECTED = "model_startup_inflight_expected_bytes"
ELAPSED = "model_startup_inflight_elapsed_seconds"
REMAINING = "model_startup_inflight_remaining_seconds"
EARLIER_TOTAL_S = 60.0  # the earlier start-up this one's estimate is from (written by the test)


def _earlier_startup(path) -> None:
    """An earlier start-up of the same service (and model) as the app's, as its trace file
    would hold it: ``load`` from 1 s to 40 s, ``warmup`` to 59 s, ready at 60 s. The app's
    time-to-ready estimate is made from it (a real one: tests/core/test_time_to_ready*.py)."""
    start = 1_700_000_000 * 10**9
    resource = {"attributes": [{"key": k, "value": {"stringValue": v}} for k, v in IDENTITY.items()]}

    def span(name, begin_s, end_s, attributes):
        return {"traceId": "ab" * 16, "spanId": f"{len(name):016x}", "name": name,
                "startTimeUnixNano": str(start + int(begin_s * 1e9)), "endTimeUnixNano": str(start + int(end_s * 1e9)),
                "attributes": [{"key": k, "value": v} for k, v in attributes.items()]}

    spans = [span("coldstart.load", 1, 40, {"coldstart.phase": {"stringValue": "load"}}),
             span("coldstart.warmup", 40, 59, {"coldstart.phase": {"stringValue": "warmup"}}),
             span("model.startup", 0, EARLIER_TOTAL_S, {"coldstart.ready": {"boolValue": True}})]
    path.write_text(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}) + "\n",
                    encoding="utf-8")


def _line(process, timeout_s: float) -> str:
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    return process.stdout.readline() if ready else ""


@pytest.fixture
def running_startup(checkpoint_dir, tmp_path):
    _prometheus.require_binary()
    directory, _ = checkpoint_dir
    history = tmp_path / "history"
    history.mkdir()
    _earlier_startup(history / "startup-earlier.otlp.jsonl")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_") and k.lower() not in ("traceparent", "tracestate")}
    env.update({
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": "0",
        "OTEL_RESOURCE_ATTRIBUTES": ",".join(f"{k}={v}" for k, v in IDENTITY.items()),
        "OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path / "traces"),
        "OTEL_COLDSTART_SUMMARY": "0",
        "OTEL_COLDSTART_TEST_SHARD_PAUSE_S": "1.5",
        "OTEL_COLDSTART_HISTORY_DIR": str(history),
    })
    err = open(tmp_path / "app-stderr.txt", "w", encoding="utf-8")
    app = subprocess.Popen([sys.executable, os.path.join(HERE, "inflight_app.py"), directory], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = _line(app, STARTUP_TIMEOUT_S)
        assert line, f"the app printed nothing: {(tmp_path / 'app-stderr.txt').read_text()[-3000:]}"
        target = urllib.parse.urlsplit(json.loads(line)["metrics_url"]).netloc
        with _prometheus.running(tmp_path / "prometheus", [target], JOB) as prometheus:
            yield app, prometheus, directory
    finally:
        stop_app(app)
        app.stdout.close()
        err.close()


def test_scrapes_during_one_start_up_see_bytes_grow_and_the_phase_change(running_startup):
    app, prometheus, directory = running_startup
    job = f'job="{JOB}"'
    # Scraped before the load begins: in flight, nothing loaded yet.
    prometheus.wait_for(f"{LOADED}{{{job}}}", SCRAPE_TIMEOUT_S)
    app.stdin.write("go\n")
    app.stdin.flush()
    assert _line(app, STARTUP_TIMEOUT_S).strip() == "WARMUP"
    prometheus.wait_for(f'{LOADED}{{{job}, coldstart_phase="warmup"}}', SCRAPE_TIMEOUT_S)

    # Every scrape of this start-up so far: (time, phase, bytes loaded).
    series = prometheus.query(f"{LOADED}{{{job}}}[5m]")
    samples = sorted((float(t), s["metric"]["coldstart_phase"], float(v)) for s in series for t, v in s["values"])
    phases = [phase for _, phase, _ in samples]
    loaded = [value for _, _, value in samples]
    assert len(samples) >= 4, samples
    assert "load" in phases and phases[-1] == "warmup", samples
    assert loaded == sorted(loaded), "bytes loaded never go down"
    assert loaded[0] < loaded[-1], samples
    assert len(set(loaded)) >= 3, "the load of 3 shards, 1.5 s apart, is seen in steps"
    total = index_expected_bytes(directory)
    assert total and loaded[-1] == total  # everything, as the index's total_size counts it
    (expected,) = prometheus.query(f"{EXPECTED}{{{job}}}")
    assert float(expected["value"][1]) == total
    for key, value in IDENTITY.items():
        assert expected["metric"][key.replace(".", "_")] == value

    # The dashboard's in-flight panels answer for this start-up, with its values and with "All".
    checked = 0
    for dashboard in committed_dashboards().values():
        for title, expr in panel_expressions(dashboard):
            if not is_inflight(expr):
                continue
            for variables in (CONCRETE_VARIABLES, ALL_VARIABLES):
                result = prometheus.answer(substitute(expr, variables))
                assert result["status"] == "success", (title, result)
                values = [float(item["value"][1]) for item in result["data"]["result"]]
                assert [v for v in values if math.isfinite(v)], (title, result)
                checked += 1
    assert checked >= 8

    # The time-to-ready estimate, from the earlier start-up: in warmup (19 s long there), with
    # ready() 1 s after it; this warmup has only just begun, so about 20 s are left.
    (remaining,) = prometheus.wait_for(f'{REMAINING}{{{job}, coldstart_phase="warmup"}}', SCRAPE_TIMEOUT_S)
    assert 5.0 < float(remaining["value"][1]) <= 20.0, remaining
    assert all(remaining["metric"][key.replace(".", "_")] == value for key, value in IDENTITY.items())

    # ready(): the in-flight series stop (Prometheus marks them stale at the next scrape).
    app.stdin.write("\n")
    app.stdin.flush()
    assert _line(app, 60).strip() == "READY"
    deadline = time.monotonic() + SCRAPE_TIMEOUT_S
    while prometheus.query(f"{ELAPSED}{{{job}}}"):
        assert time.monotonic() < deadline, "the in-flight gauges outlived ready()"
        time.sleep(0.5)
    assert prometheus.query(f'up{{{job}}}')[0]["value"][1] == "1"  # still scraped, just done
