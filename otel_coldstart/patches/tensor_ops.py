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
it, so their call time says nothing about the work. For those, this module picks the
stream the work runs on (the source device's for D2H and d2d, as Copy.cu does; the
destination's for a cast between GPUs, whose last work runs there) and
``_device_windows.py`` times it with CUDA events, never a wait (``coldstart.copy.async_s``,
``coldstart.copy.waited_s``). A call that returns its source (``.to()`` to where and what
it already is) is known before it runs and records no event. A copy that is the first CUDA
touch initialises CUDA before its clock starts.

These wrappers sit on the hottest paths torch has, so they are removed at ``ready()``:
after it, ``torch.Tensor.to is`` the original. While the start-up is open, a call that stays
in host memory (a host cast, ``.half()``, a host ``copy_``: every call of a CPU start-up and
most casts of a GPU one) takes a short path (:func:`_host_call`): one thread-local lookup,
two clock reads, the source's byte count, and an addition to this thread's aggregate
(recorder.Recorder.count); no plan, no device question, no syscall unless the start-up
expects storage reads (recorder.py). Calls that may reach a device take the full path below.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .. import probes, semconv, session as _session
from .._errors import report_internal_error
from ..recorder import thread_state
from . import _guard
from ._tensor_bytes import tensor_nbytes
from ._wrapping import LoadedOnFirstUse, PatchSet, installed_version

# Copy.cu's byte rules and the CUDA-event windows: imported by the first call that reaches a
# GPU (a CPU start-up, CUDA build of torch or not, never loads them).
_cuda_copy = LoadedOnFirstUse(globals(), f"{__package__}._cuda_copy")
_device_windows = LoadedOnFirstUse(globals(), f"{__package__}._device_windows")

TARGETS = ("torch",)
HOT_PATH = True

_patches = PatchSet()
_fake_types: tuple = ()
_real_types: frozenset = frozenset()
# from dtype -> to dtype -> (detail, span attributes), made once per pair: the recorder keys
# aggregates by the detail and copies the attributes per aggregate. One object per pair, so
# the per-call path makes no tuple and the recorder can compare details by identity.
_casts: dict = {}


class _CudaSeen:
    """Per start-up (``session.state``): CUDA is initialised; until then a copy to CUDA
    initialises it before its clock starts."""

    up = False


def _cuda_up() -> bool:
    session = _session.ACTIVE
    return session is not None and session.state(__name__, _CudaSeen).up
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
        if io_before is None or io_after is None:  # (sampled together)
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

    __slots__ = ("queued", "mark", "timed", "blocking")

    def __init__(self, queued: bool) -> None:
        self.queued = queued
        self.mark = None  # _device_windows.Mark before asynchronous device work
        self.timed = False  # the call's device work is asynchronous: it should have a mark
        self.blocking = None  # _device_windows.mark_blocking's bracket: a blocking copy behind queued work


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
        plan.mark = _device_windows.mark(work_device)
    elif _device_windows.work_pending():
        plan.blocking = _device_windows.mark_blocking(work_device)
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
        elif plan is not None and plan.mark is not None:  # a no-op after all: the event goes back
            _device_windows.give_back(plan.mark)
        return result

    return wrapper


def _plan_move(method: str, instance, args, kwargs, from_host: bool) -> _Plan:
    queued = _move_is_non_blocking(method, args, kwargs)
    if not from_host and not (_cuda_possible and instance.is_cuda):
        return _other_device_plan(_move_goes_to_host(method, args, kwargs), queued)
    if not _cuda_possible:
        return _untimed(queued)
    if from_host:
        if method not in ("to", "cuda") or not (queued or not _cuda_up() or _device_windows.work_pending()):
            return _untimed(queued)  # a host cast or a blocking copy with nothing queued before it
        if method == "to" and args and type(args[0]) is _dtype_type and kwargs.get("device") is None:
            return _untimed(queued)  # .to(dtype): stays on the host
        target = _move_target_gpu(method, instance, args, kwargs)
        if target is not None and not _cuda_up():
            _initialise_cuda_first()
        return _plan(target, "h2d", queued)
    if _move_returns_self(method, instance, args, kwargs):
        return _untimed(queued)  # a no-op: no event (finding 8)
    if _move_goes_to_host(method, args, kwargs):
        return _plan(instance.device, "d2h", queued)
    return _plan(_gpu_work_device(instance, *_move_target(method, args, kwargs)), None, queued)


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
            # D2H and device-to-device: the source device's stream; a cast between GPUs: the
            # destination's (_gpu_work_device).
            plan = _plan(source.device, "d2h", queued) if instance.is_cpu else _plan(
                _gpu_work_device(source, instance.device, instance.dtype), None, queued)
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
    on_add: Callable[..., None] | None = None
    queued = False
    if plan is not None:
        queued = plan.queued and phase in _DEVICE_PHASES
        if plan.timed and phase in _TIMED_PHASES:
            def on_add(aggregate, mark=plan.mark):
                _device_windows.join_call(aggregate, mark, nbytes, start, end)
        elif plan.blocking is not None:
            copy = _device_windows.finish_blocking(plan.blocking, start, end)
            if copy is not None:
                def on_add(aggregate):
                    _device_windows.add_blocking(aggregate, copy)
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


_DTYPE_METHODS = {"half": "float16", "bfloat16": "bfloat16", "float": "float32"}


def _move_target(method: str, args, kwargs):
    """(device, dtype) a move of a CUDA tensor asks for, either None when not named; raises
    when the arguments cannot be read (the caller then assumes a copy)."""
    import torch

    if method in _DTYPE_METHODS:
        return None, getattr(torch, _DTYPE_METHODS[method])
    if method == "cuda":
        target = kwargs.get("device", args[0] if args else None)
        return (torch.device("cuda") if target is None else _cuda_or_none(target)), None
    if method == "cpu":
        return torch.device("cpu"), None
    kwargs = dict(kwargs)
    kwargs.pop("copy", None)
    # Tensor.to's own parser (Module.to uses it too): every signature, tensor "other" included.
    device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
    return device, dtype


def _same_gpu(device, other) -> bool:
    """``device`` (as named by the caller: "cuda" is the current one) is ``other``."""
    if device is None:
        return True
    if device.type != other.type:
        return False
    if device.index is None:
        import torch

        return torch.cuda.current_device() == other.index
    return device.index == other.index


def _move_returns_self(method: str, instance, args, kwargs) -> bool:
    """A move of a CUDA tensor to the device and dtype it has: torch returns the tensor itself
    (Tensor.to's alias rule; .cuda() "no copy is performed"), nothing runs on the device, so
    no event is recorded (issue 23 finding 8). Unsure (copy=True, a memory format, arguments
    we cannot read): False, events as for a copy."""
    import torch

    try:
        if method == "to":
            # to(device, dtype, non_blocking, copy) | to(dtype | tensor, non_blocking, copy)
            copy_at = 3 if args and args[0] is not None and type(args[0]) is not _dtype_type \
                and not isinstance(args[0], torch.Tensor) else 2
            if kwargs.get("copy") or len(args) > copy_at and args[copy_at] or kwargs.get("memory_format"):
                return False
            args = args[:copy_at]
        device, dtype = _move_target(method, args, kwargs)
        return _same_gpu(device, instance.device) and (dtype is None or dtype == instance.dtype)
    except Exception:  # the host's arguments, probed: its own call raises what is wrong
        return False


def _gpu_work_device(source, device, dtype):
    """The device whose stream carries a GPU tensor's cast or copy to ``device``/``dtype``.
    Copy.cu runs a copy between GPUs on the source device's stream, and makes the
    destination's current stream wait for it; with a dtype change and no peer access, a
    blocking cast converts on the destination after the copy (copy_kernel_cuda's
    temporaries). So a cast between GPUs is timed on the destination's stream, whose end
    event completes after all of it, peer access or not."""
    try:
        if device is not None and device.type == "cuda" and dtype is not None and dtype != source.dtype \
                and not _same_gpu(device, source.device):
            if device.index is None:
                import torch

                device = torch.device("cuda", torch.cuda.current_device())
            return device
    except Exception:  # the host's arguments, probed: the source's device, as for any copy
        pass
    return source.device


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
    except Exception:  # the host's arguments, probed: its own call raises what is wrong
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
    if session is not None:
        session.state(__name__, _CudaSeen).up = torch.cuda.is_initialized()


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
