"""Tensor moves and casts: ``Tensor.to/.cuda/.cpu/.half/.bfloat16/.float/.copy_``,
``UntypedStorage.to`` and ``Module.to/.cuda/.cpu/.half/.bfloat16/.float``.

Why these: accelerate moves weights with ``.to(device)``, transformers 5 with
``.to(device, dtype)``, vLLM with ``param.data.copy_(w)``, ``torch.load(map_location="cuda")``
with ``UntypedStorage.to``; users cast whole models with ``model.to(dtype)`` / ``.half()``.
Each call is classified by what actually happened (source and result device and dtype), not
by its arguments: h2d, d2h, d2d, h2h, cast, or a no-op, which costs one identity check and
records nothing. Calls are aggregated by the recorder, never one span each.

Bytes and memory of a host<->device copy are what crosses the bus, decided as PyTorch's
Copy.cu decides them (``_cuda_copy.py``): a blocking H2D with a dtype change converts on the
host into a pageable temporary and moves the destination dtype's bytes.

GPU work is asynchronous: a copy queued with ``non_blocking=True``, and a cast on the GPU or
a device-to-device copy whatever ``non_blocking`` says, return before the device has done
it, so their call time says nothing about the work. For those, CUDA events are recorded on
the work's stream (keyed by device and stream; the source device's for D2H and d2d, as
Copy.cu does) around the calls, re-used, and resolved when the aggregate ends by
``query()``, never a wait (``_device_windows.py``): an aggregate whose work is still queued
is held by the recorder and written once it is done (``coldstart.copy.async_s``, the span
extended to when the work finished, the achieved bandwidth). A blocking copy behind such
work is bracketed by events so the wait is not its own time (``coldstart.copy.waited_s``).
Every event call is atomic against a CUDA graph capture beginning on any thread
(``_guard.outside_captures``). A copy that is the first CUDA touch initialises CUDA before
its clock starts.

These wrappers sit on the hottest paths torch has, so they are removed at ``ready()``:
after it, ``torch.Tensor.to is`` the original. While the start-up is open, a call that stays
in host memory (a host cast, ``.half()``, a host ``copy_``: every call of a CPU start-up and
most casts of a GPU one) takes a short path (:func:`_host_call`): one thread-local lookup,
two clock reads, the source's byte count, and an addition to this thread's aggregate
(recorder.Recorder.count); no plan, no device question, no syscall unless the start-up
expects storage reads (recorder.py). Calls that may reach a device take the full path below.
"""

from __future__ import annotations

import threading
import time

from .. import probes, semconv
from .. import session as _session
from .._errors import report_internal_error
from ..recorder import ASYNC_WORK, thread_state
from . import _cuda_copy, _device_windows, _guard
from ._tensor_bytes import tensor_nbytes
from ._wrapping import PatchSet, installed_version

TARGETS = ("torch",)
HOT_PATH = True

_patches = PatchSet()
_fake_types: tuple = ()
_real_types: frozenset = frozenset()
# from dtype -> to dtype -> (detail, span attributes), made once per pair: the recorder keys
# aggregates by the detail and copies the attributes per aggregate. One object per pair, so
# the per-call path makes no tuple and the recorder can compare details by identity.
_casts: dict = {}
_local = threading.local()  # .spare_events: {(device, stream) key: CUDA event not yet owned by a window}
# Per start-up device facts live on the Startup (startup.py): ``stream_tails``, (device
# index, stream id) -> the end event of the latest timed asynchronous work queued there (a
# later blocking copy on that stream waits for it first, see _mark_blocking), and
# ``cuda_up``, CUDA initialised (until then a copy to CUDA initialises it before timing).


def _stream_tails() -> dict:
    session = _session.ACTIVE
    startup = session.startup if session is not None else None
    return startup.stream_tails if startup is not None else {}


def _cuda_up() -> bool:
    session = _session.ACTIVE
    startup = session.startup if session is not None else None
    return startup.cuda_up if startup is not None else False
# A CUDA build of torch (bound at patch()): on a CPU build no call can reach a GPU, and the
# per-call path skips every device question (the common CPU start-up pays nothing for them).
_cuda_possible = False
_dtype_type: type = type(None)  # torch.dtype, bound at patch()
_strided = None  # torch.strided, bound at patch()

