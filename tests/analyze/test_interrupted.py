"""Killed and stalled start-ups, from hand-built records (analyze/interrupted.py), and the
in-process side that writes them (inflight.py): stacks, bounds, gauges that stop at ready()."""

from __future__ import annotations

import io
import json
import sys
import threading
import time

from hypothesis import HealthCheck, example, given, settings, strategies as st

from _examples import examples
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.integrity import repair
from otel_coldstart.analyze.interrupted import complete_killed, killed, parse_stacks, stalls
from otel_coldstart.analyze.model import Span, SpanEvent
from otel_coldstart.analyze.render import render_startup_text
from otel_coldstart.analyze.render_markdown import render_markdown
from otel_coldstart.analyze.report import Report
from otel_coldstart.inflight import format_stacks

TRACE = "ab" * 16
ROOT = "1" * 16
S = 1_000_000_000


def _record(at_s: float, seq: int, open_spans: list, phase: str, events=(), root_start=0) -> Span:
    attrs = {
        semconv.PROGRESS_SEQ: seq,
        semconv.PROGRESS_ROOT: json.dumps({"start_ns": root_start, "parent_id": None,
                                           "attributes": {semconv.RANK: 3, semconv.PROCESS_START_SOURCE: "proc"}}),
        semconv.PROGRESS_OPEN: json.dumps(open_spans),
        semconv.PROGRESS_PHASE: phase,
        semconv.PROGRESS_BYTES_LOADED: 600,
        semconv.PROGRESS_BYTES_EXPECTED: 1000,
    }
    t = int(at_s * S)
    return Span(TRACE, f"{seq:016x}"[-16:].replace("0", "e"), ROOT, semconv.SPAN_PROGRESS, t, t, attrs, {},
                "unset", tuple(events))


def _open(span_id, name, phase, start_s, parent=ROOT, **attrs):
    return {"span_id": span_id, "parent_id": parent, "name": name, "phase": phase, "start_ns": int(start_s * S),
            "thread_id": 7, "attributes": attrs}


def _done(span_id, name, phase, start_s, end_s, parent=ROOT, **attrs):
    return Span(TRACE, span_id, parent, name, int(start_s * S), int(end_s * S),
                {semconv.PHASE: phase, semconv.THREAD_ID: 7, **attrs})


LOAD = "2" * 16
SHARD0 = "3" * 16
SHARD1 = "4" * 16


def _killed_in_shard():
    early = _record(2.0, 1, [_open(LOAD, "coldstart.load", "load", 1.0)], "load")
    late = _record(5.0, 2, [_open(LOAD, "coldstart.load", "load", 1.0),
                            _open(SHARD1, "coldstart.deserialize", "deserialize", 3.0, parent=LOAD,
                                  **{semconv.SHARD_INDEX: 1, semconv.FILE_PATH: "/m/model-00002-of-00002.safetensors",
                                     semconv.BYTES: 100})], "deserialize")
    finished = [_done(SHARD0, "coldstart.deserialize", "deserialize", 1.5, 3.0, parent=LOAD, **{semconv.SHARD_INDEX: 0}),
                _done("5" * 16, "coldstart.import", "import", 0.0, 1.0)]
    return [late, early] + finished  # order in a file does not matter


