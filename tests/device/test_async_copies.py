"""Asynchronous device work (non-blocking copies, GPU casts, device-to-device copies) is timed
from CUDA events without ever blocking the host. No GPU here, so a stand-in event runs on a
simulated device timeline (work executes in queue order per stream, an event completes when
the work queued before it has). Its ``synchronize()`` raises: any host wait added anywhere
fails the test."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

from _standins import MS, Described, Timeline, TimelineStream, make_event_class, open_gate
from otel_coldstart import semconv, session as _session
from otel_coldstart.patches import _device_windows, _guard, tensor_ops
from otel_coldstart.recorder import Aggregate

# --- the pure scheduler --------------------------------------------------------------------------

def _window(stream="s0", key=None):
    return _device_windows.StreamWindow(key or (0, stream), stream)


def _queue_call(line, Event, window, work, device_ns, host_ns=10_000, nbytes=1, before_ns=0):
    """One call queuing ``device_ns`` of work on ``window``'s stream; ``before_ns`` of host
    work inside the call before the work reaches the stream."""
    mark_event = Event(enable_timing=True)
    mark_event.record(window.stream)
    mark = _device_windows.Mark(window, mark_event, line.host_ns)
    start = line.host_ns
    line.host_ns += before_ns
    line.queue(window.stream, device_ns)
    line.host_ns += host_ns
    return _device_windows.join(work, mark, nbytes, start, line.host_ns, lambda: Event(enable_timing=True),
                                open_gate)


def test_scheduler_resolves_by_query_only_and_waits_for_nothing():
    line = Timeline()
    Event = make_event_class(line)
    window, work = _window(), _device_windows.DeviceWork()
    for _ in range(3):
        _queue_call(line, Event, window, work, 10 * MS)
    assert _device_windows.try_resolve(work, open_gate) is None  # still queued: not resolved, no wait
    line.host_ns += 30 * MS
    resolution = _device_windows.try_resolve(work, open_gate)
    assert resolution.device_ns == pytest.approx(30 * MS, abs=100_000)


def test_scheduler_closes_segments_over_host_gaps():
    line = Timeline()
    Event = make_event_class(line)
    window, work = _window(), _device_windows.DeviceWork()
    start = line.host_ns
    _queue_call(line, Event, window, work, 10 * MS)
    line.host_ns += 50 * MS  # the host reads the next shard; the device is idle
    _queue_call(line, Event, window, work, 10 * MS)
    assert len(window.spares) == 1  # the closed segment's start event is kept for re-use
    line.host_ns += 100 * MS
    resolution = _device_windows.try_resolve(work, open_gate)
    assert resolution.device_ns == pytest.approx(20 * MS, abs=100_000)
    # The work ends when the last of it finished: 10 ms, idle until 50 ms, 10 ms more.
    assert resolution.last_end_ns == pytest.approx(start + 60 * MS + 10_000, abs=100_000)


def test_scheduler_streams_of_one_device_add_and_devices_overlap():
    line = Timeline()
    Event = make_event_class(line)
    work = _device_windows.DeviceWork()
    _queue_call(line, Event, _window("a", (0, "a")), work, 10 * MS)
    _queue_call(line, Event, _window("b", (0, "b")), work, 20 * MS)
    _queue_call(line, Event, _window("c", (1, "c")), work, 5 * MS)
    line.host_ns += 100 * MS
    assert _device_windows.try_resolve(work, open_gate).device_ns == pytest.approx(30 * MS, abs=100_000)


def test_scheduler_bounded_final_wait_polls_then_gives_up():
    line = Timeline()
    Event = make_event_class(line)
    work = _device_windows.DeviceWork()
    _queue_call(line, Event, _window(), work, 10_000 * MS)  # ten device seconds queued
    clock = [0.0]
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        clock[0] += seconds
        line.host_ns += int(seconds * 1e9)

    assert _device_windows.resolve_bounded(work, open_gate, 0.5, clock=lambda: clock[0], sleep=sleep) is None
    assert clock[0] == pytest.approx(0.5, abs=0.01) and len(polls) >= 100
    # Work that finishes inside the bound is resolved.
    work = _device_windows.DeviceWork()
    _queue_call(line, Event, _window("s1"), work, 100 * MS)
    clock[0] = 0.0
    resolution = _device_windows.resolve_bounded(work, open_gate, 0.5, clock=lambda: clock[0], sleep=sleep)
    assert resolution.device_ns == pytest.approx(100 * MS, abs=1 * MS)


def test_scheduler_refused_gate_never_calls_events():
    line = Timeline()
    Event = make_event_class(line)
    work = _device_windows.DeviceWork()
    _queue_call(line, Event, _window(), work, 10 * MS)
    line.host_ns += 100 * MS
    calls = []

    def closed_gate(call, *args):
        calls.append(call)
        return False, None

    assert _device_windows.try_resolve(work, closed_gate) is None
    assert len(calls) == 1  # asked once, refused, nothing further attempted


def test_scheduler_failed_elapsed_time_leaves_the_calls_untimed():
    class Broken:
        def query(self):
            return True

        def elapsed_time(self, other):
            raise RuntimeError("events on different devices")

        def record(self, stream=None):
            pass

    window, work = _window(), _device_windows.DeviceWork()
    mark = _device_windows.Mark(window, Broken(), 0)
    assert _device_windows.join(work, mark, 1, 0, 1, Broken, open_gate)
    resolution = _device_windows.try_resolve(work, open_gate)
    assert resolution.device_ns == 0 and work.untimed_calls == 1 and not work.open


def test_two_threads_sharing_a_stream_share_its_time_not_double_it():
    """Finding 4: events measure a stream. Two aggregates (two threads) queuing on one stream
    used to get a window each over the whole stream: up to twice its device time in all."""
    line = Timeline()
    Event = make_event_class(line)
    window = _window()
    first, second = _device_windows.DeviceWork(), _device_windows.DeviceWork()
    for _ in range(4):  # interleaved, as two loader threads on the default stream do
        _queue_call(line, Event, window, first, 10 * MS, nbytes=1000)
        _queue_call(line, Event, window, second, 10 * MS, nbytes=1000)
    line.host_ns += 200 * MS
    a = _device_windows.try_resolve(first, open_gate).device_ns
    b = _device_windows.try_resolve(second, open_gate).device_ns
    assert a + b == pytest.approx(80 * MS, abs=200_000)  # the stream's time, once
    assert a == pytest.approx(40 * MS, abs=200_000) and b == pytest.approx(40 * MS, abs=200_000)


def test_idle_start_of_a_window_is_not_device_time():
    """Finding 7: the host's work inside a call before its copy reaches an idle stream (a
    contiguous temporary made first) is not device time."""
    line = Timeline()
    Event = make_event_class(line)
    window, work = _window(), _device_windows.DeviceWork()
    _queue_call(line, Event, window, work, 10 * MS, before_ns=5 * MS)
    line.host_ns += 50 * MS
    _queue_call(line, Event, window, work, 10 * MS, before_ns=3 * MS)  # a new segment, idle start too
    line.host_ns += 50 * MS
    assert _device_windows.try_resolve(work, open_gate).device_ns == pytest.approx(20 * MS, abs=100_000)


def test_event_pool_is_bounded():
    line = Timeline()
    Event = make_event_class(line)
    window = _window()
    for _ in range(3 * _device_windows.SPARES):
        window.give_back(Event(enable_timing=True))
    assert len(window.spares) == _device_windows.SPARES


def test_gate_makes_event_calls_in_relaxed_capture_mode(monkeypatch):
    """Finding 6: a capture we did not see (another thread, global mode) must not meet an
    event call of ours: each is made with this thread's capture mode relaxed, then restored."""
    modes = [0]

    def exchange(mode):
        previous, modes[0] = modes[0], mode
        return previous

    monkeypatch.setattr(_device_windows, "_exchange_capture_mode", exchange)
    seen = []
    assert _device_windows.gate(lambda: seen.append(modes[0]) or "done") == (True, "done")
    assert seen == [_device_windows.CAPTURE_MODE_RELAXED] and modes == [0]
    _guard.capture_started()
    try:
        assert _device_windows.gate(lambda: seen.append("called")) == (False, None)
    finally:
        _guard.capture_ended()
    assert seen == [_device_windows.CAPTURE_MODE_RELAXED]