_TENSOR_METHODS = ("to", "cuda", "cpu", "half", "bfloat16", "float")
# Methods whose result is in host memory when the source is (``.cpu()`` of a host tensor
# returns it as it is).
_HOST_ONLY_METHODS = frozenset(("cpu", "half", "bfloat16", "float"))
_MODULE_METHODS = (("to", None), ("cuda", semconv.PHASE_H2D), ("cpu", semconv.PHASE_D2H),
                   ("half", semconv.PHASE_CAST), ("bfloat16", semconv.PHASE_CAST), ("float", semconv.PHASE_CAST))
_DEVICE_PHASES = frozenset((semconv.PHASE_H2D, semconv.PHASE_D2H, semconv.PHASE_D2D))
# Phases whose asynchronous GPU work is timed by events (a cast only when it ran on a GPU).
_TIMED_PHASES = _DEVICE_PHASES | {semconv.PHASE_CAST}


def get_version() -> str | None:
    return installed_version("torch")


def is_patched() -> bool:
    return bool(_patches)


def patch() -> None:
    import torch

    global _cuda_possible, _dtype_type, _strided
    _cuda_possible = hasattr(torch._C, "_cuda_getDeviceCount")  # torch.cuda._is_compiled()
    _dtype_type = torch.dtype
    _strided = torch.strided
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
    _stream_tails().clear()


def _resolve_fake_types() -> None:
    """Tensor types that pass through our wrappers while torch.compile traces; they hold no
    data and must record nothing."""
    global _fake_types, _real_types
    import torch

    _real_types = frozenset((torch.Tensor, torch.nn.Parameter))  # never fake: one set lookup
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
    session = _session.ACTIVE
    sample = from_host and session is not None and session.recorder.sample_io
    state = thread_state()
    state.busy = True
    try:
        if from_host and not sample and state.io_mark is None and session is not None:
            session.recorder.mark(state)  # the first call since a boundary (recorder.Recorder.boundary)
        start = time.time_ns()
        io_before = probes.thread_io() if sample else None
        result = wrapped(*args, **kwargs)
        io_after = probes.thread_io() if sample else None
        end = time.time_ns()
    finally:
        state.busy = False
    return result, start, end, io_before, io_after


def _host_call(state, session, wrapped, instance, args, kwargs, where: str, copy_source=None):
    """A call whose source and result stay in host memory: no device plan, nothing to time
    but the call; counted with ``_record_tensors``'s rules for two host tensors (cast, or
    h2h; a ``copy_`` moves what the destination holds, read from the source).
    ``copy_source``: the source of a ``copy_`` (``instance`` is its destination, which it
    returns). Written out in one function: it runs once per intercepted call."""
    recorder = session.recorder
    sample = recorder.sample_io
    io_before = io_after = None
    state.busy = True  # a __torch_function__ subclass comes back through us: count it once
    try:
        if sample:
            io_before = probes.thread_io()
        elif state.io_mark is None:
            recorder.mark(state)  # the first call since a boundary (recorder.Recorder.boundary)
        start = time.time_ns()
        result = wrapped(*args, **kwargs)
        end = time.time_ns()
        if sample:
            io_after = probes.thread_io()
    finally:
        state.busy = False
    if copy_source is not None:
        source, destination = copy_source, instance
    elif result is instance:
        return result  # a no-op: nothing moved
    else:
        source, destination = instance, result
    try:
        if not destination.is_cpu:  # not where it was expected (a subclass's own .to): the full rules
            _record_tensors(session, source, destination, start, end, io_before, io_after, _HOST_TIMED,
                            copy_source is not None)
            return result
        if type(source) not in _real_types and _fake_types and (
                isinstance(source, _fake_types) or isinstance(destination, _fake_types)):
            return result  # data-less (a fake mode outside a compile): nothing moved
        src_dtype, dst_dtype = source.dtype, destination.dtype
        if src_dtype is dst_dtype:  # torch.dtype objects are singletons
            phase, detail, detail_attrs = semconv.PHASE_H2H, None, None
        else:
            phase = semconv.PHASE_CAST
            try:
                detail, detail_attrs = _casts[src_dtype][dst_dtype]
            except KeyError:
                detail, detail_attrs = _cast_detail(src_dtype, dst_dtype)
        if copy_source is not None:
            nbytes = destination.numel() * source.element_size()
        elif source.layout is _strided:
            nbytes = source.nbytes
        else:
            nbytes = tensor_nbytes(source)
        if io_after is None:
            recorder.count(state, phase, detail, detail_attrs, nbytes, start, end)
        else:
            recorder.count(state, phase, detail, detail_attrs, nbytes, start, end,
                           io_after.read_bytes - io_before.read_bytes, io_after.major_faults - io_before.major_faults)
    except Exception:
        report_internal_error(where)
    return result