def test_a_killed_start_up_is_rebuilt_from_its_latest_record():
    spans = complete_killed(_killed_in_shard())
    assert not [s for s in spans if s.name == semconv.SPAN_PROGRESS]
    (root,) = [s for s in spans if s.is_root]
    assert (root.span_id, root.start_ns, root.end_ns) == (ROOT, 0, 5 * S)
    assert root.attributes[semconv.READY] is False
    assert root.attributes[semconv.END_REASON] == semconv.END_KILLED
    assert root.attributes[semconv.END_PHASE] == "deserialize"
    assert root.attributes[semconv.RANK] == 3  # the root's own attributes, from the record
    interrupted = {s.span_id: s for s in spans if s.attributes.get(semconv.INTERRUPTED)}
    assert set(interrupted) == {LOAD, SHARD1}
    assert interrupted[SHARD1].parent_id == LOAD and interrupted[SHARD1].end_ns == 5 * S
    assert repair(spans)[1] == []  # every parent is there: no warning

    (breakdown,) = breakdowns(spans)
    item = killed(breakdown)
    assert item.at_ns == 5 * S and item.phase == "deserialize"
    assert item.running.name == "coldstart.deserialize" and item.running.shard_index == 1
    assert item.running.elapsed_ns == 2 * S
    assert [o.name for o in item.open] == ["coldstart.load", "coldstart.deserialize"]
    assert (item.bytes_loaded, item.bytes_expected) == (600, 1000)
    out = io.StringIO()
    render_startup_text(breakdown, out)
    text = out.getvalue()
    assert "(KILLED: no end, last sign of life at +5.00 s)" in text
    assert ("killed (no end) during deserialize at +5.00 s: in coldstart.deserialize "
            "(shard #1 model-00002-of-00002.safetensors) for 2.00 s") in text
    assert "checkpoint bytes loaded: 600 B of 1000 B (60%)" in text
    markdown = io.StringIO()
    render_markdown(Report([breakdown]), markdown)
    assert "(**KILLED: no end, last sign of life at +5.00 s**, rank 3)" in markdown.getvalue()
    assert "killed (no end) during deserialize" in markdown.getvalue()
    # Phases add up to the root: the rebuilt spans obey the breakdown invariant.
    assert sum(p.busy_ns for p in breakdown.phases) + breakdown.unattributed_ns == breakdown.duration_ns


def test_a_start_up_that_ended_keeps_its_own_root_and_drops_the_records():
    ended_root = Span(TRACE, ROOT, None, semconv.SPAN_ROOT, 0, 9 * S, {semconv.READY: True})
    spans = complete_killed(_killed_in_shard() + [ended_root])
    assert [s for s in spans if s.is_root] == [ended_root]
    assert not [s for s in spans if s.attributes.get(semconv.INTERRUPTED)]
    assert killed(breakdowns(spans)[0]) is None


def test_a_span_that_ended_after_the_last_record_is_not_rebuilt():
    spans = _killed_in_shard() + [_done(SHARD1, "coldstart.deserialize", "deserialize", 3.0, 5.5, parent=LOAD)]
    rebuilt = complete_killed(spans)
    assert len([s for s in rebuilt if s.span_id == SHARD1]) == 1
    assert not [s for s in rebuilt if s.span_id == SHARD1 and s.attributes.get(semconv.INTERRUPTED)]


def test_a_stall_on_a_record_lands_on_the_open_span_and_is_rendered():
    stacks = "thread MainThread (7):\n  fetch (/srv/app.py:12)\n  main (/srv/app.py:30)\nthread pool (8):\n  wait (x:1)"
    event = SpanEvent(semconv.EVENT_STALL, 4 * S, {semconv.STALL_IDLE_S: 2.5, semconv.STALL_PHASE: "deserialize",
                                                   semconv.STALL_SPAN_ID: SHARD1, semconv.STALL_STACKS: stacks})
    spans = _killed_in_shard()
    spans[0] = _record(5.0, 2, json.loads(spans[0].attributes[semconv.PROGRESS_OPEN]), "deserialize", [event])
    rebuilt = complete_killed(spans)
    (shard,) = [s for s in rebuilt if s.span_id == SHARD1]
    assert shard.events == (event,)
    (breakdown,) = breakdowns(rebuilt)
    (stall,) = stalls(breakdown)
    assert (stall.at_ns, stall.idle_s, stall.phase, stall.threads) == (4 * S, 2.5, "deserialize", 2)
    assert stall.top_frames == ("fetch (/srv/app.py:12)", "main (/srv/app.py:30)")
    out = io.StringIO()
    render_startup_text(breakdown, out)
    assert "stalled at +4.00 s in deserialize (coldstart.deserialize): no progress for 2.50 s" in out.getvalue()
    assert "      fetch (/srv/app.py:12)\n" in out.getvalue()