def test_capture_mode_binding_without_a_cuda_driver_is_none():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        driver = True
    except OSError:  # PyPI's CUDA build on a machine without a driver (a CPU CI runner)
        driver = False
    bound = _device_windows._bind_capture_mode()
    if torch.version.cuda is None or not driver:
        assert bound is None  # a CPU build, or no driver: the gate alone
    else:  # pragma: no cover - a CUDA build and its driver: the exchange, which hands back the mode
        assert callable(bound)


# --- tensor_ops over the scheduler: marks, joins, settle, held aggregates -----------------------

@pytest.fixture
def timeline(monkeypatch):
    line = Timeline()
    Event = make_event_class(line)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: TimelineStream(device))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(tensor_ops, "time", line)
    monkeypatch.setattr(_device_windows, "_clock_ns", line.time_ns)
    registry: dict = {}
    monkeypatch.setattr(_device_windows, "windows", lambda: registry)
    line.Event = Event
    line.Stream = TimelineStream
    line.windows = registry
    yield line


def _timed_call(line, aggregate, nbytes, device_ns, host_ns=10_000, device_index=0):
    """What the wrappers do around one call whose device work is asynchronous."""
    device = torch.device("cuda", device_index)
    mark = _device_windows.mark(device)
    start = line.host_ns
    line.host_ns += host_ns  # the call launches its work as it returns
    line.queue(line.Stream(device), device_ns)
    aggregate.calls += 1
    aggregate.bytes += nbytes
    aggregate.busy_ns += host_ns
    aggregate.last_ns = line.host_ns
    _device_windows.join_call(aggregate, mark, nbytes, start, line.host_ns)


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
    assert aggregate.last_ns == pytest.approx(aggregate.first_ns + 10_000 + 30 * MS, abs=1)  # launched, then 30 ms
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
        assert _device_windows.mark(torch.device("cuda", 0)) is None
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
    assert set(timeline.windows) == {(0, 0), (1, 1)}
    timeline.host_ns += 100 * MS
    assert aggregate.settle(aggregate, None)
    assert aggregate.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.010)  # two devices in parallel


