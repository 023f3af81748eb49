"""capacity --prometheus where the start-up histogram reached Prometheus as a native
(exponential) histogram: a real Prometheus (Debian's 2.42, ``--enable-feature=native-histograms``)
scrapes, over protobuf, the OTel SDK's exponential histogram of five start-up times (the SDK's
ExponentialBucketHistogramAggregation; the Python SDK has no exporter that writes them as
native histograms, so this test encodes the scrape itself: metrics.proto's Histogram with
schema, spans and deltas). What it pins down (docs/decisions.md, "native histograms"):

- the native buckets arrive and histogram_quantile reads them without ``le``, at the SDK's
  resolution (scale 4 for this spread of values: 16 buckets an octave, each 4.4% wide);
- Prometheus 2.42's max_over_time/last_over_time give 0 for them, so the start-ups of a range
  cannot be summed from them server-side: capacity says so instead of "no start-up". A
  Prometheus that reads them over a range fails the canary below, the cue to read them."""

from __future__ import annotations

import http.server
import math
import struct
import threading

import pytest

import _prometheus
from otel_coldstart.cli import main
from otel_coldstart.cli.errors import EXIT_NO_STARTUP

pytestmark = pytest.mark.process

STARTUPS_S = (12.5, 14.0, 31.0, 65.2, 700.0)
PROTOBUF = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | 0x80 if n else low)
        if not n:
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, payload: bytes) -> bytes:
    return _field(number, 2) + _varint(len(payload)) + payload


def _uint(number: int, n: int) -> bytes:
    return _field(number, 0) + _varint(n)


def _sint(number: int, n: int) -> bytes:
    return _uint(number, (n << 1) ^ (n >> 63))


def _double(number: int, x: float) -> bytes:
    return _field(number, 1) + struct.pack("<d", x)


def native_histogram(point) -> bytes:
    """metrics.proto's Histogram for an OTel ExponentialHistogramDataPoint (positive values):
    the same schema (OTel's scale), index + 1 (OTel's bucket i is (b^i, b^(i+1)], Prometheus's
    (b^(i-1), b^i]), the counts as spans of consecutive buckets and deltas between them."""
    assert -4 <= point.scale <= 8, point.scale
    counts = {point.positive.offset + k + 1: c for k, c in enumerate(point.positive.bucket_counts) if c}
    message = (_uint(1, point.count) + _double(2, point.sum) + _sint(5, point.scale) + _double(6, 0.0)
               + _uint(7, point.zero_count))
    spans: list[list[int]] = []
    deltas, previous_count, previous_index = [], 0, None
    for index in sorted(counts):
        if previous_index is None or index != previous_index + 1:
            spans.append([index - (previous_index + 1 if previous_index is not None else 0), 0])
        spans[-1][1] += 1
        deltas.append(counts[index] - previous_count)
        previous_count, previous_index = counts[index], index
    for offset, length in spans:
        message += _bytes(12, _sint(1, offset) + _uint(2, length))
    return message + b"".join(_sint(13, d) for d in deltas)


def _family(name: str, points) -> bytes:
    body = _bytes(1, name.encode()) + _uint(3, 4)  # type HISTOGRAM
    for point in points:
        labels = b"".join(_bytes(1, _bytes(1, k.encode()) + _bytes(2, str(v).encode()))
                          for k, v in sorted(point.attributes.items()))
        body += _bytes(4, labels + _bytes(7, native_histogram(point)))
    return _varint(len(body)) + body


def _exponential_points():
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], views=[
        View(instrument_name="*", aggregation=ExponentialBucketHistogramAggregation())])
    histogram = provider.get_meter("test").create_histogram("model.startup.duration", unit="s")
    for value in STARTUPS_S:
        histogram.record(value, {"host_type": "g5", "coldstart_ready": "true", "service_name": "native-test"})
    (metric,) = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    provider.shutdown()
    return metric.data.data_points



@pytest.fixture(scope="module")
def native_prometheus(tmp_path_factory):
    _prometheus.require_binary()
    points = _exponential_points()
    body = _family("model_startup_duration_seconds", points)

    class Target(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", PROTOBUF)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    try:
        with _prometheus.running(tmp_path_factory.mktemp("prometheus-native"), [f"127.0.0.1:{target.server_address[1]}"],
                                 "native", extra_args=["--enable-feature=native-histograms"]) as server:
            server.wait_for("count_over_time(model_startup_duration_seconds[1m]) >= 2", 90)
            yield server, points
    finally:
        target.shutdown()


def test_native_buckets_arrive_and_histogram_quantile_reads_them_without_le(native_prometheus):
    server, (point,) = native_prometheus
    # The SDK's 160 buckets at most over 12.5..700 s (5.8 octaves): scale 4, 16 an octave; the
    # plugin's spread of sub-second to an hour (12 octaves and more) would be scale 3, 8 an octave.
    assert point.scale == 4
    ratio = 2 ** (2.0 ** -point.scale)  # 1.044: each bucket 4.4% wide
    (series,) = server.query("model_startup_duration_seconds")
    histogram = series["histogram"][1]
    assert int(histogram["count"]) == len(STARTUPS_S)
    for value in STARTUPS_S:  # each start-up in a bucket (lower, upper] of that width
        (bucket,) = [b for b in histogram["buckets"] if float(b[1]) < value <= float(b[2])]
        assert math.isclose(float(bucket[2]) / float(bucket[1]), ratio)
    (median,) = server.query("histogram_quantile(0.5, sum(model_startup_duration_seconds))")
    p50 = float(median["value"][1])
    assert 31.0 / ratio < p50 <= 31.0 * ratio  # the 3rd of 5, within its bucket


def test_canary_range_functions_do_not_read_native_histograms_here(native_prometheus):
    """The fact the reader's choice rests on: 2.42 answers 0 for a native series over a range.
    A Prometheus that answers the count (5) can have the range's start-ups read natively."""
    server, _ = native_prometheus
    for function in ("max_over_time", "last_over_time"):
        (row,) = server.query(f"{function}(model_startup_duration_seconds[1h])")
        assert float(row["value"][1]) == 0, (function, row)


def test_capacity_says_the_histograms_are_native_instead_of_no_start_up(native_prometheus, capsys):
    server, _ = native_prometheus
    assert main(["capacity", "--prometheus", server.url, "--since", "1h", "--format", "json"]) == EXIT_NO_STARTUP
    error = capsys.readouterr().err
    assert "native histograms (1 model_startup_duration_seconds series" in error, error
    assert "max_over_time/last_over_time return 0" in error
