"""Start-up metrics, recorded once when the start-up ends, from the same breakdown the
summary shows (so traces, summary and dashboards agree by construction).

Names and units come from :mod:`otel_coldstart.semconv`; Prometheus sees
``model_startup_duration_seconds``, ``model_startup_phase_duration_seconds``,
``model_startup_shard_duration_seconds`` and ``model_startup_bytes_total``.
Labels are bounded: phase, cache state and the user's identifying resource attributes;
never file paths, tensor names or trace ids.
"""

from __future__ import annotations

from typing import Any, Mapping

from opentelemetry import metrics

from . import semconv
from .analyze.breakdown import Breakdown

# Start-ups take milliseconds (a cached small model) to tens of minutes (a cold 400B one).
DURATION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 180,
    300, 450, 600, 900, 1200, 1800, 3600,
)


class StartupMetrics:
    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        from . import __version__

        provider = meter_provider or metrics.get_meter_provider()
        meter = provider.get_meter("otel_coldstart", __version__)
        self.startup_duration = meter.create_histogram(
            semconv.METRIC_STARTUP_DURATION, unit="s",
            description="Wall time from process start to ready() (or exit)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.phase_duration = meter.create_histogram(
            semconv.METRIC_PHASE_DURATION, unit="s",
            description="Busy time per start-up phase (summed over threads)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.shard_duration = meter.create_histogram(
            semconv.METRIC_SHARD_DURATION, unit="s",
            description="Time to read one checkpoint file, by page-cache state",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self.bytes = meter.create_counter(
            semconv.METRIC_BYTES, unit="By", description="Bytes handled per start-up phase",
        )

    def record(self, breakdown: Breakdown, attributes: Mapping[str, Any] | None = None) -> None:
        base = dict(attributes or {})
        self.startup_duration.record(
            breakdown.duration_ns / 1e9, {**base, semconv.READY: breakdown.ready}
        )
        for phase in breakdown.phases:
            labels = {**base, semconv.PHASE: phase.phase}
            self.phase_duration.record(phase.busy_ns / 1e9, labels)
            if phase.bytes:
                self.bytes.add(phase.bytes, labels)
        if breakdown.unattributed_ns:
            self.phase_duration.record(breakdown.unattributed_ns / 1e9, {**base, semconv.PHASE: "unattributed"})
        for shard in breakdown.shards:
            self.shard_duration.record(
                shard.duration_ns / 1e9, {**base, semconv.CACHE_STATE: shard.cache_state or "unknown"}
            )