hostile_text = st.one_of(st.text(max_size=30), st.just("{}"), st.just("[]"), st.just("null"),
                         st.builds(json.dumps, st.recursive(
                             st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                             lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(st.sampled_from(["span_id", "start_ns", "name", "parent_id", "phase",
                                                                "attributes", "thread_id"]) | st.text(max_size=4),
                                               inner, max_size=7), max_leaves=30)))


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(root=hostile_text, opened=hostile_text, phase=st.none() | st.text(max_size=5) | st.integers(),
       end=st.integers(min_value=0, max_value=2**63), parent=st.none() | st.just(ROOT) | st.text(max_size=16))
def test_hostile_progress_records_never_raise_and_never_make_time_run_backwards(root, opened, phase, end, parent):
    record = Span(TRACE, "9" * 16, parent, semconv.SPAN_PROGRESS, end, end,
                  {semconv.PROGRESS_ROOT: root, semconv.PROGRESS_OPEN: opened, semconv.PROGRESS_PHASE: phase})
    spans = complete_killed([record])
    assert all(s.name != semconv.SPAN_PROGRESS for s in spans)
    assert all(0 <= s.start_ns <= s.end_ns for s in spans)
    for breakdown in breakdowns(repair(spans)[0]):
        render_startup_text(breakdown, io.StringIO())


def test_stacks_are_bounded_and_read_back():
    event = threading.Event()
    workers = [threading.Thread(target=event.wait, name=f"worker-{i}", daemon=True) for i in range(40)]
    for worker in workers:
        worker.start()
    try:
        text = format_stacks(sys._current_frames(), first=threading.get_ident(), max_chars=2000)
    finally:
        event.set()
    assert len(text) <= 2000 and "more thread(s)" in text
    blocks = parse_stacks(text)
    assert blocks[0][0].startswith(f"thread MainThread ({threading.get_ident()})")
    assert blocks[0][1][0].startswith("test_stacks_are_bounded_and_read_back (")


def test_in_flight_gauges_report_while_running_and_nothing_after_ready(traced, small_checkpoint):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from safetensors.torch import load_file

    import otel_coldstart

    reader = InMemoryMetricReader()
    otel_coldstart.uninstrument()
    otel_coldstart.instrument(tracer_provider=traced.provider, meter_provider=MeterProvider(metric_readers=[reader]),
                              start_at="instrument", summary=False, handle_sigterm=False)

    def inflight_points():
        data = reader.get_metrics_data()
        found = {}
        for resource_metrics in (data.resource_metrics if data else []):
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    if metric.name.startswith("model.startup.inflight."):
                        for point in metric.data.data_points:
                            found[metric.name] = (point.value, point.attributes.get(semconv.PHASE))
        return found

    with otel_coldstart.phase("load"):
        load_file(small_checkpoint[0])
        during = inflight_points()
    assert during[semconv.METRIC_INFLIGHT_LOADED][0] > 0
    assert during[semconv.METRIC_INFLIGHT_LOADED][1] == "load"
    assert during[semconv.METRIC_INFLIGHT_EXPECTED][0] >= during[semconv.METRIC_INFLIGHT_LOADED][0]
    time.sleep(0.3)  # past the gauges' snapshot cache (one scrape reads four gauges from one snapshot)
    assert inflight_points()[semconv.METRIC_INFLIGHT_ELAPSED][1] == "unattributed"
    otel_coldstart.ready()
    assert inflight_points() == {}