def _cast_detail(src_dtype, dst_dtype) -> tuple:
    """(detail, span attributes) of a cast between two dtypes, made once per pair."""
    try:
        return _casts[src_dtype][dst_dtype]
    except KeyError:
        made = (src_dtype, dst_dtype), {semconv.CAST_FROM: _dtype_name(src_dtype),
                                        semconv.CAST_TO: _dtype_name(dst_dtype)}
        return _casts.setdefault(src_dtype, {}).setdefault(dst_dtype, made)


class _Plan:
    """How one call is timed, decided before it runs: the device whose stream carries the
    work, whether that work is asynchronous (events around it, resolved later) or a blocking
    copy that may first wait for earlier queued work (events only then)."""

    __slots__ = ("queued", "mark", "timed", "blocking_before", "blocking_stream")

    def __init__(self, queued: bool) -> None:
        self.queued = queued
        self.mark = None  # _device_windows.Mark before asynchronous device work
        self.timed = False  # the call's device work is asynchronous: it should have a mark
        self.blocking_before = None  # event before a blocking copy that will wait for queued work
        self.blocking_stream = None


# Shared plans for the common calls with nothing to time (never mutated): no allocation per call.
_HOST_TIMED = _Plan(False)
_HOST_TIMED_QUEUED = _Plan(True)


def _untimed(queued: bool) -> _Plan:
    return _HOST_TIMED_QUEUED if queued else _HOST_TIMED


# Asynchronous device work no event times: on a device we have no events for (MPS, XPU).
_UNTIMED_ASYNC = _Plan(False)
_UNTIMED_ASYNC_QUEUED = _Plan(True)
_UNTIMED_ASYNC.timed = _UNTIMED_ASYNC_QUEUED.timed = True


def _other_device_plan(to_host: bool, queued: bool) -> _Plan:
    """Work on a device that is neither the host nor CUDA (MPS, XPU; meta records nothing).
    A blocking copy to the host waits for it: host time is its time. Anything else (a cast,
    a copy between devices, a queued copy) returns before the device did it: counted as
    untimed asynchronous work, so no bandwidth is made of its launch time."""
    if to_host and not queued:
        return _HOST_TIMED
    return _UNTIMED_ASYNC_QUEUED if queued else _UNTIMED_ASYNC


def _plan(work_device, direction: str | None, queued: bool) -> _Plan:
    """``direction``: "h2d", "d2h" or None (the work stays on GPUs: a cast or a d2d copy).
    GPU casts and device-to-device copies are asynchronous whatever ``non_blocking`` says;
    host<->device copies only with it (a blocking one synchronises its stream)."""
    if work_device is None:
        return _untimed(queued)
    plan = _Plan(queued)
    if direction is None or queued:
        plan.timed = True
        plan.mark = _mark(work_device)
    elif _stream_tails():
        _mark_blocking(plan, work_device)
    return plan


