"""Bandwidth from device time where it exists, host time only for synchronous work, and never
above the host link's bound without a warning (issue 23, finding 1): the breakdown every
renderer prints, the metrics, and the warning, over hand-built spans as the plugin writes them.

The defect: bytes over busy time for pinned non-blocking copies is bytes over launch time. A
1 GB shard queued in 80 us read as 12.5 TB/s, 200x what a PCIe Gen5 x16 link carries."""

from __future__ import annotations

import html
import io
import json
import logging

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_coldstart import metrics as coldstart_metrics, semconv
from otel_coldstart.analyze.breakdown import bandwidth_sample, compute_breakdown
from otel_coldstart.analyze.model import Span

MS = 1_000_000
GB = 1_000_000_000
AGGREGATE = {semconv.AGGREGATE: True}


def _span(span_id, phase, start, end, **attrs):
    attributes = {semconv.PHASE: phase, semconv.THREAD_ID: 1, **attrs}
    return Span("ab" * 16, span_id, "r" * 16, f"coldstart.{phase}", start, end, attributes)


def _root(end=1000 * MS):
    return Span("ab" * 16, "r" * 16, None, semconv.SPAN_ROOT, 0, end, {semconv.READY: True, semconv.THREAD_ID: 1})


def _queued_h2d(span_id="q", nbytes=GB, device_s=0.020, busy_s=80e-6, **extra):
    """Pinned non-blocking copies the plugin resolved: 1 GB, 80 us of launches, 20 ms on the device."""
    attrs = {**AGGREGATE, semconv.BYTES: nbytes, semconv.BUSY_S: busy_s, semconv.COPY_NON_BLOCKING_CALLS: 4,
             semconv.COPY_ASYNC_S: device_s, semconv.THROUGHPUT: nbytes / device_s, **extra}
    return _span(span_id, semconv.PHASE_H2D, 10 * MS, 40 * MS, **attrs)


def _link(link="pcie gen5 x16", bound=63.0e9):
    attrs = {semconv.RUNTIME_STEP: semconv.RUNTIME_STEP_LAZY_INIT, semconv.RUNTIME_LINK: link}
    if bound is not None:
        attrs[semconv.RUNTIME_LINK_BPS] = bound
    return _span("i", semconv.PHASE_RUNTIME_INIT, 0, 5 * MS, **attrs)


@pytest.mark.parametrize("span, expected", [
    # Resolved queued work: its bytes over device time (the plugin's coldstart.throughput).
    (_queued_h2d(), (GB, 20 * MS)),
    # Still queued at the end, or calls with no events: launch time only, no sample.
    (_queued_h2d(**{semconv.COPY_ASYNC_UNRESOLVED: True}), None),
    (_queued_h2d(**{semconv.COPY_UNTIMED_CALLS: 1}), None),
    # Non-blocking copies, or d2d copies, with no device time at all (a device without events).
    (_span("n", semconv.PHASE_H2D, 0, 1 * MS, **AGGREGATE, **{semconv.BYTES: GB, semconv.BUSY_S: 1e-4,
                                                             semconv.COPY_NON_BLOCKING_CALLS: 2}), None),
    (_span("d", semconv.PHASE_D2D, 0, 1 * MS, **AGGREGATE, **{semconv.BYTES: GB, semconv.BUSY_S: 1e-4}), None),
    # Synchronous work (blocking copies, host casts): host time is its time.
    (_span("b", semconv.PHASE_H2D, 0, 100 * MS, **AGGREGATE, **{semconv.BYTES: GB, semconv.BUSY_S: 0.05}),
     (GB, 50 * MS)),
    (_span("c", semconv.PHASE_CAST, 0, 100 * MS, **AGGREGATE, **{semconv.BYTES: GB, semconv.BUSY_S: 0.1}),
     (GB, 100 * MS)),
    (_span("s", semconv.PHASE_DESERIALIZE, 0, 200 * MS, **{semconv.BYTES: GB}), (GB, 200 * MS)),
])
def test_bandwidth_sample(span, expected):
    assert bandwidth_sample(span) == expected


