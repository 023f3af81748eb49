"""Asynchronous device work (non-blocking copies, GPU casts, device-to-device copies) is timed
from CUDA events without ever blocking the host. No GPU here, so a stand-in event runs on a
simulated device timeline (work executes in queue order per stream, an event completes when
the work queued before it has). Its ``synchronize()`` raises: any host wait added anywhere
fails the test."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from otel_coldstart import semconv
from otel_coldstart.patches import _device_windows, _guard, tensor_ops
from otel_coldstart.recorder import Aggregate

from _standins import MS, Described, Timeline, TimelineStream, make_event_class, open_gate


# --- the pure scheduler --------------------------------------------------------------------------

def _queue_call(line, Event, windows, stream, device_ns, host_ns=10_000, key=None):
    key = key or (0, stream)
    mark_event = Event(enable_timing=True)
    mark_event.record(stream)
    mark = _device_windows.Mark(key, stream, mark_event, line.host_ns)
    line.queue(stream, device_ns)
    line.host_ns += host_ns
    window, spare, timed = _device_windows.join(windows.get(key), mark, lambda: Event(enable_timing=True),
                                                open_gate)
    windows[key] = window
    return spare, timed


def test_scheduler_resolves_by_query_only_and_waits_for_nothing():
    line = Timeline()
    Event = make_event_class(line)
    windows: dict = {}
    for _ in range(3):
        _queue_call(line, Event, windows, "s0", 10 * MS)
    assert _device_windows.try_resolve(windows, open_gate) is None  # still queued: not resolved, no wait
    line.host_ns += 30 * MS
    resolution = _device_windows.try_resolve(windows, open_gate)
    assert resolution.device_ns == pytest.approx(30 * MS, abs=100_000)


def test_scheduler_closes_segments_over_host_gaps():
    line = Timeline()
    Event = make_event_class(line)
    windows: dict = {}
    start = line.host_ns
    spare, _ = _queue_call(line, Event, windows, "s0", 10 * MS)
    assert spare is None  # the first mark is the window's start
    line.host_ns += 50 * MS  # the host reads the next shard; the device is idle
    spare, _ = _queue_call(line, Event, windows, "s0", 10 * MS)
    assert spare is not None  # the old segment start comes back for re-use
    line.host_ns += 100 * MS
    resolution = _device_windows.try_resolve(windows, open_gate)
    assert resolution.device_ns == pytest.approx(20 * MS, abs=100_000)
    # The window ends when the last work finished: 10 ms, idle until 50 ms, 10 ms more.
    assert resolution.last_end_ns == pytest.approx(start + 60 * MS, abs=100_000)


def test_scheduler_streams_of_one_device_add_and_devices_overlap():
    line = Timeline()
    Event = make_event_class(line)
    windows: dict = {}
    _queue_call(line, Event, windows, "a", 10 * MS, key=(0, "a"))
    _queue_call(line, Event, windows, "b", 20 * MS, key=(0, "b"))
    _queue_call(line, Event, windows, "c", 5 * MS, key=(1, "c"))
    line.host_ns += 100 * MS
    assert _device_windows.try_resolve(windows, open_gate).device_ns == pytest.approx(30 * MS, abs=100_000)


def test_scheduler_bounded_final_wait_polls_then_gives_up():
    line = Timeline()
    Event = make_event_class(line)
    windows: dict = {}
    _queue_call(line, Event, windows, "s0", 10_000 * MS)  # ten device seconds queued
    clock = [0.0]
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        clock[0] += seconds
        line.host_ns += int(seconds * 1e9)

    assert _device_windows.resolve_bounded(windows, open_gate, 0.5, clock=lambda: clock[0],
                                           sleep=sleep) is None
    assert clock[0] == pytest.approx(0.5, abs=0.01) and len(polls) >= 100
    # Work that finishes inside the bound is resolved.
    windows = {}
    _queue_call(line, Event, windows, "s1", 100 * MS)
    clock[0] = 0.0
    resolution = _device_windows.resolve_bounded(windows, open_gate, 0.5, clock=lambda: clock[0],
                                                 sleep=sleep)
    assert resolution.device_ns == pytest.approx(100 * MS, abs=1 * MS)


def test_scheduler_refused_gate_never_calls_events():
    line = Timeline()
    Event = make_event_class(line)
    windows: dict = {}
    _queue_call(line, Event, windows, "s0", 10 * MS)
    line.host_ns += 100 * MS
    calls = []

    def closed_gate(call, *args):
        calls.append(call)
        return False, None

    assert _device_windows.try_resolve(windows, closed_gate) is None
    assert len(calls) == 1  # asked once, refused, nothing further attempted


def test_scheduler_failed_elapsed_time_marks_the_window_broken():
    class Broken:
        def query(self):
            return True

        def elapsed_time(self, other):
            raise RuntimeError("events on different devices")

        def record(self, stream=None):
            pass

    mark = _device_windows.Mark((0, "s"), "s", Broken(), 0)
    window, _, _ = _device_windows.join(None, mark, Broken, open_gate)
    resolution = _device_windows.try_resolve({(0, "s"): window}, open_gate)
    assert window.broken and resolution.device_ns == 0


# --- tensor_ops over the scheduler: marks, joins, settle, held aggregates -----------------------

@pytest.fixture
def timeline(monkeypatch):
    line = Timeline()
    Event = make_event_class(line)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: TimelineStream(device))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(tensor_ops, "time", line)
    line.Event = Event
    line.Stream = TimelineStream
    yield line
    tensor_ops._local.__dict__.pop("spare_events", None)
    tensor_ops._stream_tails().clear()


def _timed_call(line, aggregate, nbytes, device_ns, host_ns=10_000, device_index=0):
    """What the wrappers do around one call whose device work is asynchronous."""
    device = torch.device("cuda", device_index)
    mark = tensor_ops._mark(device)
    line.queue(line.Stream(device), device_ns)
    line.host_ns += host_ns
    aggregate.calls += 1
    aggregate.bytes += nbytes
    aggregate.busy_ns += host_ns
    aggregate.last_ns = line.host_ns
    tensor_ops._join_device_work(aggregate, mark, host_ns)


def _aggregate(line, phase=semconv.PHASE_H2D) -> Aggregate:
    aggregate = Aggregate(phase, None, None, {})
    aggregate.first_ns = line.host_ns
    return aggregate


def test_aggregate_ending_with_copies_queued_is_held_not_waited_for(timeline):
    aggregate = _aggregate(timeline)
    for _ in range(3):
        _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
    assert aggregate.settle(aggregate, None) is False  # held: the copies are still queued
    assert semconv.COPY_ASYNC_S not in aggregate.attributes
    timeline.host_ns += 40 * MS  # later (another span ended): the copies are done
    assert aggregate.settle(aggregate, None) is True
    assert aggregate.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.030)
    assert aggregate.attributes[semconv.THROUGHPUT] == pytest.approx(3_000_000 / 0.030, rel=1e-3)
    assert aggregate.last_ns == pytest.approx(aggregate.first_ns + 30 * MS, abs=1)
    assert semconv.COPY_UNTIMED_CALLS not in aggregate.attributes


def test_blocking_calls_in_the_same_aggregate_keep_their_own_time(timeline):
    aggregate = _aggregate(timeline)
    _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
    aggregate.bytes += 1_000_000  # one blocking copy of 20 ms in the same aggregate
    aggregate.busy_ns += 20 * MS
    timeline.host_ns += 50 * MS
    assert aggregate.settle(aggregate, None)
    assert aggregate.attributes[semconv.THROUGHPUT] == pytest.approx(2_000_000 / 0.030, rel=1e-3)


def test_final_settle_waits_a_bounded_time_then_marks_unresolved(timeline, monkeypatch):
    aggregate = _aggregate(timeline)
    _timed_call(timeline, aggregate, 1_000_000, 60_000 * MS)  # a minute of device work queued
    import time as real_time

    assert aggregate.settle(aggregate, real_time.monotonic() + 0.05) is True
    assert aggregate.attributes[semconv.COPY_ASYNC_UNRESOLVED] is True
    assert aggregate.attributes[semconv.COPY_UNTIMED_CALLS] == 1
    assert semconv.COPY_ASYNC_S not in aggregate.attributes


def test_no_event_call_while_a_capture_is_open_and_the_calls_are_marked(timeline):
    aggregate = _aggregate(timeline)
    _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
    _guard.capture_started()
    try:
        assert tensor_ops._mark(torch.device("cuda", 0)) is None
        _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
        timeline.host_ns += 100 * MS
        assert aggregate.settle(aggregate, None) is False  # cannot even query: held
    finally:
        _guard.capture_ended()
    assert aggregate.settle(aggregate, None) is True
    assert aggregate.attributes[semconv.COPY_UNTIMED_CALLS] == 1
    assert aggregate.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.010)


def test_windows_are_keyed_by_device_and_stream(timeline):
    aggregate = _aggregate(timeline, semconv.PHASE_D2D)
    _timed_call(timeline, aggregate, 1, 10 * MS, device_index=0)
    _timed_call(timeline, aggregate, 1, 10 * MS, device_index=1)
    assert set(aggregate.extras["device_work"].windows) == {(0, 0), (1, 1)}
    timeline.host_ns += 100 * MS
    assert aggregate.settle(aggregate, None)
    assert aggregate.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.010)  # two devices in parallel


def test_blocking_copy_after_a_queued_gpu_cast_is_not_charged_the_cast(timeline, traced):  # tails: per start-up
    """A blocking H2D synchronises its stream: the host's time for it includes the cast queued
    before it. Bracketed by events, the copy keeps its own device time and the wait is reported."""
    device = torch.device("cuda", 0)
    cast = _aggregate(timeline, semconv.PHASE_CAST)
    _timed_call(timeline, cast, 1_000_000, 80 * MS)  # an asynchronous GPU cast, 80 ms of device work
    plan = tensor_ops._Plan(False)
    tensor_ops._mark_blocking(plan, device)
    assert plan.blocking_before is not None
    start = timeline.host_ns
    timeline.queue(timeline.Stream(device), 5 * MS)  # the copy itself, after the cast
    timeline.host_ns = timeline.free_at_ns[timeline.Stream(device)]  # the blocking call returns then
    moved_start, waited = tensor_ops._finish_blocking(plan, start, timeline.host_ns)
    assert timeline.host_ns - moved_start == pytest.approx(5 * MS, abs=100_000)
    assert waited == pytest.approx(80 * MS - 10_000, abs=200_000)
    assert cast.settle(cast, None) and cast.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.080)


def test_blocking_copy_with_nothing_queued_takes_no_event(timeline):
    plan = tensor_ops._Plan(False)
    created = timeline.Event.created
    tensor_ops._mark_blocking(plan, torch.device("cuda", 0))
    assert plan.blocking_before is None and timeline.Event.created == created


# --- capture atomicity: a capture starting on another thread never meets an event call ---------

def test_event_calls_and_capture_begin_never_overlap_across_threads():
    """A capture thread raises the open count and then begins a capture; a copy thread makes
    event calls through the gate. A call that ran while a capture was running would
    invalidate it in global capture mode: the stand-in capture fails if it sees one."""
    state = {"capturing": False, "in_event_call": 0, "violations": 0, "event_calls": 0, "refused": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def event_call():
        with lock:
            state["in_event_call"] += 1
            if state["capturing"]:
                state["violations"] += 1
        for _ in range(50):  # a call that takes a little while
            pass
        with lock:
            state["in_event_call"] -= 1
            state["event_calls"] += 1

    def copier():
        while not stop.is_set():
            ran, _ = _guard.outside_captures(event_call)
            if not ran:
                state["refused"] += 1

    def capture_begin():
        with lock:
            if state["in_event_call"]:
                state["violations"] += 1
            state["capturing"] = True

    def capture_end():
        with lock:
            state["capturing"] = False

    threads = [threading.Thread(target=copier) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(500):
            _guard.capture_started()  # what the capture wrappers do before torch's capture_begin
            capture_begin()
            time.sleep(0.0002)  # the capture runs a while; copier threads keep trying
            capture_end()
            _guard.capture_ended()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert state["violations"] == 0
    assert state["event_calls"] > 0 and state["refused"] > 0  # both sides really ran


def test_the_unguarded_pattern_would_race():
    """The same harness without the shared lock: the check can fail, so the test above means
    something. (Check, then call, with a capture beginning in between.)"""
    capturing = threading.Event()
    checked = threading.Event()
    violations = []

    def copier():
        if not capturing.is_set():  # "any capture open?" - no
            checked.set()
            capturing.wait(1)  # a capture begins on another thread right here
            if capturing.is_set():
                violations.append("event call during a capture")

    thread = threading.Thread(target=copier)
    thread.start()
    checked.wait(1)
    capturing.set()
    thread.join()
    assert violations


# --- the recorder holds an aggregate until its device work finished ---------------------------

class _Session:
    def __init__(self) -> None:
        self.spans = []
        self.ended = False

    def current_parent(self):
        from opentelemetry.trace import INVALID_SPAN_CONTEXT

        return INVALID_SPAN_CONTEXT

    def emit_span(self, name, phase, parent, start_ns, end_ns, attributes):
        self.spans.append((phase, attributes))


def test_recorder_holds_unfinished_aggregates_and_writes_them_later_or_at_the_end():
    from otel_coldstart.recorder import Recorder

    session = _Session()
    recorder = Recorder(session)
    done = {"first": False}

    def settle(aggregate, final_deadline):
        if done[aggregate.phase] or final_deadline is not None:
            aggregate.attributes["settled_final"] = final_deadline is not None
            return True
        return False

    recorder.add("first", None, None, 1, 0, 1, 0, 0, on_add=lambda a: setattr(a, "settle", settle))
    aggregate = recorder._take(None)[0]
    recorder.emit(aggregate, None)
    assert session.spans == []  # held, nothing waited
    recorder.settle_held()
    assert session.spans == []
    done["first"] = True
    recorder.flush_children(1, None)  # any container end looks again
    assert session.spans == [("first", {**session.spans[0][1]})] and session.spans[0][1]["settled_final"] is False
    # At the end of the start-up, a held aggregate is written whatever happens.
    done["first"] = False
    recorder.add("first", None, None, 1, 0, 1, 0, 0, on_add=lambda a: setattr(a, "settle", settle))
    recorder.flush_all()
    assert len(session.spans) == 2 and session.spans[1][1]["settled_final"] is True


def test_scheduler_makes_no_event_when_the_gate_refuses():
    line = Timeline()
    Event = make_event_class(line)
    mark = _device_windows.Mark((0, "s"), "s", Event(enable_timing=True), line.host_ns)
    created = Event.created
    window, spare, timed = _device_windows.join(None, mark, lambda: Event(enable_timing=True),
                                                lambda call, *args: (False, None))
    assert window is None and spare is mark.event and not timed and Event.created == created



# --- through the real wrapper and session: a span end never waits; the work is written later ---

def test_queued_copies_through_the_wrapper_are_held_past_their_span_and_written_later(
        timeline, traced, monkeypatch):
    import otel_coldstart

    monkeypatch.setattr(tensor_ops, "_cuda_possible", True)
    monkeypatch.setattr(otel_coldstart.controller.CONTROLLER.startup, "cuda_up", True)
    stream = timeline.Stream(torch.device("cuda", 0))
    source = Described(torch.ones(1024), "cpu", pinned=True)
    result = Described(torch.ones(1024), "cuda:0")

    def queued_to(*args, **kwargs):  # Tensor.to(..., non_blocking=True): queued, returns at once
        timeline.queue(stream, 10 * MS)
        timeline.host_ns += 10_000
        return result

    wrapper = tensor_ops._tensor_move("to")
    with otel_coldstart.phase("shard"):
        for _ in range(3):
            assert wrapper(queued_to, source, ("cuda:0",), {"non_blocking": True}) is result
    # The shard's span ended with 30 ms of copies still queued: nothing waited (a stand-in
    # synchronize() raises), the aggregate is held.
    assert traced.by_phase(semconv.PHASE_H2D) == []
    timeline.host_ns += 50 * MS
    with otel_coldstart.phase("next_shard"):
        pass  # any later span end looks at held aggregates again
    (h2d,) = traced.by_phase(semconv.PHASE_H2D)
    assert h2d.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.030)
    assert h2d.attributes[semconv.CALLS] == 3 and h2d.attributes[semconv.COPY_PINNED_BYTES] == 3 * 4096
    assert h2d.parent.span_id == traced.named("coldstart.shard")[0].context.span_id
    # Copies still queued at ready(): a bounded poll, then written as unresolved.
    from otel_coldstart.recorder import Recorder

    monkeypatch.setattr(Recorder, "FINAL_SETTLE_S", 0.05)
    with otel_coldstart.phase("last_shard"):
        wrapper(queued_to, source, ("cuda:0",), {"non_blocking": True})
        timeline.queue(stream, 60_000 * MS)  # the device is busy for a minute
        wrapper(queued_to, source, ("cuda:0",), {"non_blocking": True})
    otel_coldstart.ready()
    last = [s for s in traced.by_phase(semconv.PHASE_H2D) if s is not h2d and s.attributes[semconv.CALLS] == 2]
    assert len(last) == 1 and last[0].attributes[semconv.COPY_ASYNC_UNRESOLVED] is True
    assert semconv.COPY_ASYNC_S not in last[0].attributes


def test_an_aggregate_ending_after_the_start_up_ended_is_not_held_forever():
    """A span ending on another thread while the start-up ends: its aggregate must not be
    held after the end's flush has passed (nobody would write it)."""
    from otel_coldstart.recorder import Recorder

    session = _Session()
    recorder = Recorder(session)
    recorder.add("late", None, None, 1, 0, 1, 0, 0,
                 on_add=lambda a: setattr(a, "settle", lambda agg, deadline: deadline is not None))
    aggregate = recorder._take(None)[0]
    session.ended = True
    recorder.emit(aggregate, None)
    assert [phase for phase, _ in session.spans] == ["late"]


