"""Device time of queued work, read from CUDA events without ever blocking the host.

The per-call patches (tensor_ops) ask two things of this module: :func:`mark` before a call
whose device work is asynchronous (a non-blocking copy, a GPU cast, a device-to-device copy),
and :func:`join` once it returned; :func:`settle` reads the result when the aggregate ends.
A blocking copy behind queued work is bracketed by :func:`mark_blocking` /
:func:`finish_blocking`. ``synchronize()`` is never called: a wait here would stall the host
thread that queued the copies (``Module.to(..., non_blocking=True)`` would return only once
every copy finished, and a shard's ``safe_open.__exit__`` would wait for its copies).

**Windows per (device, stream), shared by threads.** Events measure a stream, not a thread:
one :class:`StreamWindow` per (device, stream) per start-up (``session.state``, :func:`windows`),
whatever thread queues work there. It runs in segments: from the event recorded before the
call that opened it to its end event, re-recorded after each later call, as long as the
stream stayed busy. When a new call (or a settle) finds the end event already done
(``query()``, no wait), the stream went idle: the segment is closed and its device time
shared among the aggregates that queued work in it, in proportion to their bytes (an
approximation: a thread's cast and another's copy in one segment are not told apart), so
threads sharing a stream never each get its whole time. Host gaps never count; neither does
the idle start of a segment (the host's own work inside the call before its copy reached
the stream, e.g. making a contiguous temporary): the segment's first call is assumed to
reach the stream when it returns, after the previous segment ended.

**Never against a capture.** Every event call goes through :func:`gate`: refused
(``ran=False``) while a CUDA graph capture we saw is open anywhere (patches/_guard.py,
atomic with the capture's start), and made with this thread's stream-capture mode set to
*relaxed* (``cuThreadExchangeStreamCaptureMode``, what torch's CUDAStreamCaptureModeGuard
does): a capture begun by code we did not see (``torch._C._CUDAGraph`` used directly,
cupy, cuda-python) on another thread in ``global`` mode neither fails our call nor is
invalidated by it. A stream that is itself capturing gets no event (:func:`mark`).

Events come from a bounded pool per window (:data:`SPARES`), dropped with the start-up.
"""

from __future__ import annotations

import threading
import time
from collections import namedtuple
from collections.abc import Callable
from typing import Any

from .. import semconv
from ..recorder import ASYNC_WORK
from . import _guard

Gate = Callable[..., "tuple[bool, Any]"]

# At the end of the start-up (ready() or exit), work still queued is waited for by polling
# query() until a deadline the recorder sets (Recorder.FINAL_SETTLE_S, for all held
# aggregates together). Past it, the aggregate keeps its host timing and is marked unresolved.
_POLL_S = 0.001
SPARES = 4  # events kept for re-use per (device, stream); more are released
# cudaStreamCaptureMode / CUstreamCaptureMode
CAPTURE_MODE_RELAXED = 2
# Aggregate.extras keys
WORK = "device_work"
BLOCKING = "blocking_copies"


# --- the gate: captures seen (the lock) and unseen (relaxed capture mode) -----------------------

def _bind_capture_mode():
    """``exchange(mode) -> previous mode | None`` through the CUDA driver, or None (no CUDA
    driver, ROCm: there the gate is all we have)."""
    try:
        import ctypes
        import sys

        import torch

        if not getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None):
            return None
        library = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
        exchange_mode = library.cuThreadExchangeStreamCaptureMode
        exchange_mode.argtypes = [ctypes.POINTER(ctypes.c_int)]
        exchange_mode.restype = ctypes.c_int
    except Exception:  # no driver library or symbol: the gate alone, as documented
        return None

    def exchange(mode: int):
        value = ctypes.c_int(mode)
        return value.value if exchange_mode(ctypes.byref(value)) == 0 else None

    return exchange


_clock_ns = time.time_ns  # the host clock of marks (a stand-in timeline's in the tests)
_UNBOUND = object()
_exchange_capture_mode: Any = _UNBOUND  # bound on first use (CUDA is up by then)


