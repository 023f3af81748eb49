"""The first CUDA initialisation in the process: phase ``runtime_init``.

Every fresh process pays it (driver and runtime start, device discovery), and on small
models it is often the largest single item of the start-up. Everything reaches
``torch.cuda._lazy_init``: the ``torch.cuda.*`` functions call it by its module name, and
C++ (the first tensor created on a CUDA device) calls it through the ``torch.cuda`` module
too, until it has succeeded once. So wrapping the module attribute sees the first
initialisation whoever triggers it.

One span, once: the call that initialised CUDA. If CUDA was initialised before
``instrument()``, there is nothing left to see and nothing is patched. A failed
initialisation (no driver, no device) is recorded once per start-up, with its error, and
the host's exception propagates unchanged. ``_lazy_init`` is called by most ``torch.cuda``
functions, so the wrapper removes itself as soon as CUDA is up (and at ``ready()`` at the
latest).

Not included: the primary CUDA context of a device is created on its first allocation, so
that cost lands in whatever span makes it (usually the first host-to-device copy).
"""

from __future__ import annotations

import threading
import time

from .. import semconv
from .. import session as _session
from .._errors import report_internal_error
from ._wrapping import PatchSet, installed_version

TARGETS = ("torch",)
HOT_PATH = True

_patches = PatchSet()
_lock = threading.Lock()
_local = threading.local()  # .busy: _lazy_init re-enters itself through its queued calls
_initialised_seen = False  # CUDA came up under our eyes: once per process
_failure_recorded_for: object = None  # the session that already has a failed-init span


def get_version() -> str | None:
    return installed_version("torch")


def is_patched() -> bool:
    return bool(_patches)


def patch() -> None:
    import torch

    if _initialised_seen or torch.cuda.is_initialized():
        return  # already up: its cost was paid before instrument(), inside "import"
    _patches.wrap(torch.cuda, "_lazy_init", _lazy_init)


def unpatch() -> None:
    _patches.restore()


def _lazy_init(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or getattr(_local, "busy", False) or _initialised_seen:
        return wrapped(*args, **kwargs)
    try:
        import torch

        already = torch.cuda.is_initialized()
    except Exception:
        report_internal_error("runtime init")
        already = True
    if already:
        return wrapped(*args, **kwargs)
    _local.busy = True
    start = time.time_ns()
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        _finish(session, start, error)
        raise
    finally:
        _local.busy = False
    _finish(session, start, None)
    return result


def _finish(session, start: int, error: BaseException | None) -> None:
    global _initialised_seen, _failure_recorded_for
    try:
        import torch

        end = time.time_ns()
        with _lock:
            if error is None:
                # A thread that waited on torch's own init lock sees the transition too.
                if _initialised_seen or not torch.cuda.is_initialized():
                    return
                _initialised_seen = True
            else:
                if _failure_recorded_for is session:
                    return
                _failure_recorded_for = session
        attrs = {semconv.RUNTIME_BACKEND: "cuda"}
        if error is None:
            attrs[semconv.RUNTIME_DEVICE_COUNT] = torch.cuda.device_count()
        container = session.start_container(semconv.PHASE_RUNTIME_INIT, attrs, start_ns=start, make_current=False)
        container.finish(error=error, end_ns=end)
        if error is None:
            _patches.restore()  # called by most torch.cuda functions: nothing left to see
    except Exception:
        report_internal_error("runtime init")
