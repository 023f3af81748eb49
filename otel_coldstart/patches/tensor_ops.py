"""Tensor moves and casts: ``Tensor.to/.cuda/.cpu/.half/.bfloat16/.float/.copy_``,
``UntypedStorage.to`` and ``Module.to/.cuda/.cpu/.half/.bfloat16/.float``.

Why these: accelerate moves weights with ``.to(device)``, transformers 5 with
``.to(device, dtype)``, vLLM with ``param.data.copy_(w)``, ``torch.load(map_location="cuda")``
with ``UntypedStorage.to``; users cast whole models with ``model.to(dtype)`` / ``.half()``.
Each call is classified by what actually happened (source and result device and dtype), not
by its arguments: h2d, d2h, d2d, h2h, cast, or a no-op, which costs one identity check and
records nothing. Calls are aggregated by the recorder, never one span each.

Copies queued with ``non_blocking=True`` return before the device has moved a byte, so their
call time says nothing about the transfer. For those, CUDA events are recorded on the copy's
stream around the calls (two re-used events per device, never a wait); when the aggregate
ends (its parent span ends), the last event is waited for once and the device time of the
queued copies is read from the events (``coldstart.copy.async_s``). That extends the span to
when the copies finished and gives the achieved bandwidth. No synchronisation per tensor.

These wrappers sit on the hottest paths torch has, so they are removed at ``ready()``:
after it, ``torch.Tensor.to is`` the original.
"""

from __future__ import annotations

import threading
import time

from .. import probes, semconv
from .._errors import report_internal_error
from . import _guard
from ._tensor_bytes import tensor_nbytes
from ._wrapping import PatchSet, installed_version

TARGETS = ("torch",)
HOT_PATH = True

_patches = PatchSet()
_fake_types: tuple = ()
_cast_attributes: dict = {}  # (from dtype, to dtype) -> span attributes
_local = threading.local()  # .spare_events: {device key: CUDA event not yet owned by an aggregate}

_TENSOR_METHODS = ("to", "cuda", "cpu", "half", "bfloat16", "float")
_MODULE_METHODS = (("to", None), ("cuda", semconv.PHASE_H2D), ("cpu", semconv.PHASE_D2H),
                   ("half", semconv.PHASE_CAST), ("bfloat16", semconv.PHASE_CAST), ("float", semconv.PHASE_CAST))
_DEVICE_PHASES = frozenset((semconv.PHASE_H2D, semconv.PHASE_D2H, semconv.PHASE_D2D))


def get_version() -> str | None:
    return installed_version("torch")


def is_patched() -> bool:
    return bool(_patches)


def patch() -> None:
    import torch

    _guard.bind_torch()
    _resolve_fake_types()
    # Module.half/.bfloat16/.float/.cpu reach tensors through the Tensor methods of the same name.
    for name in _TENSOR_METHODS:
        _patches.wrap(torch.Tensor, name, _tensor_move(name))
    _patches.wrap(torch.Tensor, "copy_", _tensor_copy)
    # torch.load(map_location="cuda") moves each storage with UntypedStorage.to (.cuda calls it).
    _patches.wrap(torch.UntypedStorage, "to", _storage_to)
    for name, phase in _MODULE_METHODS:
        _patches.wrap(torch.nn.Module, name, _module_wrapper(name, phase))


def unpatch() -> None:
    _patches.restore()
    _local.__dict__.pop("spare_events", None)


def _resolve_fake_types() -> None:
    """Tensor types that pass through our wrappers while torch.compile traces; they hold no
    data and must record nothing."""
    global _fake_types
    found = []
    try:
        from torch._subclasses.fake_tensor import FakeTensor

        found.append(FakeTensor)
    except Exception:  # pragma: no cover - private API moved
        pass
    try:
        from torch._subclasses.functional_tensor import FunctionalTensor

        found.append(FunctionalTensor)
    except Exception:  # pragma: no cover
        pass
    _fake_types = tuple(found)


# --- wrappers -------------------------------------------------------------------------------