def test_phase_throughput_of_queued_copies_is_device_time_not_launch_speed():
    root = _root()
    spans = [_queued_h2d("q1"), _queued_h2d("q2"),
             # a third aggregate still queued at ready(): its bytes have no known time
             _queued_h2d("q3", **{semconv.COPY_ASYNC_UNRESOLVED: True}),
             _link()]
    breakdown = compute_breakdown(root, spans)
    h2d = breakdown.phase(semconv.PHASE_H2D)
    assert h2d.bytes == 3 * GB and h2d.timed_bytes == 2 * GB
    assert h2d.throughput == pytest.approx(2 * GB / 0.040)  # 50 GB/s, not 12.5 TB/s
    assert not h2d.above_bound and breakdown.link == "pcie gen5 x16"


def test_a_figure_above_the_link_bound_is_flagged_in_every_renderer():
    from otel_coldstart.analyze.render import render_text
    from otel_coldstart.analyze.render_html import render_html
    from otel_coldstart.analyze.render_json import startup_to_dict
    from otel_coldstart.analyze.render_markdown import render_markdown
    from otel_coldstart.analyze.report import Report

    root = _root()
    # 1 GB resolved in 10 ms of device time: 100 GB/s over a Gen5 x16 link. Impossible.
    breakdown = compute_breakdown(root, [_queued_h2d(device_s=0.010), _link()])
    h2d = breakdown.phase(semconv.PHASE_H2D)
    assert h2d.above_bound and h2d.bound_bps == 63.0e9
    warning = "h2d throughput 93.1 GiB/s is above the host link's bound (pcie gen5 x16: 58.7 GiB/s)"
    for render in (render_text, render_markdown, render_html):  # one signature: render(report, out)
        out = io.StringIO()
        render(Report([breakdown]), out)
        assert warning in html.unescape(out.getvalue()) and "!" in out.getvalue()
    (phase,) = [p for p in startup_to_dict(breakdown)["phases"] if p["phase"] == semconv.PHASE_H2D]
    assert phase["throughput_above_link_bound"] is True


@pytest.mark.parametrize("link_span, bound", [
    (None, semconv.LINK_BOUND_UNKNOWN_BPS),  # CUDA up before instrument(): the documented bound
    (_link("unknown", 450e9), 450e9),
    (_link("integrated", None), None),  # no link to bound a copy that never crosses one
])
def test_the_bound_when_the_link_is_not_known(link_span, bound):
    spans = [_queued_h2d()] + ([link_span] if link_span else [])
    assert compute_breakdown(_root(), spans).phase(semconv.PHASE_H2D).bound_bps == bound


def _recorded(spans):
    reader = InMemoryMetricReader()
    recorder = coldstart_metrics.StartupMetrics(MeterProvider(metric_readers=[reader]))
    root = _root()
    recorder.record(compute_breakdown(root, spans), {}, [root, *spans])
    data = reader.get_metrics_data()
    return {m.name: list(m.data.data_points) for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics}


def test_the_bandwidth_metric_is_device_time_and_figures_above_the_bound_are_left_out(caplog):
    points = _recorded([_queued_h2d(), _link()])
    (h2d,) = points[semconv.METRIC_COPY_THROUGHPUT]
    assert h2d.sum == pytest.approx(GB / 0.020)
    with caplog.at_level(logging.WARNING, logger="otel_coldstart"):
        points = _recorded([_queued_h2d(device_s=0.010), _link()])
    assert semconv.METRIC_COPY_THROUGHPUT not in points  # 100 GB/s over 63 GB/s: a timing error
    assert "above the host link's bound" in caplog.text
    # Bytes are still counted: only the impossible figure is withheld.
    assert sum(p.value for p in points[semconv.METRIC_COPY_BYTES]) == GB


def test_the_dashboard_reads_bandwidth_of_devices_from_the_histogram_only():
    """Its per-phase panel divides bytes by busy time: launch time for queued work, so it
    shows host phases only."""
    import importlib.util
    import os

    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (requirements-dashboards.txt) "
                        "needs Python 3.11+")
    path = os.path.join(os.path.dirname(__file__), "..", "..", "dashboards", "generate.py")
    spec = importlib.util.spec_from_file_location("dashboards_generate_bw", path)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    panels = json.loads(generator.render())["panels"]
    by_title = {p.get("title"): p for p in panels}
    host = by_title["Throughput of host phases (bytes over busy time)"]
    assert all('coldstart_phase=~\\"deserialize|h2h|pin\\"' in json.dumps(t) for t in host["targets"])
    assert "Achieved copy and cast bandwidth by direction (p50)" in by_title
