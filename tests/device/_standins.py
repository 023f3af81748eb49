"""Stand-ins for a GPU on a CPU-only machine, shared by the device tests and the CPU runs of
scripts/gpu_check.py's checks and negative controls.

- :class:`Timeline`: device streams and a host clock; work executes in queue order per stream.
- :func:`make_event_class`: a CUDA event on that timeline (completes when the work queued
  before it has); its ``synchronize()`` raises (any host wait fails the test) or, for the
  runs that measure what a host wait costs, moves the host clock to the event.
- :class:`Described`: a tensor as the recording path reads it (device, dtype, layout,
  pinning), a real host tensor's facts with the device it would be on.
"""

from __future__ import annotations

import torch

MS = 1_000_000


class HostWaited(AssertionError):
    pass


class Timeline:
    """Device streams and a host clock; when each stream is done with what was queued."""

    def __init__(self) -> None:
        self.host_ns = 1_000 * MS
        self.free_at_ns: dict = {}  # stream -> when its queued work ends

    def queue(self, stream, duration_ns: int) -> None:
        self.free_at_ns[stream] = max(self.free_at_ns.get(stream, 0), self.host_ns) + duration_ns

    def wait_for(self, stream) -> None:
        """A blocking call on ``stream``: the host waits until its queued work is done."""
        self.host_ns = max(self.host_ns, self.free_at_ns.get(stream, 0))

    def time_ns(self) -> int:
        return self.host_ns


def make_event_class(line: Timeline, host_waits: bool = False):
    class StandInEvent:
        created = 0

        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing, "elapsed_time needs timing events"
            type(self).created += 1
            self.done_at_ns = None

        def record(self, stream=None) -> None:
            self.done_at_ns = max(line.free_at_ns.get(stream, 0), line.host_ns)

        def query(self) -> bool:
            return line.host_ns >= self.done_at_ns

        def synchronize(self) -> None:
            if not host_waits:
                raise HostWaited("a host wait was added")
            line.host_ns = max(line.host_ns, self.done_at_ns)

        def elapsed_time(self, end: StandInEvent) -> float:
            if not (self.query() and end.query()):
                raise RuntimeError("elapsed_time on an event that has not completed")
            return (end.done_at_ns - self.done_at_ns) / MS

    return StandInEvent


class TimelineStream:
    """``torch.cuda.current_stream(device)`` on the timeline: one stream per device index."""

    def __init__(self, device) -> None:
        self.stream_id = getattr(device, "index", device) or 0

    def __eq__(self, other):
        return isinstance(other, TimelineStream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(self.stream_id)


def open_gate(call, *args):
    return True, call(*args)


class Described:
    """A tensor as the wrappers read it, on the device it would be on (no GPU here)."""

    def __init__(self, real: torch.Tensor, device: str, pinned: bool = False) -> None:
        self._real, self._pinned = real, pinned
        self.device = torch.device(device)
        self.is_cpu, self.is_cuda = self.device.type == "cpu", self.device.type == "cuda"
        self.dtype, self.shape, self.layout = real.dtype, real.shape, real.layout
        self.nbytes = real.nbytes
        self.pinned_asked = 0

    def numel(self):
        return self._real.numel()

    def element_size(self):
        return self._real.element_size()

    def is_contiguous(self):
        return self._real.is_contiguous()

    def stride(self):
        return self._real.stride()

    def is_pinned(self):
        self.pinned_asked += 1
        return self._pinned


class DescribedStorage:
    """An ``UntypedStorage`` as ``UntypedStorage.to`` is read (torch.load(map_location=...))."""

    def __init__(self, nbytes: int, device: str, pinned: bool = False) -> None:
        self._nbytes, self._pinned = nbytes, pinned
        self.device = torch.device(device)

    def nbytes(self):
        return self._nbytes

    def is_pinned(self):
        return self._pinned


def stand_in_cuda_runtime(patch) -> dict:
    """torch's CUDA entry points with stand-ins that take real time, set with ``patch`` (a
    monkeypatch): the device count (the driver's start, ``cudaGetDeviceCount``, 0.15 s) and
    ``_lazy_init`` (0.1 s). The plugin is uninstrumented first: instrument() afterwards puts
    the real wrappers on top. Returns the stand-ins' state."""
    import time

    import otel_coldstart
    from otel_coldstart.patches import runtime

    state = {"driver_started": False, "initialised": False, "count_calls": 0, "init_calls": 0}

    def get_device_count():
        state["count_calls"] += 1
        if not state["driver_started"]:
            time.sleep(0.15)  # cuInit
            state["driver_started"] = True
        return 1

    def lazy_init():
        state["init_calls"] += 1
        if not state["initialised"]:
            torch._C._cuda_getDeviceCount()  # torch's own init asks too: part of this span
            time.sleep(0.1)
            state["initialised"] = True

    otel_coldstart.uninstrument()
    patch.setattr(runtime, "_initialised_seen", False)
    patch.setattr(runtime, "_driver_seen", False)
    patch.setattr(runtime, "_driver_loaded", lambda: False)
    patch.setattr(torch._C, "_cuda_getDeviceCount", get_device_count, raising=False)
    patch.setattr(torch.cuda, "_lazy_init", lazy_init)
    patch.setattr(torch.cuda, "is_initialized", lambda: state["initialised"])
    return state