def _relaxed(call, args):
    exchange = _exchange_capture_mode
    if exchange is _UNBOUND:
        exchange = _set_exchange(_bind_capture_mode())
    if exchange is None:
        return call(*args)
    previous = exchange(CAPTURE_MODE_RELAXED)
    try:
        return call(*args)
    finally:
        if previous is not None:
            exchange(previous)


def _set_exchange(exchange):
    global _exchange_capture_mode
    _exchange_capture_mode = exchange
    return exchange


def gate(call, *args):
    """``(True, call(*args))`` when no capture we saw is open, made in relaxed capture mode;
    else ``(False, None)`` without calling."""
    return _guard.outside_captures(_relaxed, call, args)


# --- windows ------------------------------------------------------------------------------------

class Mark(namedtuple("Mark", (
    "window",
    "event",
    "wall_ns",
))):
    """An event recorded on the work's stream just before a call, and the host clock then."""

    __slots__ = ()


class DeviceWork:
    """One aggregate's share of its device work."""

    __slots__ = ("device_ns", "last_end_ns", "open", "timed_host_ns", "untimed_calls")

    def __init__(self) -> None:
        self.device_ns: dict = {}  # device index -> its shares of closed segments
        self.last_end_ns = 0  # host clock estimate of when its last work finished
        self.open: set = set()  # windows whose open segment holds work of ours
        self.timed_host_ns = 0  # host time of the calls the windows time
        self.untimed_calls = 0  # asynchronous calls with no device time


class StreamWindow:
    """The timed work on one (device, stream) of one start-up, shared by threads."""

    __slots__ = ("key", "stream", "lock", "start_event", "end_event", "segment_start_ns", "idle_ns",
                 "previous_end_ns", "shares", "spares")

    def __init__(self, key, stream) -> None:
        self.key = key
        self.stream = stream
        self.lock = threading.Lock()
        self.start_event: Any = None  # None: no segment open; else a torch.cuda.Event
        self.end_event: Any = None
        self.segment_start_ns = 0
        self.idle_ns = 0  # the open segment's idle start (see the module docstring)
        self.previous_end_ns = 0  # host clock estimate of when the last closed segment ended
        self.shares: dict = {}  # DeviceWork -> [bytes, calls] queued in the open segment
        self.spares: list = []

    def take_event(self, new_event):
        return self.spares.pop() if self.spares else new_event()

    def give_back(self, event) -> None:
        if event is not None and len(self.spares) < SPARES:
            self.spares.append(event)

    def close_segment(self) -> None:
        """The end event is done: share the segment's device time (event calls: gated)."""
        elapsed_ns = int(self.start_event.elapsed_time(self.end_event) * 1e6)
        end_ns = self.segment_start_ns + elapsed_ns
        self._share(max(0, elapsed_ns - self.idle_ns), end_ns)
        self.previous_end_ns = end_ns

    def abandon_segment(self) -> None:
        """An event call failed (events on different devices, a capture we could not see):
        the segment's work is untimed."""
        for work, (_, calls) in self.shares.items():
            work.untimed_calls += calls
            work.open.discard(self)
        self.shares = {}
        self.start_event = None

    def _share(self, device_ns: int, end_ns: int) -> None:
        total = sum(b for b, _ in self.shares.values())
        calls = sum(c for _, c in self.shares.values())
        device = self.key[0] if isinstance(self.key, tuple) else self.key
        for work, (nbytes, n) in self.shares.items():
            part = device_ns * (nbytes / total if total else n / calls)
            work.device_ns[device] = work.device_ns.get(device, 0) + int(part)
            work.last_end_ns = max(work.last_end_ns, end_ns)
            work.open.discard(self)
        self.shares = {}
        self.give_back(self.start_event)
        self.start_event = None