def _tensor_move(method: str):
    where = f"Tensor.{method}"
    # The result is in host memory when the source is (.cpu() of a host tensor returns it);
    # .to / .cuda may name a device, and .to(dtype, ...) does not.
    host_only = method in _HOST_ONLY_METHODS
    is_to = method == "to"

    def wrapper(wrapped, instance, args, kwargs):
        session = _session.ACTIVE
        state = _guard.recording_state(session)
        if state is None:
            return wrapped(*args, **kwargs)
        try:  # a host tensor, and a method or arguments that name no device
            if host_only:
                host = instance.is_cpu
            elif is_to:  # .to(dtype, ...), or .to(None, dtype, ...) as Module.to calls it
                first = args[0] if args else None
                host = (first is None or type(first) is _dtype_type) and instance.is_cpu and (
                    not kwargs or kwargs.get("device") is None and "other" not in kwargs)
            else:
                host = False
        except Exception:
            host = False  # the full path below looks again, and reports what fails there
        if host:
            return _host_call(state, session, wrapped, instance, args, kwargs, where)
        plan = None
        from_host = False
        try:
            from_host = instance.is_cpu
            plan = _plan_move(method, instance, args, kwargs, from_host)
        except Exception:
            report_internal_error(f"Tensor.{method}")
        result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, from_host)
        if result is not instance:
            try:
                _record_tensors(session, instance, result, start, end, io_before, io_after, plan)
            except Exception:
                report_internal_error(f"Tensor.{method}")
        elif plan is not None and plan.mark is not None:  # a no-op: the event goes back to the spares
            _local.__dict__.setdefault("spare_events", {})[plan.mark.key] = plan.mark.event
        return result

    return wrapper


def _plan_move(method: str, instance, args, kwargs, from_host: bool) -> _Plan:
    queued = _move_is_non_blocking(method, args, kwargs)
    if not from_host and not (_cuda_possible and instance.is_cuda):
        return _other_device_plan(_move_goes_to_host(method, args, kwargs), queued)
    if not _cuda_possible:
        return _untimed(queued)
    if from_host:
        if method not in ("to", "cuda") or not (queued or _stream_tails() or not _cuda_up()):
            return _untimed(queued)  # a host cast or a blocking copy with nothing queued before it
        if method == "to" and args and type(args[0]) is _dtype_type and kwargs.get("device") is None:
            return _untimed(queued)  # .to(dtype): stays on the host
        target = _move_target_gpu(method, instance, args, kwargs)
        if target is not None and not _cuda_up():
            _initialise_cuda_first()
        return _plan(target, "h2d", queued)
    direction = "d2h" if _move_goes_to_host(method, args, kwargs) else None
    return _plan(instance.device, direction, queued)


def _tensor_copy(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    state = _guard.recording_state(session)
    if state is None:
        return wrapped(*args, **kwargs)
    source = args[0] if args else kwargs.get("src")
    try:
        host = instance.is_cpu and source.is_cpu
    except Exception:
        host = False  # not a tensor: the full path reports it, the host's call raises its error
    if host:
        return _host_call(state, session, wrapped, instance, args, kwargs, "Tensor.copy_", source)
    plan = None
    from_host = False
    try:
        from_host = source.is_cpu
        queued = bool(args[1]) if len(args) > 1 else bool(kwargs.get("non_blocking", False))
        if from_host:
            # Copy.cu: an H2D copy runs on the destination device's current stream.
            plan = _plan(instance.device, "h2d", queued) if _cuda_possible and instance.is_cuda else _untimed(queued)
        elif _cuda_possible and source.is_cuda:
            # D2H and device-to-device (also across GPUs): the source device's stream.
            plan = _plan(source.device, "d2h" if instance.is_cpu else None, queued)
        else:
            plan = _other_device_plan(instance.is_cpu, queued)
    except Exception:
        report_internal_error("Tensor.copy_")
    result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, from_host)
    try:
        _record_tensors(session, source, instance, start, end, io_before, io_after, plan, True)
    except Exception:
        report_internal_error("Tensor.copy_")
    return result


def _storage_to(wrapped, instance, args, kwargs):
    session = _guard.recording_session()
    if session is None:
        return wrapped(*args, **kwargs)
    plan = None
    from_host = False
    try:
        from_host = instance.device.type == "cpu"  # storages have no is_cpu
        queued = bool(kwargs.get("non_blocking", False))
        target = _storage_target_gpu(instance, kwargs)
        if from_host and target is not None and not _cuda_up():
            _initialise_cuda_first()
        if from_host:
            plan = _plan(target, "h2d", queued)
        elif instance.device.type == "cuda":
            destination = kwargs.get("device")
            to_host = destination is not None and _cuda_or_none(destination) is None
            plan = _plan(instance.device, "d2h" if to_host else None, queued)
        else:
            plan = _untimed(queued)
    except Exception:
        report_internal_error("UntypedStorage.to")
    result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, from_host)
    if result is not instance:
        try:
            phase = _phase_for(instance.device.type, result.device.type, False)
            if phase is not None:
                # Pinned or pageable is Copy.cu's distinction: CUDA's (MPS shares memory).
                pinned = instance.is_pinned() if phase == semconv.PHASE_H2D and result.device.type == "cuda" else None
                _add(session, phase, None, None, instance.nbytes(), start, end, io_before, io_after,
                     pinned, plan)
        except Exception:
            report_internal_error("UntypedStorage.to")
    return result