@pytest.mark.parametrize("source_device, destination_device, stream_device", [
    ("cuda:0", "cuda:1", 0),  # cross-GPU copy_: Copy.cu queues it on the source device's stream
    ("cuda:1", "cpu", 1),  # D2H: the source device's stream
    ("cpu", "cuda:1", 1),  # H2D: the destination device's stream
])
def test_copy_is_timed_on_the_stream_copy_cu_uses(timeline, traced, monkeypatch, source_device,
                                                   destination_device, stream_device):
    import otel_coldstart

    monkeypatch.setattr(tensor_ops, "_cuda_possible", True)
    monkeypatch.setattr(otel_coldstart.controller.CONTROLLER.startup, "cuda_up", True)
    source = Described(torch.ones(256), source_device, pinned=True)
    destination = Described(torch.empty(256), destination_device, pinned=True)
    keys = []
    real_mark = tensor_ops._mark

    def mark(device):
        made = real_mark(device)
        keys.append(made.key)
        return made

    monkeypatch.setattr(tensor_ops, "_mark", mark)
    with otel_coldstart.phase("copies"):
        tensor_ops._tensor_copy(lambda *a, **k: destination, destination, (source, True), {})
    assert keys == [(stream_device, stream_device)]  # (device index, stream id of the stand-in)
    timeline.host_ns += 100 * MS
    otel_coldstart.ready()
    (span,) = [s for s in traced.spans() if s.attributes.get(semconv.AGGREGATE)]
    assert semconv.COPY_ASYNC_S in span.attributes