def _join_inside(window: StreamWindow, work: DeviceWork, mark: Mark, nbytes: int, end_ns: int,
                 new_event) -> bool:
    if window.start_event is not None and window.end_event.query():
        window.close_segment()  # the stream went idle since: that segment is done
    if window.start_event is None:  # this call opens a segment at its mark
        if window.end_event is None:
            window.end_event = new_event()
        window.start_event = mark.event
        window.segment_start_ns = mark.wall_ns
        # The stream idled from the mark (or the previous segment's end) until this call's
        # work reached it: at most until the call returned (finding 7).
        window.idle_ns = max(0, end_ns - max(mark.wall_ns, window.previous_end_ns))
    else:
        window.give_back(mark.event)  # the stream stayed busy: the segment goes on
    window.end_event.record(window.stream)
    share = window.shares.get(work)
    if share is None:
        share = window.shares[work] = [0, 0]
    share[0] += nbytes
    share[1] += 1
    work.open.add(window)
    return True


def join(work: DeviceWork, mark: Mark | None, nbytes: int, start_ns: int, end_ns: int,
         new_event: Callable[[], Any], gate: Gate = gate) -> bool:
    """Add one call, already queued after ``mark``, to its stream's window; whether it is
    timed (else counted in ``untimed_calls``)."""
    if mark is None:
        work.untimed_calls += 1
        return False
    window = mark.window
    with window.lock:
        try:
            ran, timed = gate(_join_inside, window, work, mark, nbytes, end_ns, new_event)
        except Exception:  # a device call refused (the host's CUDA error may surface here): untimed, never raised
            window.abandon_segment()
            ran = timed = False
        if not ran:
            window.give_back(mark.event)
    if ran and timed:
        work.timed_host_ns += end_ns - start_ns
        return True
    work.untimed_calls += 1
    return False


class Resolution(namedtuple("Resolution", (
    "device_ns",  # device time of the timed work (devices in parallel: the longest)
    "last_end_ns",  # host clock estimate of when the last timed work finished
))):
    __slots__ = ()


def _close_if_done(window: StreamWindow) -> bool:
    if window.end_event.query():
        window.close_segment()
        return True
    return False


def try_resolve(work: DeviceWork, gate: Gate = gate) -> Resolution | None:
    """The work's device time if all of it has finished, else None (nothing waits)."""
    for window in list(work.open):
        with window.lock:
            if work not in window.shares:
                continue  # another aggregate's settle or call closed it meanwhile
            try:
                ran, done = gate(_close_if_done, window)
            except Exception:  # a device call refused (the host's CUDA error may surface here): untimed, never raised
                window.abandon_segment()
                continue
            if not ran or not done:
                return None
    return Resolution(max(work.device_ns.values(), default=0), work.last_end_ns)