def _timed_call(wrapped, args, kwargs, from_host: bool):
    """The host's call, timed, with this thread's storage reads around it when the source is
    in host memory (an mmap'd checkpoint is read on first touch, often right here).

    The guard is held across the call: a ``__torch_function__`` subclass re-enters our
    wrapper, and the inner call must count nothing."""
    _guard.enter()
    try:
        start = time.time_ns()
        io_before = probes.thread_io() if from_host else None
        result = wrapped(*args, **kwargs)
        io_after = probes.thread_io() if from_host else None
        end = time.time_ns()
    finally:
        _guard.leave()
    return result, start, end, io_before, io_after


def _tensor_move(method: str):
    def wrapper(wrapped, instance, args, kwargs):
        session = _guard.recording_session()
        if session is None:
            return wrapped(*args, **kwargs)
        queued = from_host = False
        try:
            from_host = instance.is_cpu
            queued = _move_is_non_blocking(method, args, kwargs)
            async_start = _async_start(_move_target_gpu(method, instance, args, kwargs)) if queued else None
        except Exception:
            report_internal_error(f"Tensor.{method}")
            async_start = None
        result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, from_host)
        if result is not instance:
            try:
                _record_tensors(session, instance, result, tensor_nbytes(instance), start, end, io_before, io_after,
                                queued, async_start)
            except Exception:
                report_internal_error(f"Tensor.{method}")
        return result

    return wrapper


def _tensor_copy(wrapped, instance, args, kwargs):
    session = _guard.recording_session()
    if session is None:
        return wrapped(*args, **kwargs)
    source = args[0] if args else kwargs.get("src")
    queued = from_host = False
    async_start = None
    try:
        from_host = source.is_cpu
        queued = bool(args[1]) if len(args) > 1 else bool(kwargs.get("non_blocking", False))
        if queued:
            async_start = _async_start(_cuda_or_none(instance.device if instance.is_cuda else source.device))
    except Exception:
        report_internal_error("Tensor.copy_")
    result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, from_host)
    try:
        # Bytes read from the source: for a copy_ that broadcasts, what the destination holds.
        nbytes = instance.numel() * source.element_size()
        _record_tensors(session, source, instance, nbytes, start, end, io_before, io_after, queued, async_start)
    except Exception:
        report_internal_error("Tensor.copy_")
    return result


def _storage_to(wrapped, instance, args, kwargs):
    session = _guard.recording_session()
    if session is None:
        return wrapped(*args, **kwargs)
    queued = from_host = False
    async_start = None
    try:
        from_host = instance.device.type == "cpu"  # storages have no is_cpu
        queued = bool(kwargs.get("non_blocking", False))
        if queued:
            async_start = _async_start(_storage_target_gpu(instance, kwargs))
    except Exception:
        report_internal_error("UntypedStorage.to")
    result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, from_host)
    if result is not instance:
        try:
            phase = _phase_for(instance.device.type, result.device.type, False)
            if phase is not None:
                pinned = instance.is_pinned() if phase == semconv.PHASE_H2D else None
                _add(session, phase, None, None, instance.nbytes(), start, end, io_before, io_after,
                     pinned, queued, async_start)
        except Exception:
            report_internal_error("UntypedStorage.to")
    return result


# --- classification and recording --------------------------------------------------------

def _record_tensors(session, source, destination, nbytes, start, end, io_before, io_after, queued,
                    async_start) -> None:
    if _fake_types and (isinstance(source, _fake_types) or isinstance(destination, _fake_types)):
        return
    src_dtype, dst_dtype = source.dtype, destination.dtype
    cast = src_dtype != dst_dtype
    phase = _phase_for(_device_type(source), _device_type(destination), cast)
    if phase is None:
        return
    if cast:
        detail = (src_dtype, dst_dtype)
        detail_attrs = _cast_attributes.get(detail)
        if detail_attrs is None:  # built once per dtype pair; the recorder copies it per aggregate
            detail_attrs = _cast_attributes[detail] = {semconv.CAST_FROM: _dtype_name(src_dtype),
                                                       semconv.CAST_TO: _dtype_name(dst_dtype)}
    else:
        detail, detail_attrs = None, None
    # is_pinned() on a CPU tensor is only asked when the target is a GPU: elsewhere it can
    # create a CUDA context the host never asked for.
    pinned = source.is_pinned() if phase == semconv.PHASE_H2D else None
    _add(session, phase, detail, detail_attrs, nbytes, start, end, io_before, io_after, pinned, queued,
         async_start)


