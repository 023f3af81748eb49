"""Tensor moves and casts: ``Tensor.to/.cuda/.copy_`` and ``Module.to/.cuda/.half/...``.

Why these: accelerate moves weights with ``.to(device)``, transformers 5 with
``.to(device, dtype)``, vLLM with ``param.data.copy_(w)``; users cast whole models with
``model.to(dtype)`` / ``.half()``. Each call is classified by what actually happened
(source and result device and dtype), not by its arguments, so a no-op costs one check and
records nothing. Calls are aggregated by the recorder, never one span each.

These wrappers sit on the hottest paths torch has, so they are removed at ``ready()``:
after it, ``torch.Tensor.to is`` the original.
"""

from __future__ import annotations

import threading
import time

from .. import probes, semconv
from .. import session as _session
from .._errors import report_internal_error
from ._wrapping import PatchSet

TARGETS = ("torch",)
HOT_PATH = True

_patches = PatchSet()
_local = threading.local()  # .busy: a wrapper of ours is already on this thread's stack
_fake_types: tuple = ()


def get_version() -> str | None:
    try:
        import torch

        return torch.__version__
    except Exception:  # pragma: no cover - torch missing or broken
        return None


def is_patched() -> bool:
    return bool(_patches)


def patch() -> None:
    import torch

    _resolve_fake_types()
    # Module.half/.bfloat16/.float reach tensors through the Tensor methods of the same name.
    for name in ("to", "cuda", "half", "bfloat16", "float"):
        _patches.wrap(torch.Tensor, name, _tensor_to)
    _patches.wrap(torch.Tensor, "copy_", _tensor_copy)
    for name, phase in (("to", None), ("cuda", semconv.PHASE_H2D), ("half", semconv.PHASE_CAST),
                        ("bfloat16", semconv.PHASE_CAST), ("float", semconv.PHASE_CAST)):
        _patches.wrap(torch.nn.Module, name, _module_wrapper(name, phase))


def unpatch() -> None:
    _patches.restore()


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


def _is_compiling() -> bool:
    import torch

    return torch.compiler.is_compiling()


def _should_record() -> "_session.StartupSession | None":
    session = _session.ACTIVE
    if session is None or session.ended or getattr(_local, "busy", False):
        return None
    return session


def _tensor_to(wrapped, instance, args, kwargs):
    session = _should_record()
    if session is None or _is_compiling():
        return wrapped(*args, **kwargs)
    _local.busy = True  # a __torch_function__ subclass re-enters this wrapper: count once
    try:
        start = time.time_ns()
        io_before = probes.thread_io()
        result = wrapped(*args, **kwargs)
        io_after = probes.thread_io()
        end = time.time_ns()
    finally:
        _local.busy = False
    if result is not instance:
        try:
            _record(session, instance, result, instance, start, end, io_before, io_after,
                    bool(kwargs.get("non_blocking", False)))
        except Exception:
            report_internal_error("Tensor.to")
    return result


def _tensor_copy(wrapped, instance, args, kwargs):
    session = _should_record()
    if session is None or _is_compiling():
        return wrapped(*args, **kwargs)
    _local.busy = True
    try:
        start = time.time_ns()
        io_before = probes.thread_io()
        result = wrapped(*args, **kwargs)
        io_after = probes.thread_io()
        end = time.time_ns()
    finally:
        _local.busy = False
    try:
        source = args[0] if args else kwargs.get("src")
        non_blocking = bool(args[1]) if len(args) > 1 else bool(kwargs.get("non_blocking", False))
        _record(session, source, instance, instance, start, end, io_before, io_after, non_blocking)
    except Exception:
        report_internal_error("Tensor.copy_")
    return result


def _record(session, source, destination, sized, start, end, io_before, io_after, non_blocking) -> None:
    if _fake_types and (isinstance(source, _fake_types) or isinstance(destination, _fake_types)):
        return
    src_device = source.device.type
    dst_device = destination.device.type
    if src_device == "meta" or dst_device == "meta":
        return  # no data moves: allocation on or from the meta device
    src_dtype, dst_dtype = source.dtype, destination.dtype
    phase = _phase_for(src_device, dst_device, src_dtype != dst_dtype)
    if src_dtype != dst_dtype:
        detail = (src_dtype, dst_dtype)
        detail_attrs = {semconv.CAST_FROM: _dtype_name(src_dtype), semconv.CAST_TO: _dtype_name(dst_dtype)}
    else:
        detail, detail_attrs = None, None
    # Bytes read from the source: for a copy_ that broadcasts, what the destination holds.
    nbytes = destination.numel() * source.element_size() if sized is destination else source.nbytes
    pinned = None
    if phase == semconv.PHASE_H2D:
        # is_pinned() on a CPU tensor is only asked when the target is a GPU: elsewhere it
        # can create a CUDA context the host never asked for.
        pinned = source.is_pinned()
    session.recorder.add(
        phase, detail, detail_attrs, nbytes, start, end,
        io_after.read_bytes - io_before.read_bytes, io_after.major_faults - io_before.major_faults,
        pinned=pinned, non_blocking=non_blocking and phase != semconv.PHASE_CAST,
    )


def _phase_for(src_device: str, dst_device: str, dtype_changed: bool) -> str:
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


def _module_wrapper(method: str, fixed_phase: str | None):
    """``Module.to`` and friends: a parent span for the per-tensor work the call causes,
    written only if there was any."""

    def wrapper(wrapped, instance, args, kwargs):
        session = _should_record()
        if session is None or _is_compiling():
            return wrapped(*args, **kwargs)
        pending = None
        try:
            phase = fixed_phase or _module_to_phase(args, kwargs)
            pending = session.push_pending(semconv.SPAN_MODULE_TO if method == "to" else f"coldstart.module.{method}",
                                           phase, {})
        except Exception:
            report_internal_error(f"Module.{method}")
        try:
            return wrapped(*args, **kwargs)
        finally:
            if pending is not None:
                try:
                    session.pop_pending(pending)
                except Exception:
                    report_internal_error(f"Module.{method}")

    return wrapper


def _module_to_phase(args, kwargs) -> str:
    import torch

    device, dtype, _non_blocking, _fmt = torch._C._nn._parse_to(*args, **kwargs)
    if device is not None and device.type not in ("cpu", "meta"):
        return semconv.PHASE_H2D
    if dtype is not None:
        return semconv.PHASE_CAST
    return semconv.PHASE_D2H if device is not None else semconv.PHASE_CAST
