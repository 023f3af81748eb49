"""otel_coldstart.first_request(): the first request after ready(), in this process (an SDK
provider with an in-memory exporter). The fresh-process promises (the trace file, an
exception that ends the process, SIGKILL during the request, the analyzer and capacity over
the files) are in test_first_request_process.py."""

from __future__ import annotations

import asyncio

import pytest

import otel_coldstart
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import compute_breakdown
from otel_coldstart.analyze.first_request import FAILED, OK, document, lines


@pytest.fixture(autouse=True)
def _fresh_first_request(monkeypatch):
    # One first request per process: each test here is its own process's first.
    monkeypatch.setattr(otel_coldstart, "_first_request_seen", False)


def _root(traced):
    return next(s for s in traced.spans() if s.name == semconv.SPAN_ROOT)


def _breakdown(traced):
    records = traced.records()
    root = next(r for r in records if r.is_root)
    return compute_breakdown(root, [r for r in records if not r.is_root])


def test_first_request_after_ready_is_a_child_of_the_root_after_it(traced):
    otel_coldstart.ready()
    with otel_coldstart.first_request():
        with otel_coldstart.phase("lazy_compile"):  # our span made during the request nests inside it
            pass
    root = _root(traced)
    [request] = traced.named(semconv.SPAN_FIRST_REQUEST)
    assert request.parent.span_id == root.context.span_id
    assert request.start_time >= root.end_time
    attrs = request.attributes
    assert attrs[semconv.PHASE] == semconv.PHASE_FIRST_REQUEST
    assert attrs[semconv.AFTER_READY] is True
    assert attrs[semconv.FIRST_REQUEST_SOURCE] == "first_request()"
    assert attrs[semconv.FIRST_REQUEST_TTFT_S] == pytest.approx((request.end_time - root.start_time) / 1e9, abs=1e-5)
    assert 0 <= attrs[semconv.FIRST_REQUEST_AFTER_READY_S] <= (request.start_time - root.end_time) / 1e9 + 1e-5
    [inner] = [s for s in traced.spans() if s.name == "coldstart.lazy_compile"]
    assert inner.parent.span_id == request.context.span_id
    [begun] = traced.named(semconv.SPAN_FIRST_REQUEST_BEGUN)
    assert begun.parent.span_id == root.context.span_id and begun.start_time == request.start_time
    b = _breakdown(traced)
    assert b.first_request.status == OK
    assert b.first_request.time_to_first_token_ns == request.end_time - root.start_time
    assert dict((p, n) for p, _, n in b.first_request.phases_inside) == {"lazy_compile": 1}
    doc = document(b)
    assert doc["status"] == "ok" and doc["time_to_first_token_s"] == pytest.approx(attrs[semconv.FIRST_REQUEST_TTFT_S],
                                                                                 abs=1e-5)
    assert lines(b)[0].startswith("first request: ")
    # the first request's time is not a start-up phase: the breakdown of the start-up is unchanged
    assert all(p.phase != semconv.PHASE_FIRST_REQUEST for p in b.phases)


def test_only_the_first_call_counts(traced):
    otel_coldstart.ready()
    calls = []

    @otel_coldstart.first_request()
    def handle(x):
        calls.append(x)
        return x * 2

    assert [handle(i) for i in range(5)] == [0, 2, 4, 6, 8]
    with otel_coldstart.first_request():
        pass
    assert calls == [0, 1, 2, 3, 4]
    assert len(traced.named(semconv.SPAN_FIRST_REQUEST)) == 1
    assert len(traced.named(semconv.SPAN_FIRST_REQUEST_BEGUN)) == 1


def test_async_handler(traced):
    otel_coldstart.ready()

    @otel_coldstart.first_request()
    async def handle(x):
        await asyncio.sleep(0.01)
        return x + 1

    assert asyncio.iscoroutinefunction(handle)
    assert asyncio.run(handle(1)) == 2
    assert asyncio.run(handle(2)) == 3
    [request] = traced.named(semconv.SPAN_FIRST_REQUEST)
    assert (request.end_time - request.start_time) >= 10_000_000  # it lasted until the coroutine returned