def _add(session, phase, detail, detail_attrs, nbytes, start, end, io_before, io_after, pinned, queued,
         async_start) -> None:
    if io_before is not None and io_after is not None:
        read_bytes = io_after.read_bytes - io_before.read_bytes
        major_faults = io_after.major_faults - io_before.major_faults
    else:  # the source was on a device: no file page can fault in
        read_bytes = major_faults = 0
    device_copy = phase in _DEVICE_PHASES
    on_add = None
    if async_start is not None and device_copy:
        def on_add(aggregate, nbytes=nbytes, busy=end - start):
            _join_async(aggregate, async_start, nbytes, busy)

    session.recorder.add(phase, detail, detail_attrs, nbytes, start, end, read_bytes, major_faults,
                         pinned=pinned, non_blocking=queued and device_copy, on_add=on_add)


def _device_type(tensor) -> str:
    # Tensor.is_cpu answers in ~35 ns where .device.type builds a torch.device (~220 ns): on
    # the per-call path of every intercepted cast, that is most of the classification.
    return "cpu" if tensor.is_cpu else tensor.device.type


def _phase_for(src_device: str, dst_device: str, dtype_changed: bool) -> str | None:
    if src_device == "meta" or dst_device == "meta":
        return None  # no data moves: allocation on or from the meta device
    if src_device == "cpu" and dst_device == "cpu":
        return semconv.PHASE_CAST if dtype_changed else semconv.PHASE_H2H
    if src_device == "cpu":
        return semconv.PHASE_H2D
    if dst_device == "cpu":
        return semconv.PHASE_D2H
    if src_device == dst_device and dtype_changed:
        return semconv.PHASE_CAST
    return semconv.PHASE_D2D


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _move_is_non_blocking(method: str, args, kwargs) -> bool:
    if method not in ("to", "cuda"):
        return False  # .cpu()/.half()/.float()/.bfloat16() have no non_blocking
    if kwargs.get("non_blocking") is True:
        return True
    if len(args) < 2:  # the common .to(dtype) / .to(device): nothing positional to look at
        return False
    if method == "cuda":  # cuda(device=None, non_blocking=False)
        return len(args) > 1 and args[1] is True
    # to(device, dtype, non_blocking, copy) | to(dtype, non_blocking, copy) | to(tensor, non_blocking, copy)
    import torch

    position = 1 if args and isinstance(args[0], (torch.dtype, torch.Tensor)) else 2
    return len(args) > position and args[position] is True


def _move_target_gpu(method: str, instance, args, kwargs):
    """The CUDA device whose stream a non-blocking move is queued on, or None."""
    import torch

    if instance.is_cuda:
        return instance.device
    if method == "cuda":
        target = kwargs.get("device", args[0] if args else None)
        return torch.device("cuda") if target is None else _cuda_or_none(target)
    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, torch.Tensor):
        target = target.device
    if target is None or isinstance(target, torch.dtype):
        return None
    return _cuda_or_none(target)


def _storage_target_gpu(instance, kwargs):
    if instance.device.type == "cuda":
        return instance.device
    target = kwargs.get("device")
    return None if target is None else _cuda_or_none(target)


def _cuda_or_none(target):
    import torch

    device = target if isinstance(target, torch.device) else torch.device(
        "cuda", target) if isinstance(target, int) else torch.device(target)
    return device if device.type == "cuda" else None


# --- non-blocking copies: CUDA events, resolved once per aggregate --------------------------

class _AsyncStart:
    __slots__ = ("key", "device", "event", "wall_ns")

    def __init__(self, key, device, event, wall_ns) -> None:
        self.key = key
        self.device = device
        self.event = event
        self.wall_ns = wall_ns


class _AsyncCopies:
    """The non-blocking copies of one aggregate on one device, as segments of device time.

    A segment runs from the start event recorded before a copy to the end event re-recorded
    after each later copy, as long as the device stayed busy. When a new copy finds the last
    one already done (a cheap ``query()``, no wait), the device went idle in between (the host
    was reading the next shard): that segment is closed and summed, so host gaps never count
    as copy time."""

    __slots__ = ("start_event", "segment_start_ns", "end_event", "bytes", "host_busy_ns", "device_ns")

    def __init__(self, start_event, start_ns: int, end_event) -> None:
        self.start_event = start_event
        self.segment_start_ns = start_ns
        self.end_event = end_event
        self.bytes = 0
        self.host_busy_ns = 0
        self.device_ns = 0  # closed segments