otlp_event = st.fixed_dictionaries({
    "name": st.sampled_from([semconv.EVENT_STALL, "exception", "coldstart.x"]) | st.text(max_size=6) | st.integers(),
    "timeUnixNano": st.one_of(st.integers(min_value=-5, max_value=2**64), st.text(max_size=22), st.none(),
                              st.just("1711138247024460625")),
    "attributes": st.lists(st.fixed_dictionaries({"key": st.sampled_from(
        [semconv.STALL_STACKS, semconv.STALL_IDLE_S, semconv.STALL_SPAN_ID]) | st.text(max_size=4),
        "value": st.dictionaries(st.sampled_from(["stringValue", "doubleValue", "intValue"]),
                                 st.text(max_size=30) | st.floats() | st.integers(), max_size=1)}), max_size=3)})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(otlp_event, max_size=5) | st.integers() | st.text(max_size=5))
# Found on 3.13 by this test: an idle time whose nanoseconds overflow a float crashed the text report.
@example(events=[{"name": semconv.EVENT_STALL, "timeUnixNano": "1711138247024460625",
                  "attributes": [{"key": semconv.STALL_IDLE_S, "value": {"doubleValue": 1.797693134862316e+299}}]}])
def test_span_events_of_any_shape_read_or_fail_cleanly(tmp_path_factory, events):
    from otel_coldstart.analyze.readers import TraceReadError, read_trace

    span = {"traceId": TRACE, "spanId": ROOT, "name": semconv.SPAN_ROOT, "startTimeUnixNano": "1",
            "endTimeUnixNano": "2", "events": events}
    path = tmp_path_factory.mktemp("events") / "trace.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    try:
        (read,) = read_trace(str(path)).spans
    except TraceReadError:
        return
    assert all(e.name.startswith("coldstart.") for e in read.events)
    for breakdown in breakdowns([read]):
        stalls(breakdown)
        render_startup_text(breakdown, io.StringIO())


def _aggregate(start_s, end_s, nbytes, thread=7, parent=ROOT):
    return {"name": semconv.phase_span_name("cast"), "phase": "cast", "parent_id": parent,
            "start_ns": int(start_s * S), "end_ns": int(end_s * S),
            "attributes": {semconv.AGGREGATE: True, semconv.CALLS: 10, semconv.BYTES: nbytes,
                           semconv.BUSY_S: end_s - start_s, semconv.THREAD_ID: thread}}


def test_aggregates_on_the_latest_record_are_rebuilt_once_and_never_twice():
    """Issue 39: a cast summed under the root is written only at ready(); a killed start-up
    keeps it from the record, unless its own span was written since (then that one counts)."""
    early = _record(2.0, 1, [], "unattributed")
    early.attributes[semconv.PROGRESS_AGGREGATES] = json.dumps([_aggregate(1.0, 1.5, 100)])
    late = _record(4.0, 2, [_open(LOAD, "coldstart.warmup", "warmup", 3.0)], "warmup")
    late.attributes[semconv.PROGRESS_AGGREGATES] = json.dumps([_aggregate(1.0, 2.5, 300),
                                                               _aggregate(2.6, 2.9, 50, thread=8)])
    written = Span(TRACE, "9" * 16, ROOT, semconv.phase_span_name("cast"), int(2.6 * S), int(3.0 * S),
                   {semconv.PHASE: "cast", semconv.AGGREGATE: True, semconv.BYTES: 60, semconv.BUSY_S: 0.4,
                    semconv.THREAD_ID: 8, semconv.CALLS: 12})
    spans = complete_killed([early, late, written])
    casts = sorted((s for s in spans if s.phase == "cast"), key=lambda s: s.start_ns)
    assert [(s.start_ns, s.end_ns, s.attributes[semconv.BYTES]) for s in casts] == [
        (1 * S, int(2.5 * S), 300), (int(2.6 * S), 3 * S, 60)]  # the latest record's, and the written span
    assert casts[0].parent_id == ROOT and casts[0].attributes[semconv.AGGREGATE] is True
    assert not casts[0].attributes.get(semconv.INTERRUPTED)
    (startup,) = breakdowns(repair(spans)[0])
    cast = next(p for p in startup.phases if p.phase == "cast")
    assert cast.bytes == 360