def test_blocking_copy_after_a_queued_gpu_cast_is_not_charged_the_cast(timeline, traced):  # tails: per start-up
    """A blocking H2D synchronises its stream: the host's time for it includes the cast queued
    before it. Bracketed by events, the copy keeps its own device time and the wait is reported."""
    device = torch.device("cuda", 0)
    cast = _aggregate(timeline, semconv.PHASE_CAST)
    _timed_call(timeline, cast, 1_000_000, 80 * MS)  # an asynchronous GPU cast, 80 ms of device work
    bracket = _device_windows.mark_blocking(device)
    assert bracket is not None
    start = timeline.host_ns
    timeline.queue(timeline.Stream(device), 5 * MS)  # the copy itself, after the cast
    timeline.host_ns = timeline.free_at_ns[timeline.Stream(device)]  # the blocking call returns then
    copy = _device_windows.finish_blocking(bracket, start, timeline.host_ns)
    h2d = _aggregate(timeline)
    h2d.busy_ns = timeline.host_ns - start
    _device_windows.add_blocking(h2d, copy)
    assert h2d.settle(h2d, None)
    h2d.run_end_hooks()
    assert h2d.busy_ns == pytest.approx(5 * MS, abs=100_000)
    assert h2d.attributes[semconv.COPY_WAITED_S] == pytest.approx(0.080 - 10e-6, abs=2e-4)
    assert cast.settle(cast, None) and cast.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.080)


def test_blocking_copy_asks_no_elapsed_time_before_its_events_completed(timeline):
    """Finding 3: ``after`` is recorded once the blocking call returned, and completes a little
    later (or behind another thread's work on the stream): CUDAEvent refuses elapsed_time
    until both events completed. It is asked at settle, after query() says so."""
    device = torch.device("cuda", 0)
    cast = _aggregate(timeline, semconv.PHASE_CAST)
    _timed_call(timeline, cast, 1_000_000, 80 * MS)
    bracket = _device_windows.mark_blocking(device)
    start = timeline.host_ns
    stream = timeline.Stream(device)
    timeline.queue(stream, 5 * MS)
    timeline.host_ns = timeline.free_at_ns[stream]  # the copy returns
    timeline.queue(stream, 2 * MS)  # another thread queues work before ``after`` is recorded
    copy = _device_windows.finish_blocking(bracket, start, timeline.host_ns)  # must not raise nor lose it
    h2d = _aggregate(timeline)
    h2d.busy_ns = timeline.host_ns - start
    _device_windows.add_blocking(h2d, copy)
    assert h2d.settle(h2d, None) is False  # ``after`` not complete yet: held, nothing waited
    timeline.host_ns += 10 * MS
    assert h2d.settle(h2d, None)
    h2d.run_end_hooks()
    assert semconv.COPY_WAITED_S in h2d.attributes  # the wait is kept, not dropped


def test_blocking_copy_with_nothing_queued_takes_no_event(timeline):
    created = timeline.Event.created
    assert _device_windows.mark_blocking(torch.device("cuda", 0)) is None and timeline.Event.created == created


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
    # Switch threads every 0.1 ms, not every 5: more interleavings, and the capture loop gets the
    # GIL back from three spinning copiers at once (26 s on a busy 2-core machine at 5 ms).
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
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
        sys.setswitchinterval(switch_interval)
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
    window, work = _window(), _device_windows.DeviceWork()
    mark = _device_windows.Mark(window, Event(enable_timing=True), line.host_ns)
    created = Event.created
    timed = _device_windows.join(work, mark, 1, 0, 1, lambda: Event(enable_timing=True),
                                 lambda call, *args: (False, None))
    assert not timed and window.spares == [mark.event] and Event.created == created and work.untimed_calls == 1



