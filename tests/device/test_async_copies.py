"""Non-blocking copies are timed from CUDA events once per aggregate. No GPU here, so a
stand-in event runs on a simulated device timeline (copies execute in queue order, an event
completes when the work queued before it has), under the real helpers of tensor_ops."""

from __future__ import annotations

import pytest
import torch

from otel_coldstart import semconv
from otel_coldstart.patches import tensor_ops
from otel_coldstart.recorder import Aggregate

MS = 1_000_000


class Timeline:
    """One device stream: host clock, and when the device is done with what was queued."""

    def __init__(self) -> None:
        self.host_ns = 1_000 * MS
        self.free_at_ns = 0
        self.waits = 0

    def queue_copy(self, duration_ns: int) -> None:
        self.free_at_ns = max(self.free_at_ns, self.host_ns) + duration_ns

    def time_ns(self) -> int:
        return self.host_ns


@pytest.fixture
def timeline(monkeypatch):
    line = Timeline()

    class StandInEvent:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing, "elapsed_time needs timing events"
            self.done_at_ns = None

        def record(self, stream=None) -> None:
            self.done_at_ns = max(line.free_at_ns, line.host_ns)

        def query(self) -> bool:
            return line.host_ns >= self.done_at_ns

        def synchronize(self) -> None:
            line.waits += 1
            line.host_ns = max(line.host_ns, self.done_at_ns)

        def elapsed_time(self, end: "StandInEvent") -> float:
            return (end.done_at_ns - self.done_at_ns) / MS

    import torch

    monkeypatch.setattr(torch.cuda, "Event", StandInEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(tensor_ops, "time", line)
    yield line
    tensor_ops._local.__dict__.pop("spare_events", None)


def _copy(line: Timeline, aggregate: Aggregate, nbytes: int, device_ns: int, host_ns: int = 10_000) -> None:
    """What the Tensor.to wrapper does around one non-blocking copy."""
    start = tensor_ops._async_start(torch.device("cuda", 0))
    line.queue_copy(device_ns)
    line.host_ns += host_ns  # the call returns at once
    aggregate.bytes += nbytes
    aggregate.busy_ns += host_ns
    aggregate.last_ns = line.host_ns
    tensor_ops._join_async(aggregate, start, nbytes, host_ns)


def _aggregate(line: Timeline) -> Aggregate:
    aggregate = Aggregate(semconv.PHASE_H2D, None, None, {})
    aggregate.first_ns = line.host_ns
    return aggregate


def test_back_to_back_copies_are_one_window_waited_for_once(timeline):
    aggregate = _aggregate(timeline)
    for _ in range(3):
        _copy(timeline, aggregate, 1_000_000, 10 * MS)
    assert timeline.waits == 0  # nothing waits per tensor
    aggregate.run_end_hooks()
    assert timeline.waits == 1
    assert aggregate.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.030)
    assert aggregate.attributes[semconv.THROUGHPUT] == pytest.approx(3_000_000 / 0.030)
    assert aggregate.last_ns == pytest.approx(aggregate.first_ns + 30 * MS, abs=1)


def test_host_gaps_between_copies_do_not_count_as_copy_time(timeline):
    aggregate = _aggregate(timeline)
    _copy(timeline, aggregate, 1_000_000, 10 * MS)
    timeline.host_ns += 50 * MS  # the host reads the next shard; the device sits idle
    _copy(timeline, aggregate, 1_000_000, 10 * MS)
    _copy(timeline, aggregate, 1_000_000, 10 * MS)
    aggregate.run_end_hooks()
    assert aggregate.attributes[semconv.COPY_ASYNC_S] == pytest.approx(0.030)
    # The span ends when the last copy finished: 10 ms copy, idle until 50 ms, 20 ms of copies.
    assert aggregate.last_ns == pytest.approx(aggregate.first_ns + 70 * MS, abs=20_000)


def test_blocking_calls_in_the_same_aggregate_keep_their_own_time(timeline):
    aggregate = _aggregate(timeline)
    _copy(timeline, aggregate, 1_000_000, 10 * MS)
    aggregate.bytes += 1_000_000  # one blocking copy of 20 ms in the same aggregate
    aggregate.busy_ns += 20 * MS
    aggregate.run_end_hooks()
    assert aggregate.attributes[semconv.THROUGHPUT] == pytest.approx(2_000_000 / 0.030, rel=1e-3)


def test_no_device_timing_while_a_graph_capture_is_open(timeline):
    """A query or a wait from this thread could invalidate a capture running elsewhere."""
    from otel_coldstart.patches import _guard

    aggregate = _aggregate(timeline)
    _copy(timeline, aggregate, 1_000_000, 10 * MS)
    _guard.capture_started()
    try:
        assert tensor_ops._async_start(torch.device("cuda", 0)) is None
        aggregate.run_end_hooks()
    finally:
        _guard.capture_ended()
    assert timeline.waits == 0
    assert semconv.COPY_ASYNC_S not in aggregate.attributes
