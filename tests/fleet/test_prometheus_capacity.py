"""capacity --prometheus against a real Prometheus (Debian's binary) scraping the histograms of
real start-ups: five fresh processes of the metrics tests' model server (torch + safetensors
on a generated checkpoint), each serving its start-up metrics, and writing its trace file.
The histograms' figures agree with the file-based capacity of the same start-ups within the
buckets: each quantile's bucket is the one that holds the start-up of that rank in the files."""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

import _prometheus
from _child import stop_app
from otel_coldstart import demo
from otel_coldstart.cli import main
from otel_coldstart.metrics import DURATION_BUCKETS_S

pytestmark = [pytest.mark.process, pytest.mark.slow]

METRICS_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "metrics")
STARTUPS = 5  # p50 is the 3rd start-up exactly; p95 ranks the 5th
HOSTS = ("cpu-small", "cpu-large")



@pytest.fixture(scope="module")
def fleet_of_five(tmp_path_factory):
    _prometheus.require_binary()
    sys.path.insert(0, METRICS_TESTS)
    try:
        from startup_app import TEST_SHAPE
    finally:
        sys.path.remove(METRICS_TESTS)
    checkpoint = str(tmp_path_factory.mktemp("checkpoint"))
    demo.generate_checkpoint(checkpoint, TEST_SHAPE)
    traces = str(tmp_path_factory.mktemp("traces"))
    processes, targets = [], []
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k.lower() != "traceparent"}
    try:
        for number in range(STARTUPS):
            process = subprocess.Popen(
                [sys.executable, os.path.join(METRICS_TESTS, "startup_app.py"), checkpoint],
                env={**env, "OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
                     "OTEL_EXPORTER_PROMETHEUS_PORT": "0", "OTEL_COLDSTART_OUTPUT_DIR": traces,
                     "OTEL_COLDSTART_SUMMARY": "0", "OTEL_COLDSTART_TEST_SERVE_S": "600",
                     "OTEL_RESOURCE_ATTRIBUTES": f"service.name=fleet-test,host.type={HOSTS[number % 2]}"},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            processes.append(process)
        # Started together, read in turn: the five wait on their imports side by side, not one
        # after another (the histograms and the files see the same five start-ups either way).
        for number, process in enumerate(processes):
            ready, _, _ = select.select([process.stdout], [], [], 240)
            line = process.stdout.readline() if ready else ""
            assert line, f"start-up {number} printed nothing (rc={process.poll()})"
            targets.append(urllib.parse.urlsplit(json.loads(line)["metrics_url"]).netloc)
        with _prometheus.running(tmp_path_factory.mktemp("prometheus"), targets, "fleet") as server:
            server.wait_for("count(count_over_time(model_startup_duration_seconds_count[1m]) >= 2)", 90,
                            enough=lambda found: bool(found) and float(found[0]["value"][1]) == STARTUPS)
            yield server, traces
    finally:
        for process in processes:  # every app told to stop first (stdin closed), then each waited for
            if process.poll() is None:
                process.stdin.close()
        for process in processes:
            stop_app(process)
            process.stdout.close()


def _bucket_of(value_s: float) -> tuple[float, float]:
    lower = 0.0
    for upper in DURATION_BUCKETS_S:
        if value_s <= upper:
            return lower, upper
        lower = upper
    return lower, math.inf


def _report(argv, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_histogram_figures_agree_with_the_files_within_their_buckets(fleet_of_five, capsys):
    server, traces = fleet_of_five
    histograms = _report(["capacity", "--prometheus", server.url, "--since", "1h", "--format", "json", "--ramp", "6"],
                         capsys)
    files = sorted(os.path.join(traces, name) for name in os.listdir(traces))
    from_files = _report(["capacity", *files, "--format", "json", "--ramp", "6"], capsys)
    import argparse

    from otel_coldstart.cli._inputs import load_files

    startups = load_files(files, argparse.Namespace(max_input_mb=512, trace_id=None, jobs=1), slim=True).startups
    assert len(startups) == STARTUPS
    everyone, by_files = histograms["groups"][0], from_files["groups"][0]
    assert everyone["startups"] == by_files["counted"] == STARTUPS

    def check(figure: dict, q: float, values_s: list[float], what: str) -> None:
        ranked = sorted(values_s)[math.ceil(q * len(values_s)) - 1]  # the start-up of that rank
        lower, upper = figure["bucket_s"]
        assert (lower, math.inf if upper is None else upper) == _bucket_of(ranked), (what, q, figure, ranked)
        assert lower <= figure["s"] <= (math.inf if upper is None else upper)

    totals = [b.duration_ns / 1e9 for b in startups]
    check(everyone["total"]["p50"], 0.5, totals, "total")
    check(everyone["total"]["p95"], 0.95, totals, "total")
    # the file-based p50 (the 3rd of 5 exactly) lies in the bucket the histograms name
    lower, upper = everyone["total"]["p50"]["bucket_s"]
    assert lower <= by_files["total"]["p50_s"] <= upper
    assert set(everyone["phases"]) == set(by_files["phases"])
    for phase, figures in everyone["phases"].items():
        values = [b.unattributed_ns / 1e9 if phase == "unattributed" else b.time_of(phase) / 1e9 for b in startups]
        check(figures["p50"], 0.5, values, phase)
        check(figures["p95"], 0.95, values, phase)
    assert everyone["lead_time_bucket_upper_s"] >= by_files["lead_time_s"]
    assert everyone["warm_pool"]["replicas_at_bucket_upper"] >= by_files["warm_pool"]["replicas"]
    # per instance type: the same start-ups in each group as the files'
    by_host = {g["value"]: g["startups"] for g in histograms["groups"] if g["attribute"] == "host_type"}
    assert by_host == {g["value"]: g["counted"] for g in from_files["groups"] if g["attribute"] == "host.type"}


def test_text_says_each_figure_is_a_bucket(fleet_of_five, capsys):
    server, _ = fleet_of_five
    assert main(["capacity", "--prometheus", server.url, "--since", "1h", "--by", "instance_type"]) == 0
    out = capsys.readouterr().out
    assert "the bucket it lies in" in out and "(bucket " in out and "host_type=cpu-small" in out


def test_an_empty_range_or_a_dead_server_is_a_clear_error(fleet_of_five, capsys):
    server, _ = fleet_of_five
    assert main(["capacity", "--prometheus", server.url, "--since", "1h", "--service", 'nobody" or vector(1)']) == 5
    assert main(["capacity", "--prometheus", "http://127.0.0.1:9", "--timeout", "2"]) == 9
    err = capsys.readouterr().err
    assert "no start-up in the last 3600s" in err and "Traceback" not in err