# --- through the real wrapper and session: a span end never waits; the work is written later ---

def test_queued_copies_through_the_wrapper_are_held_past_their_span_and_written_later(
        timeline, traced, monkeypatch):
    import otel_coldstart

    monkeypatch.setattr(tensor_ops, "_cuda_possible", True)
    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", True)
    stream = timeline.Stream(torch.device("cuda", 0))
    source = Described(torch.ones(1024), "cpu", pinned=True)
    result = Described(torch.ones(1024), "cuda:0")

    def queued_to(*args, **kwargs):  # Tensor.to(..., non_blocking=True): queued, returns at once
        timeline.host_ns += 10_000
        timeline.queue(stream, 10 * MS)  # queued as it returns
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
    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", True)
    source = Described(torch.ones(256), source_device, pinned=True)
    destination = Described(torch.empty(256), destination_device, pinned=True)
    keys = []
    real_mark = _device_windows.mark

    def mark(device):
        made = real_mark(device)
        keys.append(made.window.key)
        return made

    monkeypatch.setattr(_device_windows, "mark", mark)
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


# --- the second part of issue 23: no-op moves, casts between GPUs, captures we did not see -------

def test_a_no_op_to_on_a_cuda_tensor_records_no_event(timeline, traced, monkeypatch):
    """Finding 8: ``.to()`` to the device and dtype a CUDA tensor has returns it; known before
    the call, so no event is made or recorded and nothing is counted."""
    import otel_coldstart

    monkeypatch.setattr(tensor_ops, "_cuda_possible", True)
    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", True)
    recorded = []
    real_record = timeline.Event.record
    monkeypatch.setattr(timeline.Event, "record", lambda self, stream=None: recorded.append(stream) or real_record(
        self, stream))
    tensor = Described(torch.ones(16), "cuda:0")
    for method, args, kwargs in (("to", ("cuda:0",), {}), ("to", (torch.float32,), {"non_blocking": True}),
                                 ("cuda", (0,), {}), ("float", (), {}), ("to", ("cuda:0", torch.float32), {})):
        wrapper = tensor_ops._tensor_move(method)
        with otel_coldstart.phase("noop"):
            assert wrapper(lambda *a, **k: tensor, tensor, args, kwargs) is tensor
    assert recorded == [] and timeline.Event.created == 0
    # A real move still is timed.
    half = Described(torch.ones(16, dtype=torch.float16), "cuda:0")
    with otel_coldstart.phase("casting"):
        tensor_ops._tensor_move("half")(lambda *a, **k: half, tensor, (), {})
    assert len(recorded) == 2  # the mark before, the end event after


def test_a_cast_between_gpus_is_timed_on_the_destination_stream(timeline, traced, monkeypatch):
    """Without peer access Copy.cu copies on the source's stream, then casts on the
    destination's: only an end event there completes after all of it."""
    import otel_coldstart

    monkeypatch.setattr(tensor_ops, "_cuda_possible", True)
    monkeypatch.setattr(_session.ACTIVE.state(tensor_ops.__name__, tensor_ops._CudaSeen), "up", True)
    keys = []
    real_mark = _device_windows.mark
    monkeypatch.setattr(_device_windows, "mark", lambda device: keys.append(device.index) or real_mark(device))
    source = Described(torch.ones(64), "cuda:0")
    cast = Described(torch.ones(64, dtype=torch.float16), "cuda:1")
    same = Described(torch.ones(64), "cuda:1")
    with otel_coldstart.phase("moves"):
        tensor_ops._tensor_move("to")(lambda *a, **k: cast, source, ("cuda:1", torch.float16), {})
        tensor_ops._tensor_copy(lambda *a, **k: cast, cast, (source,), {})
        tensor_ops._tensor_move("to")(lambda *a, **k: same, source, ("cuda:1",), {})  # no cast: the source's
    assert keys == [1, 1, 0]


def test_no_event_on_a_stream_captured_by_code_we_did_not_see(timeline, monkeypatch):
    """Finding 6: a capture begun with torch._C._CUDAGraph (or cupy) on the work's stream,
    which is not the current stream of the current device: no event is recorded into it."""
    class CapturingStream(TimelineStream):
        def is_capturing(self):
            return True

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: CapturingStream(device))
    assert _device_windows.mark(torch.device("cuda", 1)) is None
    assert timeline.Event.created == 0
