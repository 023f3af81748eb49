"""When the per-call device patches (tensor_ops, pinning) may record, shared between them.

One thread-local flag says "one of our per-call wrappers is already on this thread's
stack": a Tensor subclass with ``__torch_function__`` re-enters ``Tensor.to`` through our
wrapper, ``Module.half`` reaches ``Tensor.half``, ``UntypedStorage.to`` allocates with
``torch.empty(pin_memory=True)``. The outermost call is the one the host made; it is
counted once. A second counter says a CUDA graph capture is running on this thread: work
inside a capture is recorded into the graph, not executed, so it is not a copy or a cast.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .. import session as _session
from ..recorder import ThreadState, _threads, thread_state


class _NotCompiling:
    _is_compiling_flag = False


# torch.compiler (its module-level ``_is_compiling_flag``) once torch is imported (bound by
# bind_torch, from patch()); read as an attribute on every call, not through is_compiling().
_compiler: Any = _NotCompiling
# Per-thread signs that this thread is the one compiling (torch._guards contexts), bound by
# bind_torch; None where the private API moved (then every thread stands aside, as before).
_compile_context = None
_tracing_context = None


def _not_compiling() -> bool:
    return False


# torch.compiler.is_compiling once torch is imported (kept for callers that ask).
is_compiling = _not_compiling


def bind_torch() -> None:
    global is_compiling, _compiler, _compile_context, _tracing_context
    import torch

    is_compiling = torch.compiler.is_compiling
    if hasattr(torch.compiler, "_is_compiling_flag"):
        _compiler = torch.compiler
    else:  # pragma: no cover - a torch without the flag: ask the function
        _compiler = _FlagFromFunction(torch.compiler.is_compiling)
    try:
        from torch._guards import CompileContext, TracingContext

        _compile_context, _tracing_context = CompileContext.try_get, TracingContext.try_get
    except Exception:  # pragma: no cover - private API moved
        _compile_context = _tracing_context = None


class _FlagFromFunction:  # pragma: no cover - see bind_torch
    def __init__(self, function) -> None:
        self._function = function

    @property
    def _is_compiling_flag(self) -> bool:
        return bool(self._function())


def _compiling_here() -> bool:
    """torch's "compiling" flag is process-wide (torch 2.13: set for the whole compile
    session, whichever thread runs it). Work on a thread that is not compiling is real work
    and is recorded (issue 23, finding 9); the compiling thread's own calls carry fake or
    functional tensors and are not. A thread is compiling when it holds a dynamo compile or
    tracing context (thread-local in torch._guards) or a torch dispatch mode (make_fx,
    export's tracing)."""
    if _compile_context is None or _tracing_context is None:  # (set together)
        return True
    try:
        import torch

        return (_compile_context() is not None or _tracing_context() is not None
                or torch._C._len_torch_dispatch_stack() > 0)
    except Exception:  # torch's private API moved: stand aside, as when it is missing
        return True


def recording_state(session) -> ThreadState | None:
    """This thread's state when a per-call event may be recorded now into ``session`` (the
    caller's read of ``session.ACTIVE``), else None (the call passes through): no start-up
    open, one of our wrappers already on this thread's stack, a graph capture on this
    thread, or this thread compiling. One thread-local lookup."""
    if session is None or session.ended:
        return None
    try:
        state = _threads.state
    except AttributeError:
        state = thread_state()
    if state.busy or state.capturing:
        return None
    if _compiler._is_compiling_flag and _compiling_here():
        return None
    return state


def recording_session() -> _session.StartupSession | None:
    """The session to report a per-call event to, or None when this call must pass through."""
    session = _session.ACTIVE
    return session if recording_state(session) is not None else None


def enter() -> None:
    thread_state().busy = True


def leave() -> None:
    thread_state().busy = False


# Captures open in the whole process. While any runs, CUDA event calls from another thread
# can invalidate it (capture mode "global", vLLM's), so device timing stands aside. The
# count is raised under _count_lock *before* the capture begins (the capture wrappers call
# capture_started() ahead of torch's capture_begin), and every event call is made under the
# same lock by outside_captures(): an event call is either wholly before a capture begins or
# not made at all, whichever thread does it.
#
# Re-entrant (an RLock): a call made under the lock may come back to it on the same thread
# (a signal handler that ends the start-up and settles its aggregates runs between two
# bytecodes of whatever the thread was doing, possibly inside outside_captures), and must not
# deadlock on itself.
#
# Fork-safe by itself: a fork copies the lock in whatever state it is, and a thread that held
# it (inside an event call) does not exist in the child, so the child's copy would stay held
# for ever and its first event call, or reset_captures(), would hang. The child gets a new
# lock (os.register_at_fork below) and a count of none: captures running in the parent are
# not running in the child. reset_captures() also checks the process id, so it is safe even
# when another at-fork handler (the controller's) runs before ours.
_open_captures = 0
_count_lock = threading.RLock()
_lock_pid = os.getpid()


def outside_captures(call, *args):
    """``(True, call(*args))`` when no capture is open anywhere, else ``(False, None)``
    without calling: atomic against :func:`capture_started` on any thread."""
    with _count_lock:
        if _open_captures:
            return False, None
        return True, call(*args)


def capture_started() -> None:
    global _open_captures
    state = thread_state()
    state.capturing += 1
    with _count_lock:
        _open_captures += 1


def capture_ended() -> None:
    global _open_captures
    state = thread_state()
    state.capturing = max(0, state.capturing - 1)
    with _count_lock:
        _open_captures = max(0, _open_captures - 1)


def any_capture_open() -> bool:
    return _open_captures > 0


def reset_captures() -> None:
    global _open_captures
    _own_lock_after_fork()
    thread_state().capturing = 0
    with _count_lock:
        _open_captures = 0


def _own_lock_after_fork() -> None:
    """In a forked child whose at-fork handler has not run yet: take a new lock first."""
    if os.getpid() != _lock_pid:
        _after_fork_in_child()


def _after_fork_in_child() -> None:
    """A forked child: a new lock (the parent's copy may be held by a thread that is not
    here), no capture open (the parent's are not running here), this thread not capturing."""
    global _count_lock, _lock_pid, _open_captures
    _count_lock = threading.RLock()
    _lock_pid = os.getpid()
    _open_captures = 0
    thread_state().capturing = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