# --- classification and recording --------------------------------------------------------

def _record_tensors(session, source, destination, start, end, io_before, io_after, plan,
                    broadcast_possible: bool = False) -> None:
    if _fake_types and (isinstance(source, _fake_types) or isinstance(destination, _fake_types)):
        return
    src_dtype, dst_dtype = source.dtype, destination.dtype
    cast = src_dtype != dst_dtype
    phase = _phase_for(_device_type(source), _device_type(destination), cast)
    if phase is None:
        return
    if phase == semconv.PHASE_CAST and not source.is_cpu and source.device != destination.device:
        phase = semconv.PHASE_D2D  # .to("cuda:1", dtype): a copy between GPUs, with its cast
    if cast:
        detail, detail_attrs = _cast_detail(src_dtype, dst_dtype)
    else:
        detail, detail_attrs = None, None
    pinned = None
    if (phase == semconv.PHASE_H2D and destination.is_cuda or phase == semconv.PHASE_D2H and source.is_cuda) \
            and source.layout is _strided and destination.layout is _strided:
        numel = destination.numel()  # a copy_ that broadcasts reads what the destination holds
        # What crosses the bus, as Copy.cu does it (a blocking H2D with a dtype change converts
        # on the host into a pageable temporary and moves the destination dtype's bytes).
        queued = plan is not None and plan.queued
        host = source if phase == semconv.PHASE_H2D else destination
        one_block, host_contiguous = _layout(source, destination, host)
        # is_pinned() on a CPU tensor is only asked when the other side is a GPU: elsewhere it
        # can create a CUDA context the host never asked for.
        moved = _cuda_copy.bus_copy(phase, numel, source.element_size(), destination.element_size(),
                                    not cast, one_block, host_contiguous, host.is_pinned(), queued)
        nbytes = moved.bytes
        pinned = moved.pinned if phase == semconv.PHASE_H2D else None
    elif broadcast_possible:  # copy_: what the destination holds, read from the source
        nbytes = destination.numel() * source.element_size()
    else:  # a sparse tensor's bytes are its constituents' (Copy.cu's rules are for strided
        # ones); another accelerator's (MPS: shared memory, no pinned/pageable) are the source's
        nbytes = tensor_nbytes(source)
    _add(session, phase, detail, detail_attrs, nbytes, start, end, io_before, io_after, pinned, plan)


def _layout(source, destination, host) -> tuple[bool, bool]:
    """(TensorIterator sees one contiguous block, the host-side tensor is contiguous with the
    destination's shape). The common case, both contiguous and the same shape, costs two
    flag reads."""
    same_shape = source.shape == destination.shape
    if same_shape and source.is_contiguous() and destination.is_contiguous():
        return True, True
    host_contiguous = same_shape and host.is_contiguous() if host is source else host.is_contiguous()
    one_block = same_shape and source.stride() == destination.stride() and _dense(source)
    return one_block, host_contiguous


