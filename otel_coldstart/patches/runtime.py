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

The driver starts earlier than that when the first CUDA question is
``torch.cuda.is_available()`` (or ``device_count()`` without NVML): it asks the CUDA runtime
for the device count (``torch._C._cuda_getDeviceCount`` -> ``cudaGetDeviceCount``), which
runs ``cuInit`` without ``_lazy_init``. That first call is its own ``runtime_init`` span,
``coldstart.runtime.step=driver``; the ``_lazy_init`` one is ``step=lazy_init``. If the
driver library is already loaded when ``instrument()`` runs (Linux: ``libcuda.so`` in
``/proc/self/maps``), the driver may have started before: the first call is then a span only
if it took 10 ms or more (a real ``cuInit`` takes 100 ms and up; a started driver answers in
microseconds). Inside ``_lazy_init`` it is part of that span, not a second one.

A copy that is the first CUDA touch (``t.to("cuda")``) initialises CUDA before its own clock
starts (patches/tensor_ops.py), so the copy's time and bandwidth do not contain the init.

Not included: the primary CUDA context of a device is created on its first allocation, so
that cost lands in whatever span makes it (usually the first host-to-device copy).

ROCm builds (``torch.version.hip``) run the same ``torch.cuda`` API on HIP: the spans say
``coldstart.runtime.backend=rocm``, and the driver may already be up when the kernel
driver's ``/dev/kfd`` is open (the HIP runtime is linked into torch, so its being mapped says
nothing). The ``lazy_init`` span also names the host link and its bandwidth bound
(``_host_link.py``), which the analyzer holds copy bandwidths against.
"""

from __future__ import annotations

import os
import threading
import time

from .. import semconv, session as _session
from .._errors import internal_errors, report_internal_error
from ._wrapping import LoadedOnFirstUse, PatchSet, installed_version

_host_link = LoadedOnFirstUse(globals(), f"{__package__}._host_link")  # read once, when CUDA comes up

TARGETS = ("torch",)
HOT_PATH = True

_patches = PatchSet()
_driver_patches = PatchSet()  # torch._C._cuda_getDeviceCount, until its first call
_driver_seen = False  # the driver's start was observed (or is part of _lazy_init): once per process
# Shortest first device-count call recorded as the driver's start: 0 when the driver library
# was not loaded at patch(); 10 ms when it was (the driver may already be up).
_DRIVER_MAYBE_UP_NS = 10_000_000
_driver_min_ns = 0
_lock = threading.Lock()
_local = threading.local()  # .busy: _lazy_init re-enters itself through its queued calls
_initialised_seen = False  # CUDA came up under our eyes: once per process


class _FailureRecorded:
    """Per start-up (``session.state``): a failed CUDA initialisation has its span."""

    recorded = False


def get_version() -> str | None:
    return installed_version("torch")


def is_patched() -> bool:
    return bool(_patches) or bool(_driver_patches)


def patch() -> None:
    import torch

    if _initialised_seen or torch.cuda.is_initialized():
        return  # already up: its cost was paid before instrument(), inside "import"
    _patches.wrap(torch.cuda, "_lazy_init", _lazy_init)
    if not _driver_seen and hasattr(torch._C, "_cuda_getDeviceCount"):
        global _driver_min_ns
        _driver_min_ns = _DRIVER_MAYBE_UP_NS if _driver_loaded() else 0
        _driver_patches.wrap(torch._C, "_cuda_getDeviceCount", _driver_start)


def unpatch() -> None:
    _patches.restore()
    _driver_patches.restore()


def _backend() -> str:
    """``rocm`` on a ROCm build of torch (``torch.version.hip``: the torch.cuda API runs on
    HIP there), else ``cuda``."""
    import torch

    return semconv.RUNTIME_BACKEND_ROCM if getattr(torch.version, "hip", None) else semconv.RUNTIME_BACKEND_CUDA


def _driver_loaded() -> bool:
    """The driver may have started before instrument(). Linux only; elsewhere False.

    CUDA: the driver library (``libcuda.so``) is mapped, which torch's CUDA runtime does on
    its first call, not at import. ROCm: the HIP runtime and its HSA runtime are linked into
    torch, so they are mapped from ``import torch`` on and say nothing; the HSA runtime opens
    the kernel driver's ``/dev/kfd`` when it starts, so an open ``/dev/kfd`` is the sign."""
    try:
        if _backend() == semconv.RUNTIME_BACKEND_ROCM:
            return _kfd_open()
        with open("/proc/self/maps", "rb") as maps:
            return b"libcuda.so" in maps.read()
    except Exception:  # no /proc or torch's build unreadable: not known to have started
        return False


