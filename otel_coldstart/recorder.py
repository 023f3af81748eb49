"""Turns many small calls into few spans.

A model has hundreds to tens of thousands of tensors; one span per ``.to()`` would bury the
trace and cost more than the copy. Calls are summed per (thread, parent span, phase,
detail) into an :class:`Aggregate`, written as one leaf span when its parent ends (or when
the start-up ends) with the calls' count, bytes, busy time and first/last timestamps. So
span count grows with shards and phases, never with tensors.

The per-call path is the hottest code we run (every intercepted ``.to()``, ``copy_``,
``get_tensor`` while the start-up is open), so it does the least that keeps the figures true
(issue 24): one thread-local lookup (:class:`ThreadState`), the parent from a per-thread
cache checked by identity (the OTel context object and the session's parent generation: no
context walk per call), the aggregate the thread's last call joined (else one dictionary
lookup), and additions to it under the owning thread's own lock (uncontended: another
thread takes it only to close the aggregate when it is written, so a call is in exactly one
written aggregate). No syscall per call until the start-up expects storage reads
(:meth:`Recorder.expect_storage_reads`: a checkpoint file under 99% resident when its read
began, or of unknown residency); from then on each call's reads are counted around it on
its thread, where a call that reads from storage takes far longer than the two syscalls.
A container span's start and end look at the counters of the thread it is on
(:meth:`Recorder.boundary`) and switch per-call counting on if reads happened anyway (a
worker thread that opens no container is never looked at: its reads stay uncounted until a
file of ours expects reads).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from opentelemetry import context as _otel_context
from opentelemetry.trace import SpanContext

from . import own_cost, probes, semconv
from ._errors import internal_errors, report_internal_error

if TYPE_CHECKING:  # pragma: no cover
    from .session import PendingParent, StartupSession


# Aggregate.extras key a patch sets when a call's device work was asynchronous (its call
# time is launch time): no bandwidth from busy time (patches/tensor_ops.py).
ASYNC_WORK = "async_work"


# --- per-thread state -------------------------------------------------------------------------


class ThreadState:
    """What the per-call wrappers keep per thread, reached with one thread-local lookup.

    ``busy``: one of our per-call wrappers is on this thread's stack (a re-entry through a
    ``__torch_function__`` subclass, ``Module.half`` reaching ``Tensor.half``, counts
    nothing: patches/_guard.py). ``capturing``: CUDA graph captures open on this thread.
    ``acc``: this thread's :class:`_Accumulator` for the recorder it last recorded into.
    ``lock``: guards the additions to this thread's aggregates (see :meth:`Recorder.add`).
    ``io_mark``: this thread's storage-read counters before its first call since the last
    container boundary, while calls are not sampled one by one (None: take it at the next
    call; see :meth:`Recorder.boundary`)."""

    __slots__ = ("busy", "capturing", "acc", "lock", "io_mark")

    def __init__(self) -> None:
        self.busy = False
        self.capturing = 0
        self.acc: _Accumulator | None = None
        self.lock = threading.RLock()  # re-entrant: a signal handler on this thread may end the start-up mid-add
        self.io_mark: probes.ThreadIO | None = None


_threads = threading.local()


def thread_state() -> ThreadState:
    try:
        return _threads.state
    except AttributeError:
        state = _threads.state = ThreadState()
        return state


def _after_fork_in_child() -> None:
    # The forking thread's state lives on in the child; its lock may not be held by a thread
    # that is gone (only this thread ever takes it to add), but a new one costs nothing.
    state = getattr(_threads, "state", None)
    if state is not None:
        state.lock = threading.RLock()
        state.acc = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _context_getter() -> Callable[[], Any]:
    """The current OTel Context object, as cheaply as this API version allows: the runtime
    context's ContextVar directly (a C call) where it is the default contextvars one."""
    runtime = getattr(_otel_context, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    getter = getattr(variable, "get", None)
    return getter if callable(getter) else _otel_context.get_current


_current_context = _context_getter()


class _Accumulator:
    """One thread's view of one recorder: the parent cache and the aggregates it adds to.

    The parent of work done now is a pure function of the OTel context (an immutable object:
    attaching makes a new one), the thread's pending ``Module.to`` parents and its ambient
    ``safe_open`` parents; the session bumps ``parent_gen`` whenever one of the latter
    changes. So the cached parent stands while the context object and the generation are
    the same ones."""

    __slots__ = ("recorder", "context", "generation", "parent", "parent_key", "slots",
                 "last", "last_phase", "last_detail")

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.context = _NOT_LOOKED_UP
        self.generation = -1
        self.parent: Any = None  # a SpanContext or a PendingParent
        self.parent_key: Hashable = None
        self.slots: dict[tuple, Aggregate] = {}  # (parent key, phase, detail) -> this thread's aggregate
        # The aggregate the last call joined, its phase and detail: the next call with the same
        # parent, phase and (the same object for) detail joins it without a key and a lookup.
        self.last: Aggregate | None = None
        self.last_phase: str | None = None
        self.last_detail: Hashable = None


_NOT_LOOKED_UP = object()


class Aggregate:
    __slots__ = (
        "phase", "parent", "detail", "thread_id", "thread_name", "calls", "bytes", "busy_ns",
        "first_ns", "last_ns", "read_bytes", "major_faults", "pinned_bytes", "pageable_bytes",
        "non_blocking_calls", "attributes", "extras", "end_hooks", "settle", "lock", "closed",
    )

    def __init__(self, phase: str, parent, detail: Hashable, attributes: dict) -> None:
        self.phase = phase
        self.parent = parent
        self.detail = detail
        thread = threading.current_thread()
        self.thread_id = threading.get_ident()
        self.thread_name = thread.name
        self.calls = 0
        self.bytes = 0
        self.busy_ns = 0
        self.first_ns = 0
        self.last_ns = 0
        self.read_bytes = 0
        self.major_faults = 0
        self.pinned_bytes = 0
        self.pageable_bytes = 0
        self.non_blocking_calls = 0
        self.attributes = attributes
        # Per-kind state a patch keeps across the calls of one aggregate (CUDA events of
        # queued copies, graph batch sizes), and what it must do once when the aggregate
        # ends: resolve those events, turn the state into attributes.
        self.extras: dict[str, Any] = {}
        self.end_hooks: list[Callable[[Aggregate], None]] = []
        # Device work still queued when the aggregate ends (non-blocking copies, GPU casts):
        # settle(aggregate, final_deadline) -> True once it has set its figures. False holds
        # the aggregate back (nothing waits). final_deadline is None until the end of the
        # start-up, then the time.monotonic() by which every held aggregate must be written.
        self.settle: Callable[[Aggregate, float | None], bool] | None = None
        # The owning thread's lock (ThreadState.lock): its additions and the close that
        # takes it for writing exclude each other. Closed: taken; later calls start another.
        self.lock: threading.RLock | None = None  # the adding thread's ThreadState.lock
        self.closed = False

    def run_end_hooks(self) -> None:
        """Called once, just before the aggregate becomes a span. A hook may move
        ``last_ns`` (queued copies finish after the call returned) and set attributes."""
        hooks, self.end_hooks = self.end_hooks, []
        for hook in hooks:
            with internal_errors("aggregate end hook"):
                hook(self)

    def span_attributes(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            semconv.AGGREGATE: True,
            semconv.CALLS: self.calls,
            semconv.BYTES: self.bytes,
            semconv.BUSY_S: self.busy_ns / 1e9,
            semconv.THREAD_ID: self.thread_id,
            semconv.THREAD_NAME: self.thread_name,
        }
        # Bytes over busy time is a bandwidth only where the calls' time is their work's time:
        # not for queued device work (non-blocking copies, GPU casts), whose call time is
        # launch time. Its patch writes the figure from device time where it has one.
        if self.busy_ns > 0 and self.bytes > 0 and not self.non_blocking_calls and ASYNC_WORK not in self.extras:
            attrs[semconv.THROUGHPUT] = self.bytes / (self.busy_ns / 1e9)
        if probes.io_accounting_available():
            attrs[semconv.IO_READ_BYTES] = self.read_bytes
            attrs[semconv.IO_MAJOR_FAULTS] = self.major_faults
        if self.pinned_bytes or self.pageable_bytes:
            attrs[semconv.COPY_PINNED_BYTES] = self.pinned_bytes
            attrs[semconv.COPY_PAGEABLE_BYTES] = self.pageable_bytes
        if self.non_blocking_calls:
            attrs[semconv.COPY_NON_BLOCKING_CALLS] = self.non_blocking_calls
        attrs.update(self.attributes)
        return attrs


def _parent_key(parent) -> Hashable:
    return parent.span_id if isinstance(parent, SpanContext) else parent


class Recorder:
    # At the end of the start-up, held aggregates may wait this long in total for their
    # device work (a bounded delay of ready(), only when work queued before it still runs).
    FINAL_SETTLE_S = 2.0

    def __init__(self, session: StartupSession) -> None:
        self._session = session
        self._lock = threading.Lock()
        self._aggregates: dict[tuple, Aggregate] = {}
        self._held: list[tuple[Aggregate, SpanContext | None]] = []  # ended, device work still queued
        # Sample each call's storage reads (getrusage around it): only once reads are
        # expected (expect_storage_reads) or were seen at a boundary. Read by every call.
        self.sample_io = False
        self.own_cost = own_cost.OwnCost()  # the plugin's own time in this start-up (own_cost.py)

    # --- storage reads: per call only where they can happen -------------------------------------

    def expect_storage_reads(self) -> None:
        """A checkpoint file was not wholly in the page cache when its read began (or its
        residency is unknown): calls may read it from storage from now on, so each call's
        reads are counted on its thread, around it, as exactly as before issue 24."""
        if probes.io_accounting_available():
            self.sample_io = True

    @staticmethod
    def mark(state: ThreadState) -> None:
        """Before a call that is not sampled, the first since this thread's last boundary:
        the thread's counters now (one syscall per segment, not per call)."""
        state.io_mark = probes.thread_io()

    def boundary(self) -> None:
        """A container span starts or ends on this thread: if the thread read from storage
        since its first call counted without sampling, reads are happening where no file of
        ours said so (a file read without us, pages evicted meanwhile); count each call's
        from now on. Those already made are not attributed: nothing says whose they were."""
        state = thread_state()
        mark = state.io_mark
        if mark is None or self.sample_io:
            return
        state.io_mark = None  # the next call marks again
        now = probes.thread_io()
        if now.read_bytes > mark.read_bytes or now.major_faults > mark.major_faults:
            self.sample_io = True

    # --- counting calls ---------------------------------------------------------------------------

    def _accumulator(self, state: ThreadState) -> _Accumulator:
        acc = state.acc
        if acc is None or acc.recorder is not self:
            acc = state.acc = _Accumulator(self)
        return acc

    def _aggregate_for(self, state: ThreadState, acc: _Accumulator, phase: str, detail: Hashable,
                       detail_attributes: dict | None, start_ns: int) -> Aggregate:
        """The aggregate this thread's call joins now (the caller holds ``state.lock``)."""
        context = _current_context()
        session = self._session
        generation = getattr(session, "parent_gen", 0)  # read before the parent is worked out
        if context is not acc.context or generation != acc.generation:
            parent = session.current_parent()
            acc.parent, acc.parent_key, acc.last = parent, _parent_key(parent), None
            acc.context, acc.generation = context, generation
        key = (acc.parent_key, phase, detail)
        aggregate = acc.slots.get(key)
        if aggregate is None or aggregate.closed:
            aggregate = self._open(state, acc, key, phase, detail, detail_attributes, start_ns)
        return aggregate

    def _open(self, state: ThreadState, acc: _Accumulator, key: tuple, phase: str, detail: Hashable,
              detail_attributes: dict | None, start_ns: int) -> Aggregate:
        full_key = (threading.get_ident(), *key)
        with self._lock:
            aggregate = self._aggregates.get(full_key)
            if aggregate is None or aggregate.closed:
                aggregate = Aggregate(phase, acc.parent, detail, dict(detail_attributes or {}))
                aggregate.first_ns = start_ns
                aggregate.lock = state.lock
                self._aggregates[full_key] = aggregate
        slots = acc.slots
        if len(slots) >= 64:  # many parents over time (a Module.to per layer): drop the written ones
            for stale in [k for k, a in slots.items() if a.closed]:
                del slots[stale]
        slots[key] = aggregate
        return aggregate

    def count(self, state: ThreadState, phase: str, detail: Hashable, detail_attributes: dict | None,
              nbytes: int, start_ns: int, end_ns: int, read_bytes: int = 0, major_faults: int = 0) -> None:
        """Count one call of this thread (``state`` is :func:`thread_state`'s): the per-call
        path of host casts and copies, safetensors reads and pinning. ``read_bytes`` and
        ``major_faults`` are the call's own when :attr:`sample_io` is on, else 0.

        :meth:`_aggregate_for` written out: this runs once per intercepted call."""
        acc = state.acc
        if acc is None or acc.recorder is not self:
            acc = self._accumulator(state)
        context = _current_context()
        generation = self._session.parent_gen
        with state.lock:
            if context is not acc.context or generation != acc.generation:
                parent = self._session.current_parent()
                acc.parent, acc.parent_key, acc.last = parent, _parent_key(parent), None
                acc.context, acc.generation = context, generation
            aggregate = acc.last
            if aggregate is None or aggregate.closed or phase is not acc.last_phase or detail is not acc.last_detail:
                key = (acc.parent_key, phase, detail)
                aggregate = acc.slots.get(key)
                if aggregate is None or aggregate.closed:
                    aggregate = self._open(state, acc, key, phase, detail, detail_attributes, start_ns)
                acc.last, acc.last_phase, acc.last_detail = aggregate, phase, detail
            aggregate.calls += 1
            aggregate.bytes += nbytes
            aggregate.busy_ns += end_ns - start_ns
            aggregate.last_ns = end_ns
            if read_bytes or major_faults:
                aggregate.read_bytes += read_bytes
                aggregate.major_faults += major_faults
        self.own_cost.add_since(phase, end_ns)  # the plugin's own cost: this bookkeeping (own_cost.py)

    def add(self, phase: str, detail: Hashable, detail_attributes: dict | None, nbytes: int,
            start_ns: int, end_ns: int, read_bytes: int, major_faults: int,
            pinned: bool | None = None, non_blocking: bool = False,
            on_add: Callable[[Aggregate], None] | None = None, charge_own_cost: bool = True) -> None:
        """Count one call. ``detail`` splits aggregates within a phase (a cast's dtype pair).

        ``on_add`` runs with the aggregate the call joined, under the lock that excludes its
        closing, to keep per-kind state in ``extras`` or register an end hook (it must be
        quick). ``charge_own_cost``: False where the caller's hook times itself, this included
        (a folded file's read ended in a safe_open hook, patches/_folded_files.py)."""
        state = thread_state()
        acc = state.acc
        if acc is None or acc.recorder is not self:
            acc = self._accumulator(state)
        with state.lock:
            aggregate = self._aggregate_for(state, acc, phase, detail, detail_attributes, start_ns)
            aggregate.calls += 1
            aggregate.bytes += nbytes
            aggregate.busy_ns += end_ns - start_ns
            aggregate.last_ns = end_ns
            aggregate.read_bytes += read_bytes
            aggregate.major_faults += major_faults
            if pinned is True:
                aggregate.pinned_bytes += nbytes
            elif pinned is False:
                aggregate.pageable_bytes += nbytes
            if non_blocking:
                aggregate.non_blocking_calls += 1
            if on_add is not None:
                with internal_errors("aggregate on_add"):
                    on_add(aggregate)
        if charge_own_cost:
            self.own_cost.add_since(phase, end_ns)

    def child_phase_bytes(self, parent: PendingParent) -> dict[str, int]:
        """Bytes per phase recorded so far under a pending parent (its phase is only known
        from the work it caused: ``Module.to("cuda")`` on a module already there is a cast)."""
        with self._lock:
            result: dict[str, int] = {}
            for key, aggregate in self._aggregates.items():
                if key[1] is parent:
                    result[aggregate.phase] = result.get(aggregate.phase, 0) + aggregate.bytes
            return result

    def _take(self, parent_key: Hashable | None) -> list[Aggregate]:
        pid = getattr(self._session, "pid", None)
        if pid is not None and pid != os.getpid():
            return []  # a forked child's copy: the parent's to write (and its threads' locks)
        with self._lock:
            if parent_key is None:
                taken = list(self._aggregates.values())
                self._aggregates.clear()
            else:
                keys = [k for k in self._aggregates if k[1] == parent_key]
                taken = [self._aggregates.pop(k) for k in keys]
        for aggregate in taken:
            # Closed under its thread's lock: a call being added now is either wholly in it or
            # starts the next aggregate.
            lock = aggregate.lock
            if lock is None:
                aggregate.closed = True
            else:
                with lock:
                    aggregate.closed = True
        return taken

    # --- durable before they are written (issue 39): the in-flight monitor's view -------------

    MAX_INTERIM = 64  # aggregates listed in one progress record (the most recent calls first)

    def interim_calls(self) -> int:
        """Calls counted so far by the aggregates not yet written (open or held): the
        in-flight monitor writes a record when this changed (a dict walk under the
        recorder's lock, 4 times a second on the monitor thread; nothing on the callers')."""
        with self._lock:
            return sum(a.calls for a in self._aggregates.values()) + sum(a.calls for a, _ in self._held)

    def interim_records(self) -> list[dict]:
        """The aggregates not yet written as spans, as plain data for a progress record: what
        a SIGKILL would otherwise lose (an aggregate is written only when its parent ends,
        and a cast under the root waits for ready()). Each has the figures the span written
        later will have (read without the callers' locks: a call being added may be in one
        figure and not yet in the next, never more than that call). The parent is the span
        the aggregate will be written under (a pending parent's own parent: the pending
        span does not exist until it ends, as at the start-up's end)."""
        with self._lock:
            aggregates = [(a, a.parent) for a in self._aggregates.values() if not a.closed] + list(self._held)
        aggregates.sort(key=lambda item: item[0].last_ns, reverse=True)
        records = []
        for aggregate, parent in aggregates[:self.MAX_INTERIM]:
            if aggregate.calls <= 0:
                continue
            if parent is not None and not isinstance(parent, SpanContext):
                parent = parent.parent
            attributes = {k: v for k, v in aggregate.span_attributes().items()
                          if isinstance(v, (str, bool, int, float))}
            records.append({
                "name": semconv.phase_span_name(aggregate.phase), "phase": aggregate.phase,
                "parent_id": format(parent.span_id, "016x") if isinstance(parent, SpanContext) else None,
                "start_ns": aggregate.first_ns, "end_ns": aggregate.last_ns, "attributes": attributes,
            })
        return records

    def take_children(self, pending: PendingParent) -> list[Aggregate]:
        return self._take(pending)

    def flush_children(self, span_id: int, span_context: SpanContext, *, interrupted: bool = False) -> None:
        for aggregate in self._take(span_id):
            self.emit(aggregate, span_context, interrupted=interrupted)
        self.settle_held()  # a cheap look at earlier held ones: query(), no wait

    def flush_all(self, *, interrupted: bool = False) -> None:
        """Write every aggregate still collecting (the start-up ends). ``interrupted``: it
        was cut short (exit, SIGTERM), so the work they sum was too."""
        deadline = time.monotonic() + self.FINAL_SETTLE_S  # one bound for all of them together
        for aggregate in self._take(None):
            parent = aggregate.parent
            if not isinstance(parent, SpanContext):  # a pending parent still open at the end
                parent = parent.parent
            self.emit(aggregate, parent, final_deadline=deadline, interrupted=interrupted)
        self.settle_held(final_deadline=deadline)

    def emit(self, aggregate: Aggregate, parent: SpanContext | None, final_deadline: float | None = None, *,
             interrupted: bool = False) -> None:
        if not self._settled(aggregate, final_deadline):
            if not getattr(self._session, "ended", False):
                with self._lock:
                    self._held.append((aggregate, parent))
                return
            # The start-up has ended (another thread's flush may be past already): nobody
            # would write it later, so settle it now against the end's bound.
            self._settled(aggregate, time.monotonic() + self.FINAL_SETTLE_S)
        aggregate.run_end_hooks()
        attrs = aggregate.span_attributes()
        if interrupted:
            attrs[semconv.INTERRUPTED] = True
        self._session.emit_span(
            semconv.phase_span_name(aggregate.phase), aggregate.phase, parent,
            aggregate.first_ns, aggregate.last_ns, attrs,
        )

    def settle_held(self, final_deadline: float | None = None) -> None:
        """Write the held aggregates whose device work has finished; with a final deadline
        (the end of the start-up), all of them: their settle waits at most until then and
        marks what stayed unresolved."""
        with self._lock:
            if not self._held:
                return
            held, self._held = self._held, []
        for aggregate, parent in held:
            self.emit(aggregate, parent, final_deadline)

    @staticmethod
    def _settled(aggregate: Aggregate, final_deadline: float | None) -> bool:
        settle = aggregate.settle
        if settle is None:
            return True
        try:
            done = settle(aggregate, final_deadline)
        except Exception:
            report_internal_error("aggregate settle")
            done = True
        if done or final_deadline is not None:
            aggregate.settle = None
            return True
        return False