def resolve_bounded(work: DeviceWork, gate: Gate, deadline: float,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> Resolution | None:
    """End of the start-up: poll until the work finished or ``clock()`` reaches ``deadline``
    (None then). Never a synchronize: the host sleeps, the device keeps going."""
    while True:
        resolution = try_resolve(work, gate)
        if resolution is not None or clock() >= deadline:
            return resolution
        sleep(_POLL_S)


# --- the CUDA side: which stream, marks, the per-start-up registry -------------------------------

def windows() -> dict:
    """(device index, stream id) -> StreamWindow of the running start-up ({} when none)."""
    from .. import session as _session

    session = _session.ACTIVE
    return session.state(__name__, dict) if session is not None else {}


def window_for(key, stream) -> StreamWindow:
    registry = windows()
    window = registry.get(key)
    if window is None:  # setdefault: two threads making it at once keep one
        window = registry.setdefault(key, StreamWindow(key, stream))
    return window


def work_pending() -> bool:
    """Some window has a segment open: a blocking copy may wait for timed work first."""
    return any(window.start_event is not None for window in list(windows().values()))


def stream_of(device):
    import torch

    if device.index is None:  # one key per physical device, however the caller named it
        device = torch.device("cuda", torch.cuda.current_device())
    stream = torch.cuda.current_stream(device)
    return (device.index, stream.stream_id), stream


def new_event():
    import torch

    return torch.cuda.Event(enable_timing=True)


def _capturing(stream) -> bool:
    is_capturing = getattr(stream, "is_capturing", None)
    return bool(is_capturing()) if is_capturing is not None else False


def _record_mark(window: StreamWindow):
    if _capturing(window.stream):
        return None  # a capture on the work's stream we did not see: no event into it
    event = window.take_event(new_event)
    wall_ns = _clock_ns()
    try:
        event.record(window.stream)
    except Exception:
        window.give_back(event)
        raise
    return Mark(window, event, wall_ns)


def mark(device) -> Mark | None:
    """An event recorded on the stream the call's device work will be queued on, before the
    call; None when no event may be recorded (a capture open, seen or on this stream)."""
    import torch

    if _guard.any_capture_open() or torch.cuda.is_current_stream_capturing():
        return None
    key, stream = stream_of(device)
    window = window_for(key, stream)
    with window.lock:
        try:
            ran, made = gate(_record_mark, window)
        except Exception:  # a device call refused (the host's CUDA error may surface here): untimed, never raised
            return None
    return made if ran else None


def give_back(made: Mark | None) -> None:
    """A call that turned out to queue nothing: its mark's event goes back to the pool."""
    if made is not None:
        with made.window.lock:
            made.window.give_back(made.event)


# --- blocking copies behind queued work (finding 3: nothing is asked before settle) -------------

class BlockingCopy(namedtuple("BlockingCopy", (
    "window",
    "before",  # completes when the work queued before the copy has
    "after",  # recorded once the call returned: completes after the copy
    "host_ns",
))):
    __slots__ = ()


def _record_before(window: StreamWindow):
    if window.start_event is not None and _close_if_done(window):
        return None  # the queued work is done: the copy waits for nothing
    before = window.take_event(new_event)
    before.record(window.stream)
    return before


def mark_blocking(device):
    """A blocking copy on a stream where timed work may still be queued: it will wait for that
    work first. Bracketed by events so the wait is not counted as the copy's time. Returns
    the window and the event before it, or None."""
    key, stream = stream_of(device)
    window = windows().get(key)
    if window is None or window.start_event is None:
        return None
    with window.lock:
        try:
            ran, before = gate(_record_before, window)
        except Exception:  # a device call refused (the host's CUDA error may surface here): untimed, never raised
            return None
    return (window, before) if ran and before is not None else None


def _record_after(window: StreamWindow):
    after = window.take_event(new_event)
    after.record(window.stream)
    return after


def finish_blocking(bracket, start_ns: int, end_ns: int) -> BlockingCopy | None:
    """The event after the copy, recorded; ``elapsed_time`` is asked only at settle, once
    ``after.query()`` says both are complete (CUDAEvent refuses it before)."""
    window, before = bracket
    with window.lock:
        try:
            ran, after = gate(_record_after, window)
        except Exception:  # a device call refused (the host's CUDA error may surface here): untimed, never raised
            ran = False
        if not ran:
            window.give_back(before)
            return None
    return BlockingCopy(window, before, after, end_ns - start_ns)


def _blocking_device_ns(copy: BlockingCopy):
    if not copy.after.query():
        return None
    return int(copy.before.elapsed_time(copy.after) * 1e6)


def _resolve_blocking(aggregate, gate: Gate, deadline: float | None) -> bool:
    """Each blocking copy's own device time; the rest of its host time was a wait: out of
    ``busy_ns``, into ``coldstart.copy.waited_s``. False: some are not done yet."""
    copies = aggregate.extras.get(BLOCKING)
    while copies:
        copy = copies[0]
        with copy.window.lock:
            try:
                ran, device_ns = gate(_blocking_device_ns, copy)
            except Exception:  # a device call refused (the host's CUDA error may surface here): never raised
                ran, device_ns = True, -1  # cannot be read: the copy keeps its host time
        if not ran or device_ns is None:
            if deadline is None:
                return False
            if time.monotonic() >= deadline:
                break  # still running at the end: the copy keeps its host time
            time.sleep(_POLL_S)
            continue
        copies.pop(0)
        with copy.window.lock:
            copy.window.give_back(copy.before)
            copy.window.give_back(copy.after)
        if 0 <= device_ns < copy.host_ns:
            waited = copy.host_ns - device_ns
            aggregate.busy_ns -= waited
            aggregate.extras["waited_ns"] = aggregate.extras.get("waited_ns", 0) + waited
    aggregate.extras.pop(BLOCKING, None)
    return True


# --- an aggregate's figures ---------------------------------------------------------------------

def join_call(aggregate, made: Mark | None, nbytes: int, start_ns: int, end_ns: int) -> None:
    """``Recorder.add``'s on_add for a call whose device work is asynchronous."""
    work = aggregate.extras.get(WORK)
    if work is None:
        work = aggregate.extras[WORK] = DeviceWork()
        aggregate.extras[ASYNC_WORK] = True  # its busy time is launch time: no bandwidth from it
        aggregate.settle = settle
    join(work, made, nbytes, start_ns, end_ns, new_event)


def add_blocking(aggregate, copy: BlockingCopy) -> None:
    """``Recorder.add``'s on_add for a blocking copy bracketed by events."""
    copies = aggregate.extras.get(BLOCKING)
    if copies is None:
        copies = aggregate.extras[BLOCKING] = []
        aggregate.end_hooks.append(_waited_attribute)
        aggregate.settle = settle
    copies.append(copy)


def settle(aggregate, final_deadline: float | None) -> bool:
    """The aggregate ended: read its device time if the work finished (query, no wait), else
    ask to be held; at the end of the start-up, poll a bounded time, then give up and mark.

    Its bandwidth (``coldstart.throughput``) is written only when every byte's time is
    known: host time of its blocking calls plus device time of the rest. A call without
    events (a capture was open, a device without events) or work unresolved at the end
    leaves the aggregate without one: a launch time is no transfer time."""
    if not _resolve_blocking(aggregate, gate, final_deadline):
        return False
    work = aggregate.extras.get(WORK)
    if work is None:
        return True
    resolution = None
    unresolved = False
    if work.open or work.device_ns:  # else every call was untimed: nothing to wait for
        if final_deadline is not None:
            resolution = resolve_bounded(work, gate, final_deadline)
            unresolved = resolution is None  # still running at the end, or a capture stayed open
        else:
            resolution = try_resolve(work, gate)
            if resolution is None:
                return False
    aggregate.extras.pop(WORK, None)
    untimed = work.untimed_calls
    if unresolved:
        for window in list(work.open):  # its share of those segments is lost
            with window.lock:
                _, calls = window.shares.pop(work, (0, 0))
            untimed += calls
        aggregate.attributes[semconv.COPY_ASYNC_UNRESOLVED] = True
    elif resolution is not None and work.device_ns:
        aggregate.attributes[semconv.COPY_ASYNC_S] = resolution.device_ns / 1e9
        aggregate.last_ns = max(aggregate.last_ns, resolution.last_end_ns)
        # Achieved bandwidth: the host-timed calls' own time plus the device time of the rest.
        effective_ns = max(0, aggregate.busy_ns - work.timed_host_ns) + resolution.device_ns
        if not untimed and effective_ns > 0 and aggregate.bytes > 0:
            aggregate.attributes[semconv.THROUGHPUT] = aggregate.bytes / (effective_ns / 1e9)
    if untimed:
        aggregate.attributes[semconv.COPY_UNTIMED_CALLS] = untimed
    return True


def _waited_attribute(aggregate) -> None:
    waited = aggregate.extras.pop("waited_ns", 0)
    if waited:
        aggregate.attributes[semconv.COPY_WAITED_S] = waited / 1e9