def _kfd_open(fd_dir: str = "/proc/self/fd") -> bool:
    for name in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, name)) == "/dev/kfd":
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def _driver_start(wrapped, instance, args, kwargs):
    """The first ``cudaGetDeviceCount`` of the process: ``cuInit``, the driver's start."""
    global _driver_seen
    session = _session.ACTIVE
    if session is None or _driver_seen:
        return wrapped(*args, **kwargs)
    if getattr(_local, "busy", False):  # inside _lazy_init: part of that span
        _driver_seen = True
        _restore_driver_patch()
        return wrapped(*args, **kwargs)
    start = time.time_ns()
    result = wrapped(*args, **kwargs)  # never raises: 0 when there is no driver or device
    end = time.time_ns()
    with internal_errors("runtime driver start"):
        with _lock:
            if _driver_seen:
                return result
            _driver_seen = True
        if end - start < _driver_min_ns:  # the driver was up already: nothing started here
            _restore_driver_patch()
            return result
        attrs = {semconv.RUNTIME_BACKEND: _backend(), semconv.RUNTIME_STEP: semconv.RUNTIME_STEP_DRIVER}
        if isinstance(result, int):
            attrs[semconv.RUNTIME_DEVICE_COUNT] = result
        container = session.start_container(semconv.PHASE_RUNTIME_INIT, attrs, start_ns=start, make_current=False)
        container.finish(end_ns=end)
    _restore_driver_patch()
    return result


def _restore_driver_patch() -> None:
    with internal_errors("runtime driver start"):
        _driver_patches.restore()  # asked by every is_available(): nothing left to see


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
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as error:
            _finish(session, start, error)
            raise
        # Still busy: _finish's own device_count() reaches the driver patch on a CUDA build
        # (torch._C._cuda_getDeviceCount), and is part of this span, not a second driver start.
        _finish(session, start, None)
    finally:
        _local.busy = False
    return result


def _finish(session, start: int, error: BaseException | None) -> None:
    global _initialised_seen
    with internal_errors("runtime init"):
        import torch

        end = time.time_ns()
        with _lock:
            if error is None:
                # A thread that waited on torch's own init lock sees the transition too.
                if _initialised_seen or not torch.cuda.is_initialized():
                    return
                _initialised_seen = True
            else:
                failures = session.state(__name__, _FailureRecorded)  # one span per start-up
                if failures.recorded:
                    return
                failures.recorded = True
        attrs = {semconv.RUNTIME_BACKEND: _backend(), semconv.RUNTIME_STEP: semconv.RUNTIME_STEP_LAZY_INIT}
        if error is None:
            attrs[semconv.RUNTIME_DEVICE_COUNT] = torch.cuda.device_count()
            # The bound of every h2d/d2h bandwidth figure of this start-up (_host_link.py).
            attrs.update(_host_link.link_attributes(torch))
        container = session.start_container(semconv.PHASE_RUNTIME_INIT, attrs, start_ns=start, make_current=False)
        container.finish(error=error, end_ns=end)
        if error is None:
            _patches.restore()  # called by most torch.cuda functions: nothing left to see
            _driver_patches.restore()  # the driver is up too
