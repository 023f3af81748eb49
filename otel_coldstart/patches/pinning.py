"""Page-locked ("pinned") host memory: phase ``pin``.

Pinning is what makes host-to-device copies fast (pageable memory goes through a staging
buffer and can cost ~40% of PCIe bandwidth), and it is itself slow: the kernel has to lock
every page. Two ways in, both recorded with their bytes:

- ``Tensor.pin_memory()`` (and ``UntypedStorage.pin_memory()``): a copy of pageable data
  into new pinned memory, ``coldstart.pin.kind=copy``. A tensor already pinned comes back
  as itself and records nothing.
- Allocation straight into pinned memory, ``torch.empty(..., pin_memory=True)`` as vLLM
  does for its staging buffers (also ``zeros``, ``ones``, ``full``, ``empty_strided``,
  ``tensor``): ``coldstart.pin.kind=alloc``. Calls without ``pin_memory=True`` cost one
  dictionary lookup.

Per-call patches, so removed at ``ready()``. The ``torch.*`` allocation functions are removed
earlier, when torch.compile starts its first compilation (patches/compile.py calls
:func:`suspend_allocators`): dynamo guards on the identity of a ``torch`` attribute it traces
through, so a function compiled while ``torch.empty`` was our wrapper would recompile when
``ready()`` put the original back. ``Tensor`` methods are not guarded that way.

TorchScript: ``torch.jit.script`` resolves ``torch.ones`` in a scripted function through a
table keyed by ``id()`` of the ``torch`` attribute (``torch.jit._builtins``), built once (at
torch's import in 2.13). Our wrapper's id is not in it, so scripting a function that calls
``torch.ones(n)`` during the start-up would fail ("Expected a value of type 'Tensor' for
argument '0'"). So each wrapper is registered there under its original's op while it is
installed, and removed before it is dropped (an id can be re-used by a later object).
"""

from __future__ import annotations

import time

from .. import semconv, session as _session
from .._errors import internal_errors, report_internal_error
from . import _guard
from ._tensor_bytes import tensor_nbytes
from ._wrapping import ColdstartWrapper, PatchSet, installed_version
from .tensor_ops import _timed_call

TARGETS = ("torch",)
HOT_PATH = True

_ALLOCATORS = ("empty", "zeros", "ones", "full", "empty_strided", "tensor")

_patches = PatchSet()
_allocator_patches = PatchSet()  # the torch.* functions: removed at the first compilation
_fake_types: tuple = ()


def get_version() -> str | None:
    return installed_version("torch")


def is_patched() -> bool:
    return bool(_patches) or bool(_allocator_patches)


def patch() -> None:
    import torch

    global _fake_types
    _guard.bind_torch()
    try:
        from torch._subclasses.fake_tensor import FakeTensor

        _fake_types = (FakeTensor,)
    except Exception:  # pragma: no cover - private API moved
        _fake_types = ()
    _patches.wrap(torch.Tensor, "pin_memory", _pin_copy("Tensor.pin_memory"))
    _patches.wrap(torch.UntypedStorage, "pin_memory", _pin_copy("UntypedStorage.pin_memory"))
    if not _compiled_already():
        for name in _ALLOCATORS:
            _allocator_patches.wrap(torch, name, _pinned_alloc)
        _register_with_torchscript(torch)


def unpatch() -> None:
    _patches.restore()
    _restore_allocators()


def suspend_allocators() -> None:
    """Put the original ``torch.empty`` and friends back before dynamo traces anything."""
    _restore_allocators()


def _restore_allocators() -> None:
    _unregister_from_torchscript()
    _allocator_patches.restore()


_torchscript_ids: list[int] = []  # ids of our wrappers entered in torch.jit's builtin table


def _builtin_table():
    try:
        from torch.jit import _builtins

        return _builtins._get_builtin_table()  # built at torch's import; built here otherwise
    except Exception:  # pragma: no cover - private API moved: scripting is then the host's risk
        return None


def _register_with_torchscript(torch) -> None:
    table = _builtin_table()
    if table is None:
        return
    with internal_errors("TorchScript builtin registration"):
        for name in _ALLOCATORS:
            wrapper = vars(torch).get(name)
            if not isinstance(wrapper, ColdstartWrapper):
                continue
            original = wrapper.__wrapped__
            # The original's own entry (kept, or added if the table was built while wrapped).
            op = table.setdefault(id(original), f"aten::{name}")
            table[id(wrapper)] = op
            _torchscript_ids.append(id(wrapper))


def _unregister_from_torchscript() -> None:
    if not _torchscript_ids:
        return
    table = _builtin_table()
    while _torchscript_ids:
        wrapper_id = _torchscript_ids.pop()
        if table is not None:
            table.pop(wrapper_id, None)


def _compiled_already() -> bool:
    """A compilation has happened in this process: its guards hold the original functions."""
    import sys

    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    return bool(getattr(convert_frame, "FRAME_COUNTER", 0))


def _pin_copy(where: str):
    def wrapper(wrapped, instance, args, kwargs):
        session = _session.ACTIVE
        state = _guard.recording_state(session)
        if state is None:
            return wrapped(*args, **kwargs)
        recorder = session.recorder
        # The source may be a mmap of a checkpoint: the copy is where its pages fault in
        # (counted around the call once the start-up expects storage reads: recorder.py).
        # Timed as tensor_ops times a call from host memory; the busy flag it holds counts
        # UntypedStorage.pin_memory, which goes through Tensor.pin_memory, once.
        result, start, end, io_before, io_after = _timed_call(wrapped, args, kwargs, True)
        if result is not instance:
            try:
                if not (_fake_types and isinstance(result, _fake_types)):
                    if io_before is not None and io_after is not None:
                        recorder.count(state, semconv.PHASE_PIN, semconv.PIN_KIND_COPY, _COPY_ATTRIBUTES,
                                       tensor_nbytes(result), start, end, io_after.read_bytes - io_before.read_bytes,
                                       io_after.major_faults - io_before.major_faults)
                    else:
                        recorder.count(state, semconv.PHASE_PIN, semconv.PIN_KIND_COPY, _COPY_ATTRIBUTES,
                                       tensor_nbytes(result), start, end)
            except Exception:
                report_internal_error(where)
        return result

    return wrapper


_COPY_ATTRIBUTES = {semconv.PIN_KIND: semconv.PIN_KIND_COPY}  # copied per aggregate by the recorder


def _pinned_alloc(wrapped, instance, args, kwargs):
    if kwargs.get("pin_memory") is not True:
        return wrapped(*args, **kwargs)
    session = _guard.recording_session()
    if session is None:
        return wrapped(*args, **kwargs)
    _guard.enter()
    try:
        start = time.time_ns()
        result = wrapped(*args, **kwargs)
        end = time.time_ns()
    finally:
        _guard.leave()
    try:
        if not (_fake_types and isinstance(result, _fake_types)):
            _record(session, semconv.PIN_KIND_ALLOC, tensor_nbytes(result), start, end)
    except Exception:
        report_internal_error("pinned allocation")
    return result


def _record(session, kind: str, nbytes: int, start: int, end: int, read_bytes: int = 0,
            major_faults: int = 0) -> None:
    # A fresh allocation touches no file: no storage reads to attribute.
    session.recorder.add(semconv.PHASE_PIN, kind, {semconv.PIN_KIND: kind}, nbytes, start, end,
                         read_bytes, major_faults)
