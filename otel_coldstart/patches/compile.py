"""torch.compile / dynamo compilation: phase ``compile``.

torch provides the hook: ``torch._dynamo.callback``'s start and end callbacks run around
each compilation (the outermost one when compilations nest), with a compile id and what
triggered it (``dynamo`` for a new frame, ``lazy_backward``, ``cudagraph_recording``...).
Each becomes one ``coldstart.compile`` span, current while it runs so that graph captures
made by the compiler nest under it. Registering two callbacks is the whole patch
(plus re-registering them when ``torch._dynamo.reset()`` clears them), so it stays after ``ready()``, where a compilation (a new
shape on a first request) is marked ``coldstart.after_ready``.

Not included: importing ``torch._dynamo`` itself, which happens before the first callback.
"""

from __future__ import annotations

import threading

from .. import semconv
from .. import session as _session
from .._errors import report_internal_error
from . import pinning
from ._wrapping import PatchSet, installed_version

TARGETS = ("torch._dynamo",)
HOT_PATH = False

_handler = None  # the callback handler we registered with (once per process)
_patches = PatchSet()


class _OpenCompilations:
    """Compilations in progress in this start-up, innermost last (kept on its session).
    Per start-up, not per thread: torch runs the end callbacks of a compilation on
    whichever thread ends the last one pending."""

    __slots__ = ("lock", "stack")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stack: list = []


def _open_compilations(session) -> _OpenCompilations:
    return session.state(__name__, _OpenCompilations)


def get_version() -> str | None:
    return installed_version("torch")


def is_patched() -> bool:
    return _handler is not None


def patch() -> None:
    global _handler
    if _handler is not None:
        return
    from torch._dynamo.callback import callback_handler

    _register(callback_handler)
    # torch._dynamo.reset() (which vLLM and test suites call) clears every callback.
    _patches.wrap(callback_handler, "clear", _clear_then_register)
    _handler = callback_handler


def _register(handler) -> None:
    handler.register_start_callback(_on_compile_start)
    handler.register_end_callback(_on_compile_end)


def _clear_then_register(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if _handler is not None:
        try:
            _register(_handler)
        except Exception:
            report_internal_error("compile callbacks")
    return result


def unpatch() -> None:
    global _handler
    handler, _handler = _handler, None
    _patches.restore()
    if handler is None:
        return
    for remove, callback in ((handler.remove_start_callback, _on_compile_start),
                             (handler.remove_end_callback, _on_compile_end)):
        try:
            remove(callback)
        except ValueError:
            pass


def _on_compile_start(args) -> None:
    try:
        pinning.suspend_allocators()  # before dynamo traces (and guards on) torch.empty
    except Exception:
        report_internal_error("compile start")
    try:
        session = _session.ACTIVE
        if session is None:
            return
        attrs = {semconv.COMPILE_ID: str(getattr(args, "compile_id", ""))}
        trigger = getattr(args, "callback_trigger", None)
        if trigger is not None:
            attrs[semconv.COMPILE_TRIGGER] = getattr(trigger, "name", str(trigger)).lower()
        container = session.start_container(semconv.PHASE_COMPILE, attrs)
        state = _open_compilations(session)
        with state.lock:
            state.stack.append(container)
    except Exception:
        report_internal_error("compile start")


def _on_compile_end(args) -> None:
    try:
        session = _session.ACTIVE
        if session is None:
            return
        state = _open_compilations(session)
        with state.lock:
            container = state.stack.pop() if state.stack else None
        if container is not None:
            container.finish()
    except Exception:
        report_internal_error("compile end")