# --- bandwidth: from device time, never from the launch time of queued work (finding 1) ---------

def test_resolved_queued_copies_get_their_bandwidth_from_device_time_not_busy_time(timeline):
    aggregate = _aggregate(timeline)
    for _ in range(4):
        _timed_call(timeline, aggregate, 250_000_000, 5 * MS, host_ns=20_000)  # 1 GB in 20 ms of device time
    timeline.host_ns += 100 * MS
    assert aggregate.settle(aggregate, None)
    attrs = aggregate.span_attributes()
    # Launch speed would be 1 GB / 80 us = 12.5 TB/s; the copies took 20 ms on the device.
    assert attrs[semconv.THROUGHPUT] == pytest.approx(1e9 / 0.020, rel=1e-3)


def test_work_unresolved_at_the_end_has_no_bandwidth(timeline):
    """Still queued after the bounded wait: its busy time is launch time, so no figure."""
    aggregate = _aggregate(timeline)
    _timed_call(timeline, aggregate, 1_000_000_000, 60_000 * MS, host_ns=20_000)
    import time as real_time

    assert aggregate.settle(aggregate, real_time.monotonic() + 0.02)
    attrs = aggregate.span_attributes()
    assert attrs[semconv.COPY_ASYNC_UNRESOLVED] is True and semconv.THROUGHPUT not in attrs