def _async_start(device) -> _AsyncStart | None:
    """Mark the stream before a non-blocking copy. The event is a per-thread spare until a
    window takes it as a segment start, so most copies cost one re-record."""
    if device is None or _guard.any_capture_open():
        return None
    import torch

    if torch.cuda.is_current_stream_capturing():  # a capture we did not see: record nothing into it
        return None
    if device.index is None:  # one key per physical device, however the caller named it
        device = torch.device("cuda", torch.cuda.current_device())
    spares = _local.__dict__.setdefault("spare_events", {})
    key = str(device)
    event = spares.get(key)
    if event is None:
        event = spares[key] = torch.cuda.Event(enable_timing=True)
    wall_ns = time.time_ns()
    event.record(torch.cuda.current_stream(device))
    return _AsyncStart(key, device, event, wall_ns)


def _join_async(aggregate, start: _AsyncStart, nbytes: int, busy_ns: int) -> None:
    import torch

    windows = aggregate.extras.get("async_copies")
    if windows is None:
        windows = aggregate.extras["async_copies"] = {}
        aggregate.end_hooks.append(_resolve_async)
    spares = _local.__dict__.setdefault("spare_events", {})
    window = windows.get(start.key)
    if window is None:
        window = windows[start.key] = _AsyncCopies(start.event, start.wall_ns, torch.cuda.Event(enable_timing=True))
        spares.pop(start.key, None)  # now this window's segment start
    elif window.end_event.query():
        # The device finished everything queued before this copy: close that segment and
        # open the next one at the event recorded just before this copy.
        window.device_ns += int(window.start_event.elapsed_time(window.end_event) * 1e6)
        spares[start.key], window.start_event = window.start_event, start.event
        window.segment_start_ns = start.wall_ns
    window.end_event.record(torch.cuda.current_stream(start.device))
    window.bytes += nbytes
    window.host_busy_ns += busy_ns


def _resolve_async(aggregate) -> None:
    """End of the aggregate: wait once for its last queued copy on each device, then read how
    long the device spent on them from the events."""
    windows = aggregate.extras.pop("async_copies", None) or {}
    if not windows or _guard.any_capture_open():
        return  # waiting now could break a capture on another thread: host times stand
    device_ns = 0
    host_busy_ns = 0
    for window in windows.values():
        window.end_event.synchronize()
        last_segment_ns = int(window.start_event.elapsed_time(window.end_event) * 1e6)
        device_ns = max(device_ns, window.device_ns + last_segment_ns)  # devices copy in parallel
        host_busy_ns += window.host_busy_ns
        aggregate.last_ns = max(aggregate.last_ns, window.segment_start_ns + last_segment_ns)
    aggregate.attributes[semconv.COPY_ASYNC_S] = device_ns / 1e9
    # Achieved bandwidth: the blocking calls' own time plus the device time of the queued ones.
    effective_ns = max(0, aggregate.busy_ns - host_busy_ns) + device_ns
    if effective_ns > 0 and aggregate.bytes > 0:
        aggregate.attributes[semconv.THROUGHPUT] = aggregate.bytes / (effective_ns / 1e9)


# --- Module.to and friends ----------------------------------------------------------------------

def _module_wrapper(method: str, fixed_phase: str | None):
    """``Module.to`` and friends: a parent span for the per-tensor work the call causes,
    written only if there was any, named after the phase that work turned out to be."""
    span_name = semconv.SPAN_MODULE_TO if method == "to" else f"coldstart.module.{method}"

    def wrapper(wrapped, instance, args, kwargs):
        session = _guard.recording_session()
        if session is None:
            return wrapped(*args, **kwargs)
        pending = None
        try:
            pending = session.push_pending(span_name, fixed_phase or semconv.PHASE_CAST, {})
        except Exception:
            report_internal_error(f"Module.{method}")
        try:
            return wrapped(*args, **kwargs)
        finally:
            if pending is not None:
                try:
                    by_phase = session.recorder.child_phase_bytes(pending)
                    if by_phase:  # Module.to("cuda") on a module already there was only a cast
                        pending.phase = max(by_phase, key=lambda p: (by_phase[p], p))
                    session.pop_pending(pending)
                except Exception:
                    report_internal_error(f"Module.{method}")

    return wrapper
