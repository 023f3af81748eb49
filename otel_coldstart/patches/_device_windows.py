"""Device time of queued work, read from event-like objects without ever blocking the host.

Pure scheduling logic over anything with CUDA-event methods (``record(stream)``,
``query()``, ``elapsed_time(other)``), so it is tested with stand-in events on a CPU.
``synchronize()`` is never called: a wait here would stall the host thread that queued the
copies (``Module.to(..., non_blocking=True)`` would return only once every copy finished,
and a shard's ``safe_open.__exit__`` would wait for that shard's copies, killing the overlap
between reading the next shard and copying the previous one).

Every event call goes through ``gate(call, *args) -> (ran, result)``: the caller's guard
that refuses (``ran=False``) while a CUDA graph capture may be open anywhere in the process,
atomically with the capture's start (patches/_guard.py).

A window is the timed work of one aggregate on one (device, stream). It runs in segments:
from the start event recorded before a call to the end event re-recorded after each later
call, as long as the stream stayed busy. When a new call finds the previous work already
done (``query()``, no wait), the stream went idle in between (the host was reading the next
shard): that segment is closed and summed, so host gaps never count as device time.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

Gate = Callable[..., "tuple[bool, Any]"]

# At the end of the start-up (ready() or exit), work still queued is waited for by polling
# query() until a deadline the recorder sets (Recorder.FINAL_SETTLE_S, for all held
# aggregates together): ready() returns at most that much later, and only when copies queued
# before it are still running (the first request would wait for them anyway: same stream).
# Past it, the aggregate keeps its host timing and is marked unresolved.
_POLL_S = 0.001


class Mark(NamedTuple):
    """An event recorded on a stream just before a call, and the host clock then."""

    key: Any  # (device index, stream id)
    stream: Any
    event: Any
    wall_ns: int


class DeviceWindow:
    __slots__ = ("stream", "start_event", "segment_start_ns", "end_event", "device_ns", "calls", "broken")

    def __init__(self, mark: Mark, end_event) -> None:
        self.stream = mark.stream
        self.start_event = mark.event
        self.segment_start_ns = mark.wall_ns
        self.end_event = end_event
        self.device_ns = 0  # closed segments
        self.calls = 0
        self.broken = False  # an event call failed: this window's timing cannot be trusted


def join(window: DeviceWindow | None, mark: Mark, new_event: Callable[[], Any], gate: Gate):
    """Add one call, already queued after ``mark``, to its window (created if None).

    Returns ``(window, spare, timed)``: the window (None when none could be created: the
    gate refused), the event the caller may re-use for its next mark (None when the window
    took it), and whether this call is covered by events."""
    if window is None:
        ran, end_event = gate(new_event)  # creating an event is a CUDA call too
        if not ran:
            return None, mark.event, False
        window = DeviceWindow(mark, end_event)
        spare = None
    elif window.broken:
        window.calls += 1
        return window, mark.event, False
    else:
        try:
            return _join_existing(window, mark, gate)
        except Exception:
            window.broken = True  # e.g. elapsed_time across devices: the window's figure is lost
            window.calls += 1
            return window, mark.event, False
    ran, _ = gate(window.end_event.record, window.stream)
    window.calls += 1
    return window, spare, ran


def _join_existing(window: DeviceWindow, mark: Mark, gate: Gate):
    spare = mark.event  # unless the window takes it: still busy (or unknown), the segment stays open
    ran, done = gate(window.end_event.query)
    if ran and done:
        # The stream finished everything queued before this call: close that segment and
        # open the next one at the mark recorded just before this call.
        ran, elapsed_ms = gate(window.start_event.elapsed_time, window.end_event)
        if ran:
            window.device_ns += int(elapsed_ms * 1e6)
            spare, window.start_event = window.start_event, mark.event
            window.segment_start_ns = mark.wall_ns
    ran, _ = gate(window.end_event.record, window.stream)
    window.calls += 1
    return window, spare, ran


class Resolution(NamedTuple):
    device_ns: int  # device time of the timed work (devices in parallel: the longest)
    last_end_ns: int  # host clock estimate of when the last timed work finished


def try_resolve(windows, gate: Gate) -> Resolution | None:
    """The windows' device time if all their work has finished, else None (nothing waits)."""
    per_device: dict[Any, int] = {}
    last_end_ns = 0
    for key, window in windows.items():
        if window.broken:
            continue
        try:
            ran, done = gate(window.end_event.query)
            if not ran or not done:
                return None
            ran, elapsed_ms = gate(window.start_event.elapsed_time, window.end_event)
        except Exception:
            window.broken = True  # its calls are reported as untimed
            continue
        if not ran:
            return None
        last_segment_ns = int(elapsed_ms * 1e6)
        device = key[0] if isinstance(key, tuple) else key
        # Streams of one device: summed (one thread used them in turn); devices: in parallel.
        per_device[device] = per_device.get(device, 0) + window.device_ns + last_segment_ns
        last_end_ns = max(last_end_ns, window.segment_start_ns + last_segment_ns)
    return Resolution(max(per_device.values(), default=0), last_end_ns)


def resolve_bounded(windows, gate: Gate, deadline: float,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> Resolution | None:
    """End of the start-up: poll until the work finished or ``clock()`` reaches ``deadline``
    (None then). Never a synchronize: the host sleeps, the device keeps going."""
    while True:
        resolution = try_resolve(windows, gate)
        if resolution is not None or clock() >= deadline:
            return resolution
        sleep(_POLL_S)


def blocking_call_device_ns(before, after, gate: Gate) -> int | None:
    """Device time of one blocking copy bracketed by two events on its stream.

    A blocking copy synchronises its stream, so the host's time for it includes waiting for
    whatever was queued before (an asynchronous cast, say). ``before`` completes when that
    earlier work has; ``after``, recorded once the call returned, right after the copy. Both
    are complete when this is asked: no wait."""
    ran, elapsed_ms = gate(before.elapsed_time, after)
    return int(elapsed_ms * 1e6) if ran else None