def _dense(tensor) -> bool:
    """Non-overlapping and dense in some dimension order (what TensorIterator coalesces into
    one block): sorted by stride, each stride is the product of the sizes inside it."""
    expected = 1
    for size, stride in sorted((p for p in zip(tensor.shape, tensor.stride()) if p[0] != 1),
                               key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _add(session, phase, detail, detail_attrs, nbytes, start, end, io_before, io_after, pinned, plan) -> None:
    if io_before is not None and io_after is not None:
        read_bytes = io_after.read_bytes - io_before.read_bytes
        major_faults = io_after.major_faults - io_before.major_faults
    else:  # the source was on a device: no file page can fault in
        read_bytes = major_faults = 0
    on_add = None
    queued = False
    if plan is not None:
        queued = plan.queued and phase in _DEVICE_PHASES
        if plan.timed and phase in _TIMED_PHASES:
            def on_add(aggregate, mark=plan.mark, busy=end - start):
                _join_device_work(aggregate, mark, busy)
        elif plan.blocking_before is not None:
            start, waited_ns = _finish_blocking(plan, start, end)
            if waited_ns:
                def on_add(aggregate, waited=waited_ns):
                    if "waited_ns" not in aggregate.extras:
                        aggregate.end_hooks.append(_waited_attribute)
                    aggregate.extras["waited_ns"] = aggregate.extras.get("waited_ns", 0) + waited
    session.recorder.add(phase, detail, detail_attrs, nbytes, start, end, read_bytes, major_faults,
                         pinned=pinned, non_blocking=queued, on_add=on_add)


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
    """The CUDA device a move of a host tensor goes to, or None."""
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


def _move_goes_to_host(method: str, args, kwargs) -> bool:
    """A move of a GPU tensor whose result is in host memory (a D2H copy)."""
    if method == "cpu":
        return True
    if method != "to":
        return False
    import torch

    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, torch.Tensor):
        return target.is_cpu
    if target is None or isinstance(target, torch.dtype):
        return False
    try:
        return torch.device(target).type == "cpu"
    except Exception:
        return False


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


def _initialise_cuda_first() -> None:
    """The first touch of CUDA is a copy: initialise it before the copy's clock starts, so
    ``runtime_init`` (patches/runtime.py records this call) is not also inside the copy's
    time, and event timing starts after it. The host's call would initialise it anyway."""
    import torch

    if not torch.cuda.is_initialized():
        try:
            torch.cuda._lazy_init()
        except Exception:
            return  # no driver or device: the host's own call raises it, unchanged
    session = _session.ACTIVE
    if session is not None and session.startup is not None:
        session.startup.cuda_up = torch.cuda.is_initialized()


# --- device timing: CUDA events, resolved without waiting --------------------------------------

def _gate(call, *args):
    return _guard.outside_captures(call, *args)


def _stream_of(device):
    import torch

    if device.index is None:  # one key per physical device, however the caller named it
        device = torch.device("cuda", torch.cuda.current_device())
    stream = torch.cuda.current_stream(device)
    return (device.index, stream.stream_id), stream


def _mark(device):
    """An event recorded on the stream the call's device work will be queued on, before the
    call. Events are per-thread spares per (device, stream) until a window keeps one."""
    import torch

    if _guard.any_capture_open() or torch.cuda.is_current_stream_capturing():
        return None  # a capture we did or did not see: record nothing into or beside it
    key, stream = _stream_of(device)
    spares = _local.__dict__.setdefault("spare_events", {})
    event = spares.pop(key, None)
    if event is None:
        ran, event = _gate(_new_event)  # creating an event is a CUDA call too
        if not ran:
            return None
    wall_ns = time.time_ns()
    ran, _ = _gate(event.record, stream)
    if not ran:
        spares[key] = event
        return None
    return _device_windows.Mark(key, stream, event, wall_ns)


def _new_event():
    import torch

    return torch.cuda.Event(enable_timing=True)


class _DeviceWork:
    """Per-aggregate state of its timed device work."""

    __slots__ = ("windows", "timed_host_ns", "untimed_calls")

    def __init__(self) -> None:
        self.windows: dict = {}  # (device index, stream id) -> _device_windows.DeviceWindow
        self.timed_host_ns = 0  # host time of the calls whose device time the windows hold
        self.untimed_calls = 0  # asynchronous calls with no events (a capture was open)


def _join_device_work(aggregate, mark, busy_ns: int) -> None:
    work = aggregate.extras.get("device_work")
    if work is None:
        work = aggregate.extras["device_work"] = _DeviceWork()
        aggregate.extras[ASYNC_WORK] = True  # its busy time is launch time: no bandwidth from it
        aggregate.settle = _settle
    if mark is None:
        work.untimed_calls += 1
        return
    window, spare, timed = _device_windows.join(work.windows.get(mark.key), mark, _new_event, _gate)
    if window is None:  # no event could be made for a new window (a capture began): untimed
        work.untimed_calls += 1
        _local.__dict__.setdefault("spare_events", {})[mark.key] = mark.event
        return
    work.windows[mark.key] = window
    if spare is not None:
        _local.__dict__.setdefault("spare_events", {})[mark.key] = spare
    if timed and not window.broken:
        work.timed_host_ns += busy_ns
        _stream_tails()[mark.key] = window.end_event  # a later blocking copy here may wait for it
    else:
        work.untimed_calls += 1