def test_calls_without_events_leave_no_device_time_and_no_bandwidth(timeline):
    """Every call made while a capture was open: no window, so no device time of 0 s and no
    bandwidth of bytes over launch time, only the count of untimed calls."""
    aggregate = _aggregate(timeline)
    _guard.capture_started()
    try:
        for _ in range(2):
            _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
    finally:
        _guard.capture_ended()
    assert aggregate.settle(aggregate, None)
    attrs = aggregate.span_attributes()
    assert attrs[semconv.COPY_UNTIMED_CALLS] == 2
    assert semconv.COPY_ASYNC_S not in attrs and semconv.THROUGHPUT not in attrs


def test_some_calls_untimed_keep_the_device_time_of_the_others_but_no_bandwidth(timeline):
    aggregate = _aggregate(timeline)
    _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
    _guard.capture_started()
    try:
        _timed_call(timeline, aggregate, 1_000_000, 10 * MS)
    finally:
        _guard.capture_ended()
    timeline.host_ns += 100 * MS
    assert aggregate.settle(aggregate, None)
    attrs = aggregate.span_attributes()
    assert attrs[semconv.COPY_ASYNC_S] == pytest.approx(0.010) and attrs[semconv.COPY_UNTIMED_CALLS] == 1
    assert semconv.THROUGHPUT not in attrs  # half its bytes have no known time


def test_synchronous_aggregates_keep_bytes_over_busy_time():
    aggregate = Aggregate(semconv.PHASE_H2D, None, None, {})
    aggregate.bytes, aggregate.busy_ns = 1_000_000, 1 * MS
    assert aggregate.span_attributes()[semconv.THROUGHPUT] == pytest.approx(1e9)
    aggregate.non_blocking_calls = 1  # queued on a device without events: launch time
    assert semconv.THROUGHPUT not in aggregate.span_attributes()
