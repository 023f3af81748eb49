"""Turns many small calls into few spans.

A model has hundreds to tens of thousands of tensors; one span per ``.to()`` would bury the
trace and cost more than the copy. Calls are summed per (thread, parent span, phase,
detail) into an :class:`Aggregate`, written as one leaf span when its parent ends (or when
the start-up ends) with the calls' count, bytes, busy time and first/last timestamps. So
span count grows with shards and phases, never with tensors.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Hashable

from opentelemetry.trace import SpanContext

from . import probes, semconv
from ._errors import internal_errors, report_internal_error

if TYPE_CHECKING:  # pragma: no cover
    from .session import PendingParent, StartupSession


# Aggregate.extras key a patch sets when a call's device work was asynchronous (its call
# time is launch time): no bandwidth from busy time (patches/tensor_ops.py).
ASYNC_WORK = "async_work"


class Aggregate:
    __slots__ = (
        "phase", "parent", "detail", "thread_id", "thread_name", "calls", "bytes", "busy_ns",
        "first_ns", "last_ns", "read_bytes", "major_faults", "pinned_bytes", "pageable_bytes",
        "non_blocking_calls", "attributes", "extras", "end_hooks", "settle",
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
        self.end_hooks: list[Callable[["Aggregate"], None]] = []
        # Device work still queued when the aggregate ends (non-blocking copies, GPU casts):
        # settle(aggregate, final_deadline) -> True once it has set its figures. False holds
        # the aggregate back (nothing waits). final_deadline is None until the end of the
        # start-up, then the time.monotonic() by which every held aggregate must be written.
        self.settle: Callable[["Aggregate", float | None], bool] | None = None

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

    def __init__(self, session: "StartupSession") -> None:
        self._session = session
        self._lock = threading.Lock()
        self._aggregates: dict[tuple, Aggregate] = {}
        self._held: list[tuple[Aggregate, SpanContext | None]] = []  # ended, device work still queued

    def add(self, phase: str, detail: Hashable, detail_attributes: dict | None, nbytes: int,
            start_ns: int, end_ns: int, read_bytes: int, major_faults: int,
            pinned: bool | None = None, non_blocking: bool = False,
            on_add: Callable[[Aggregate], None] | None = None) -> None:
        """Count one call. ``detail`` splits aggregates within a phase (a cast's dtype pair).

        ``on_add`` runs under the recorder's lock with the aggregate the call joined, to keep
        per-kind state in ``extras`` or register an end hook (it must be quick)."""
        parent = self._session.current_parent()
        key = (threading.get_ident(), _parent_key(parent), phase, detail)
        with self._lock:
            aggregate = self._aggregates.get(key)
            if aggregate is None:
                aggregate = Aggregate(phase, parent, detail, dict(detail_attributes or {}))
                aggregate.first_ns = start_ns
                self._aggregates[key] = aggregate
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

    def child_phase_bytes(self, parent: "PendingParent") -> dict[str, int]:
        """Bytes per phase recorded so far under a pending parent (its phase is only known
        from the work it caused: ``Module.to("cuda")`` on a module already there is a cast)."""
        with self._lock:
            result: dict[str, int] = {}
            for key, aggregate in self._aggregates.items():
                if key[1] is parent:
                    result[aggregate.phase] = result.get(aggregate.phase, 0) + aggregate.bytes
            return result

    def _take(self, parent_key: Hashable | None) -> list[Aggregate]:
        with self._lock:
            if parent_key is None:
                taken = list(self._aggregates.values())
                self._aggregates.clear()
                return taken
            keys = [k for k in self._aggregates if k[1] == parent_key]
            return [self._aggregates.pop(k) for k in keys]

    def take_children(self, pending: "PendingParent") -> list[Aggregate]:
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