def _settle(aggregate, final_deadline: float | None) -> bool:
    """The aggregate ended: read its device time if the work finished (query, no wait), else
    ask to be held; at the end of the start-up, poll a bounded time, then give up and mark.

    Its bandwidth (``coldstart.throughput``) is written only when every byte's time is
    known: host time of its blocking calls plus device time of the rest. A call without
    events (a capture was open, a device without events) or work unresolved at the end
    leaves the aggregate without one: a launch time is no transfer time."""
    work = aggregate.extras.get("device_work")
    if work is None:
        return True
    resolution = None
    unresolved = False
    if work.windows:  # else every call was untimed: nothing to wait for
        if final_deadline is not None:
            resolution = _device_windows.resolve_bounded(work.windows, _gate, final_deadline)
            unresolved = resolution is None  # still running at the end, or a capture stayed open
        else:
            resolution = _device_windows.try_resolve(work.windows, _gate)
            if resolution is None:
                return False
    aggregate.extras.pop("device_work", None)
    tails = _stream_tails()
    for key, window in work.windows.items():
        if tails.get(key) is window.end_event:
            tails.pop(key, None)  # another thread may have dropped it meanwhile
    untimed = work.untimed_calls + sum(w.calls for w in work.windows.values() if w.broken)
    if unresolved:
        untimed = work.untimed_calls + sum(w.calls for w in work.windows.values())  # blocking calls keep theirs
        aggregate.attributes[semconv.COPY_ASYNC_UNRESOLVED] = True
    elif resolution is not None and any(not w.broken for w in work.windows.values()):
        aggregate.attributes[semconv.COPY_ASYNC_S] = resolution.device_ns / 1e9
        aggregate.last_ns = max(aggregate.last_ns, resolution.last_end_ns)
        # Achieved bandwidth: the host-timed calls' own time plus the device time of the rest.
        effective_ns = max(0, aggregate.busy_ns - work.timed_host_ns) + resolution.device_ns
        if not untimed and effective_ns > 0 and aggregate.bytes > 0:
            aggregate.attributes[semconv.THROUGHPUT] = aggregate.bytes / (effective_ns / 1e9)
    if untimed:
        aggregate.attributes[semconv.COPY_UNTIMED_CALLS] = untimed
    return True


def _mark_blocking(plan: _Plan, device) -> None:
    """A blocking copy on a stream where timed work may still be queued: it will wait for that
    work first. Bracket it with events so that wait is not counted as the copy's time."""
    key, stream = _stream_of(device)
    tails = _stream_tails()
    tail = tails.get(key)
    if tail is None:
        return
    ran, done = _gate(tail.query)
    if not ran:
        return
    if done:
        tails.pop(key, None)
        return
    ran, before = _gate(_new_event)
    if ran:
        ran, _ = _gate(before.record, stream)
    if ran:
        plan.blocking_before, plan.blocking_stream = before, stream


def _finish_blocking(plan: _Plan, start: int, end: int) -> tuple[int, int]:
    """(start moved so the call's busy time is the copy's own device time, waited ns)."""
    ran, after = _gate(_new_event)
    if ran:
        ran, _ = _gate(after.record, plan.blocking_stream)
    if not ran:
        return start, 0
    try:
        device_ns = _device_windows.blocking_call_device_ns(plan.blocking_before, after, _gate)
    except Exception:
        device_ns = None
    if device_ns is None or device_ns >= end - start:
        return start, 0
    return end - device_ns, (end - start) - device_ns


def _waited_attribute(aggregate) -> None:
    waited = aggregate.extras.pop("waited_ns", 0)
    if waited:
        aggregate.attributes[semconv.COPY_WAITED_S] = waited / 1e9


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