def test_exception_propagates_unchanged_and_the_span_says_it_failed(traced):
    otel_coldstart.ready()
    error = KeyError("no such adapter")

    @otel_coldstart.first_request()
    def handle():
        raise error

    with pytest.raises(KeyError) as raised:
        handle()
    assert raised.value is error
    [request] = traced.named(semconv.SPAN_FIRST_REQUEST)
    assert request.status.status_code.name == "ERROR"
    assert request.attributes[semconv.ERROR_TYPE] == "KeyError"
    b = _breakdown(traced)
    assert b.first_request.status == FAILED and b.first_request.time_to_first_token_ns is None
    assert "FAILED (KeyError)" in lines(b)[0]
    handle_calls = []

    @otel_coldstart.first_request()
    def later():
        handle_calls.append(1)

    later()  # the failed one was the first request: nothing more is recorded
    assert handle_calls == [1] and len(traced.named(semconv.SPAN_FIRST_REQUEST)) == 1


def test_before_ready_it_ends_the_start_up_first(traced):
    with otel_coldstart.first_request():
        from otel_coldstart import session

        assert session.ACTIVE.ended
    root = _root(traced)
    assert root.attributes[semconv.READY] is True
    assert root.attributes[semconv.READY_BY] == semconv.PHASE_FIRST_REQUEST
    [request] = traced.named(semconv.SPAN_FIRST_REQUEST)
    assert request.start_time >= root.end_time


def test_generators_are_refused():
    with pytest.raises(TypeError, match="generator"):
        @otel_coldstart.first_request()
        def stream():
            yield 1


def test_not_instrumented_is_a_no_op_and_claims_nothing():
    otel_coldstart.uninstrument()

    @otel_coldstart.first_request()
    def handle():
        return 7

    assert handle() == 7
    assert otel_coldstart._first_request_seen is False  # a later instrument() still gets its first request


def test_the_host_request_span_stays_in_its_own_trace(traced):
    """Our span is never made current: spans the host makes inside the request stay in the
    request's trace, and ours names that trace."""
    otel_coldstart.ready()
    tracer = traced.provider.get_tracer("host")
    with tracer.start_as_current_span("POST /generate") as request_span:
        with otel_coldstart.first_request():
            with tracer.start_as_current_span("tokenize") as inner:
                pass
    assert inner.parent.span_id == request_span.get_span_context().span_id
    [ours] = traced.named(semconv.SPAN_FIRST_REQUEST)
    assert ours.attributes[semconv.FIRST_REQUEST_REQUEST_TRACE_ID] == format(
        request_span.get_span_context().trace_id, "032x")


def test_ending_during_the_first_request_ends_it_interrupted(traced):
    otel_coldstart.ready()
    with otel_coldstart.first_request():
        otel_coldstart.uninstrument()  # as an exit or a handled SIGTERM would: Startup.finish drains
    [request] = traced.named(semconv.SPAN_FIRST_REQUEST)
    assert request.attributes[semconv.INTERRUPTED] is True
    assert request.attributes[semconv.FIRST_REQUEST_END] == semconv.END_UNINSTRUMENTED


def test_the_metric_is_recorded_once(tmp_path):
    import time

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    otel_coldstart.uninstrument()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel_coldstart.instrument(meter_provider=provider, start_at="instrument", summary=False, handle_sigterm=False,
                              output_dir=str(tmp_path))
    try:
        otel_coldstart.ready()
        with otel_coldstart.first_request():
            pass
        with otel_coldstart.first_request():
            pass
        points = []
        deadline = time.monotonic() + 5
        while not points and time.monotonic() < deadline:
            data = reader.get_metrics_data()
            points = [p for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
                      for m in sm.metrics if m.name == semconv.METRIC_TIME_TO_FIRST_TOKEN for p in m.data.data_points]
            time.sleep(0.02)
        assert len(points) == 1 and points[0].count == 1
        assert points[0].sum > 0
    finally:
        otel_coldstart.uninstrument()
        provider.shutdown()
