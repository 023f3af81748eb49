"""The start-up session: the root span from process start to ``ready()``, and the span
plumbing every patch goes through.

All spans are given explicit start and end times taken from one clock (``time.time_ns``),
so spans written after the fact (aggregates, handle lifetimes) line up with live ones.
Every span we end is also kept as a plain :class:`~otel_coldstart.analyze.model.Span` in
``ledger``: the summary printed at the end is computed from it with the same pure
functions the ``analyze`` command uses, whatever exporter the user configured.

The session is the span side of one start-up; it belongs to a
:class:`~otel_coldstart.startup.Startup` (``session.startup``), which owns everything else
(export, storage ledger, progress board, device facts) and ends it. What the session holds
is per start-up too: the spans still open (:meth:`StartupSession.open_work`), the
aggregates, the pending ``Module.to`` parents and ambient parents (per thread, in
``session.local``), and each patch's own state (:meth:`StartupSession.state`: safe_open
handles, graph captures, compilations, ...). ``uninstrument()``, a fork and a second
start-up drop the Startup and with it all of this; module globals keep only what is per
process (the original functions).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import namedtuple
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode

from . import probes, semconv
from ._errors import internal_errors
from .recorder import Recorder
from .verdicts import running_work

if TYPE_CHECKING:  # pragma: no cover
    from .analyze.model import Span as SpanRecord
    from .startup import Startup

# The session the patches report to; None when not instrumented. The one pointer to the
# active start-up (``ACTIVE.startup``), set only by controller.Controller.startup. Read without
# a lock on every intercepted call: a plain module global is the cheapest check there is.
ACTIVE: StartupSession | None = None

_StateT = TypeVar("_StateT")

# Values of StartupSession.parent_gen: each change of a thread's pending or ambient parents
# takes a value never used before (next() of a count is atomic), so a per-thread parent cached
# under an older value (recorder.py) can never be taken for current.
_generations = itertools.count(1)

class AmbientParent:
    """A parent for work done on one thread while a span it encloses is current, without
    making our span the OTel-current one.

    A ``with safe_open(...)`` handle lives across the host's own spans; attaching its span
    to the OTel context would leave the host's attach/detach out of order. Instead, work
    done while the span that was current at ``__enter__`` is still current (``encloses``)
    hangs under ``span_context``; work inside the host's own spans hangs under those."""

    __slots__ = ("encloses", "span_context", "_open", "session")

    def __init__(self, encloses: int, span_context: SpanContext, session: StartupSession | None = None) -> None:
        self.encloses = encloses
        self.span_context = span_context
        self._open = True
        self.session = session

    @property
    def open(self) -> bool:
        return self._open

    @open.setter
    def open(self, value: bool) -> None:
        self._open = value
        if self.session is not None:
            self.session.parents_changed()  # after the change: see recorder._Accumulator


def current_span_id() -> int:
    """The span id current on this thread, 0 when none."""
    span_context = trace.get_current_span().get_span_context()
    return span_context.span_id if span_context.is_valid else 0


def push_ambient_parent(encloses: int, span_context: SpanContext,
                        session: StartupSession | None = None) -> AmbientParent:
    """Add an ambient parent on this thread, for ``session`` (default: the active one); close
    it with ``.open = False`` from any thread. The stack is per thread and per start-up
    (``session.local``): each entry is closed by its handle, every handle is closed when
    its start-up ends, and a fork or a new start-up begins with none."""
    session = session if session is not None else ACTIVE
    entry = AmbientParent(encloses, span_context, session)
    if session is None:
        return entry
    stack = getattr(session.local, "ambient", None)
    if stack is None:
        stack = session.local.ambient = []
    stack[:] = [e for e in stack if e.open]
    stack.append(entry)
    session.parents_changed()
    return entry


class PendingParent:
    """A parent span that exists only if some child work is recorded under it.

    ``Module.to`` on a module whose tensors are already where they should be does no work;
    it must emit nothing. So its span is created after the call, and only if the recorder
    saw tensor work under it.
    """

    __slots__ = ("name", "phase", "start_ns", "parent", "attributes")

    def __init__(self, name: str, phase: str, parent: SpanContext | None, attributes: dict) -> None:
        self.name = name
        self.phase = phase
        self.start_ns = time.time_ns()
        self.parent = parent
        self.attributes = attributes


class ContainerSpan:
    """A live span that is current while the work inside it runs (a file read, a phase)."""

    __slots__ = ("session", "span", "parent", "name", "start_ns", "attributes", "_token", "_thread",
                 "on_interrupt", "file_read", "download")

    def __init__(self, session: StartupSession, span, parent, name, start_ns, attributes, token) -> None:
        self.session = session
        self.span = span
        self.parent = parent
        self.name = name
        self.start_ns = start_ns
        self.attributes = attributes
        self._token = token
        self._thread = threading.get_ident()
        # How to end it when the start-up is cut short with it still open (its owner may
        # add evidence, as a file read does); by default it ends marked interrupted.
        self.on_interrupt: Callable[[int], None] | None = None
        # Progress inside it, read by the in-flight board (inflight.py): a checkpoint file
        # read (patches/_files.FileRead, its .bytes) or a download (its .live_bytes()).
        self.file_read = None
        self.download = None

    @property
    def thread_id(self) -> int:
        return self._thread

    @property
    def span_context(self) -> SpanContext:
        return self.span.get_span_context()

    def detach(self) -> None:
        """Stop being the current span (on the thread that attached it)."""
        # Only the attaching thread can detach; a span cut short from another thread (the
        # end of the start-up) keeps its token for the owner's own exit to detach.
        if self._token is None or self._thread != threading.get_ident():
            return
        token, self._token = self._token, None
        if token is not None:
            with internal_errors("context detach"):
                otel_context.detach(token)

    def finish(self, attributes: Mapping[str, Any] | None = None, error: BaseException | None = None,
               end_ns: int | None = None, *, detach: bool = True) -> None:
        """End the span. ``detach=False`` leaves the context as it is: the span is ended by
        someone else than its owner (the end of the start-up), and the owner's own exit,
        later, detaches in the right order."""
        if detach:
            self.detach()
        end = time.time_ns() if end_ns is None else end_ns
        if attributes:
            self.attributes.update(attributes)
        self.session._end_container(self, end, error)

    def interrupt(self, end_ns: int) -> None:
        """End it now, marked ``coldstart.interrupted`` (the start-up was cut short). The
        context is left alone: contexts must be detached in the reverse order of their
        attaching, which only the owners' own exits know."""
        if self.on_interrupt is not None:
            self.on_interrupt(end_ns)
        else:
            self.finish({semconv.INTERRUPTED: True}, end_ns=end_ns, detach=False)


class OpenWork(namedtuple("OpenWork", (
    "name",  # the span it will be, e.g. coldstart.download, coldstart.deserialize
    "phase",
    "start_ns",  # time.time_ns() when it started
    "thread_id",
    "span_id",  # None for work that gets its span only when it ends (a capture)
    "label",  # what it is, where its name does not say: the module of an import in progress
), defaults=(None,))):
    """One piece of work started and not ended: a live span or a graph capture.

    Read-only view for whoever watches a start-up in flight (:meth:`StartupSession.open_work`).
    """

    __slots__ = ()


class StartupSession:
    def __init__(self, tracer: trace.Tracer, *, resource: Mapping[str, Any], start_at: str = "process",
                 parent_context=None, root_attributes: Mapping[str, Any] | None = None,
                 import_attributes: Mapping[str, Any] | None = None) -> None:
        self.tracer = tracer
        self.resource = dict(resource)
        self.recorder = Recorder(self)
        self.startup: Startup | None = None  # the startup.Startup that owns this session (set by it)
        self.ledger: list[_Kept] = []
        self.ended = False
        self.end_ns: int | None = None  # when the start-up ended (set by end_work())
        self._lock = threading.Lock()
        self._end_attributes: dict[str, Any] = {}  # what the root says of its end (end_work)
        self._file_order: dict[str, int] = {}
        # inflight.ProgressBoard, owned by the Startup: told when a span opens or ends (per
        # phase and per shard, never per tensor) for progress records and gauges.
        self.progress = None
        self.end_reason: str | None = None  # None while the start-up runs; then semconv.END_*
        # A forked child inherits this object (through a phase() or a handle it is inside):
        # its spans are the parent's to end and export, never the child's copy's.
        self.pid = os.getpid()
        # The one registry of open work, by key (see track_open): (what it is, how to end it
        # if the start-up is cut short). The in-flight board reads it too (open_entries).
        self._open: dict[Hashable, tuple[OpenWork, Callable[[int], None]]] = {}
        self._states: dict[str, Any] = {}  # each patch module's per-start-up state
        # Per thread and per start-up: the stack of pending Module.to parents, the ambient
        # parents of safe_open handles, graph captures running on the thread, spare CUDA
        # events. A new session starts with none of them.
        self.local = threading.local()
        # Bumped (after the change) whenever a thread's pending or ambient parents change: the
        # recorder caches each thread's current parent under it and the OTel context object.
        self.parent_gen = 0
        # The innermost phase an exception went through last (the first span to end with
        # it): an uncaught exception closes the phases it leaves before the exit ends us.
        self._failed_phase: tuple[BaseException, str] | None = None

        now = time.time_ns()
        process_start = probes.process_start_time_ns() if start_at == "process" else None
        source = "proc" if process_start is not None else "instrument"
        start = min(process_start, now) if process_start is not None else now
        self.start_ns = start
        attrs: dict[str, Any] = {semconv.PROCESS_START_SOURCE: source}
        attrs.update(_thread_attributes())
        argv = getattr(sys, "argv", None)  # absent in an embedded interpreter
        if argv and isinstance(argv[0], str) and argv[0]:
            attrs[semconv.PROCESS_COMMAND] = argv[0][:512]  # which program: two may share a service.name
        attrs.update(root_attributes or {})
        self.root_attributes = attrs
        self.root = tracer.start_span(semconv.SPAN_ROOT, context=parent_context, start_time=start,
                                      attributes=attrs)
        self.root_context = self.root.get_span_context()
        self._root_parent_id = _parent_id_from_context(parent_context)
        missing = probes.unavailable_evidence()
        if missing:
            self.root_attributes[semconv.EVIDENCE_UNAVAILABLE] = list(missing)
        if start < now:
            import_attrs = dict(_thread_attributes())
            own_s = (import_attributes or {}).get(semconv.IMPORT_OWN_S)
            if isinstance(own_s, (int, float)) and own_s >= 0:  # never more than the span itself
                import_attrs[semconv.IMPORT_OWN_S] = min(float(own_s), (now - start) / 1e9)
            self.emit_span(semconv.phase_span_name(semconv.PHASE_IMPORT), semconv.PHASE_IMPORT,
                           self.root_context, start, now, import_attrs)

    # --- parents ---------------------------------------------------------------------------

    def current_parent(self) -> SpanContext | PendingParent | None:
        """Where work done now belongs: a pending Module.to, the current span (ours, the
        user's or vLLM's), else the root."""
        pending = getattr(self.local, "pending", None)
        if pending:
            return pending[-1]
        current = trace.get_current_span().get_span_context()
        stack = getattr(self.local, "ambient", None)
        if stack:
            current_id = current.span_id if current.is_valid else 0
            for entry in reversed(stack):
                if entry.open and entry.encloses == current_id:
                    return entry.span_context
        if current.is_valid:
            return current
        return self.root_context

    def wait_for_first_read(self, open_now: Callable[[], bool]) -> None:
        """A span that will start in the past: a ``with safe_open`` handle's, made at its first
        read and starting when the handle was opened (patches/safetensors.py). A span of ours
        started on this thread before that read (an import the with-block runs first: tqdm
        making its lock) would lie inside it in time but beside it in the tree, its time counted
        in both phases. So a span starting meanwhile first calls ``open_now()``, which makes the
        handle's span if the with-block is still where work goes (True once it is done with:
        made, read, or closed), and then nests under it through its ambient parent."""
        waiting = getattr(self.local, "unread_handles", None)
        if waiting is None:
            waiting = self.local.unread_handles = []
        waiting.append(open_now)

    def _open_unread_handles(self) -> None:
        self.local.unread_handles = [open_now for open_now in self.local.unread_handles if not open_now()]

    def parents_changed(self) -> None:
        self.parent_gen = next(_generations)

    def parent_span_context(self) -> SpanContext:
        """The parent of a span of ours starting now on this thread (current_parent, less a
        pending Module.to)."""
        if getattr(self.local, "unread_handles", None):
            self._open_unread_handles()
        parent = self.current_parent()
        if isinstance(parent, PendingParent):
            parent = parent.parent
        return parent if parent is not None else self.root_context

    # --- spans -----------------------------------------------------------------------------

    def start_container(self, phase: str, attributes: dict | None = None, name: str | None = None,
                        start_ns: int | None = None, make_current: bool = True,
                        parent: SpanContext | None = None) -> ContainerSpan:
        if parent is None:
            parent = self.parent_span_context()
        start = time.time_ns() if start_ns is None else start_ns
        attrs: dict = {semconv.PHASE: phase}
        attrs.update(_thread_attributes())
        if self.ended:
            attrs[semconv.AFTER_READY] = True
        if attributes:
            attrs.update(attributes)
        span_name = name or semconv.phase_span_name(phase)
        self.recorder.boundary()  # storage reads seen since the last one? (recorder.py)
        span = self.tracer.start_span(span_name, context=_context_with_parent(parent), start_time=start)
        token = None
        if make_current:
            token = otel_context.attach(trace.set_span_in_context(span))
        container = ContainerSpan(self, span, parent, span_name, start, attrs, token)
        self.track_open(container, span_name, attrs[semconv.PHASE], start, container.interrupt,
                        span.get_span_context().span_id)
        if self.progress is not None:
            self.progress.span_opened(container)
        return container

    def _end_container(self, container: ContainerSpan, end_ns: int, error: BaseException | None) -> None:
        if self.pid != os.getpid() or not self.untrack_open(container):
            return  # ended already (cut short by the end of the start-up, then exited)
        span = container.span
        span_context = span.get_span_context()
        self.recorder.boundary()
        interrupted = bool(container.attributes.get(semconv.INTERRUPTED))
        self.recorder.flush_children(span_context.span_id, span_context, interrupted=interrupted)
        span.set_attributes(container.attributes)
        status = "unset"
        if error is not None:
            if self._failed_phase is None or self._failed_phase[0] is not error:
                self._failed_phase = (error, container.attributes.get(semconv.PHASE, ""))
            error_type = qualified_type_name(error)
            container.attributes[semconv.ERROR_TYPE] = error_type
            span.set_attribute(semconv.ERROR_TYPE, error_type)
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            status = "error"
        span.end(end_time=end_ns)
        self._keep(span_context, _span_id(container.parent), container.name, container.start_ns, end_ns,
                   container.attributes, status)

    def emit_span(self, name: str, phase: str, parent: SpanContext | None, start_ns: int, end_ns: int,
                  attributes: dict) -> SpanContext:
        """Write a finished span after the fact (aggregates, pending parents)."""
        if self.pid != os.getpid():
            return _FORKED_COPY  # the parent's session, inherited by a forked child: not ours
        attrs: dict = {semconv.PHASE: phase}
        # Aggregates flushed at the end cover work done before it: not after-ready.
        if self.ended and (self.end_ns is None or start_ns >= self.end_ns):
            attrs[semconv.AFTER_READY] = True
        attrs.update(attributes)
        span = self.tracer.start_span(name, context=_context_with_parent(parent), start_time=start_ns,
                                      attributes=attrs)
        span.end(end_time=end_ns)
        span_context = span.get_span_context()
        self._keep(span_context, _span_id(parent), name, start_ns, end_ns, attrs, "unset")
        return span_context

    def emit_record(self, name: str, parent: SpanContext, at_ns: int, attributes: dict) -> SpanContext:
        """Write a zero-length record under ``parent`` that completes it (a storage
        settlement): no phase, not work; readers merge it into its parent
        (analyze/settlements.py)."""
        if self.pid != os.getpid():
            return _FORKED_COPY
        span = self.tracer.start_span(name, context=_context_with_parent(parent), start_time=at_ns,
                                      attributes=attributes)
        span.end(end_time=at_ns)
        span_context = span.get_span_context()
        self._keep(span_context, _span_id(parent), name, at_ns, at_ns, dict(attributes), "unset")
        return span_context

    def _keep(self, span_context: SpanContext, parent_span_id: int | None, name: str, start_ns: int,
              end_ns: int, attributes: Mapping[str, Any], status: str) -> None:
        kept = _Kept(span_context.trace_id, span_context.span_id, parent_span_id, name, start_ns, end_ns,
                     dict(attributes), status)
        with self._lock:
            self.ledger.append(kept)
        if self.progress is not None:
            self.progress.span_done(name, kept.attributes)

    # --- open work and per-patch state ---------------------------------------------------------

    def track_open(self, key: Hashable, name: str, phase: str, start_ns: int,
                   interrupt: Callable[[int], None], span_id: int | None = None, label: str | None = None) -> None:
        """Record work that has started: listed by :meth:`open_work`, and ended by
        ``interrupt(end_ns)`` if the start-up is cut short (exit, SIGTERM) before it ends."""
        view = OpenWork(name, phase, start_ns, threading.get_ident(), span_id, label)
        with self._lock:
            self._open[key] = (view, interrupt)

    def untrack_open(self, key: Hashable) -> bool:
        """The work ended. False if it was not open (ended already)."""
        with self._lock:
            return self._open.pop(key, None) is not None

    def open_work(self) -> list[OpenWork]:
        """What is running now, oldest first: live spans (phases, file reads, compilations),
        graph captures and imports, with their phase, start time and thread. A snapshot: safe
        to call from any thread, at any time."""
        return [view for _, view in self.open_entries()]

    def open_entries(self) -> list[tuple[Hashable, OpenWork]]:
        """(key, view) of what is running now, oldest first: the key of a live span is its
        :class:`ContainerSpan` (the in-flight board reads its file read or download)."""
        with self._lock:
            entries = [(key, view) for key, (view, _) in self._open.items()]
        return sorted(entries, key=lambda entry: entry[1].start_ns)

    def running_phase(self) -> str | None:
        """The phase running now (verdicts.running_work: the innermost open work, on the main
        thread if any is)."""
        running = running_work(self.open_work(), threading.main_thread().ident)
        return running.phase if running is not None else None

    def state(self, owner: str, factory: Callable[[], _StateT]) -> _StateT:
        """The per-start-up state of ``owner`` (a patch module), made on first use."""
        found = self._states.get(owner)
        if found is None:
            with self._lock:
                found = self._states.get(owner)
                if found is None:
                    found = self._states[owner] = factory()
        return found

    def file_order(self, path: str) -> int:
        """Position (from 0) of ``path`` among every checkpoint file this start-up read, in
        the order each was first read: the shard index of a file that no index or file name
        places."""
        with self._lock:
            return self._file_order.setdefault(os.path.abspath(path), len(self._file_order))

    # --- pending parents (Module.to) ----------------------------------------------------------

    def push_pending(self, name: str, phase: str, attributes: dict) -> PendingParent:
        pending = PendingParent(name, phase, self.parent_span_context(), attributes)
        stack = getattr(self.local, "pending", None)
        if stack is None:
            stack = self.local.pending = []
        stack.append(pending)
        self.parents_changed()
        return pending

    def pop_pending(self, pending: PendingParent) -> None:
        """Close a pending parent: its span is written only if work was recorded under it."""
        stack = getattr(self.local, "pending", None)
        if stack and stack[-1] is pending:
            stack.pop()
            self.parents_changed()
        end = time.time_ns()
        children = self.recorder.take_children(pending)
        if not children:
            return
        attrs = dict(_thread_attributes())
        attrs.update(pending.attributes)
        # Bytes stay on the leaf aggregates only: a phase's bytes are summed over its spans.
        attrs[semconv.TENSORS] = sum(a.calls for a in children)
        parent_context = self.emit_span(pending.name, pending.phase, pending.parent, pending.start_ns, end, attrs)
        for aggregate in children:
            self.recorder.emit(aggregate, parent_context)

    # --- end of start-up ---------------------------------------------------------------------

    def end_work(self, *, ready: bool, reason: str, exception_type: str | None = None) -> bool:
        """The start-up's work ends (once: False if it had ended already, or in a forked copy).

        Any end but ``ready()`` cuts the start-up short: every piece of open work (user
        phases, file reads, graph captures, compilations) is ended now and marked
        ``coldstart.interrupted``, and the root will say which phase was running. At
        ``ready()``, work still open ends when it ends. ``Startup._end`` then settles what the
        root must carry and calls :meth:`end_root`.

        Never call this from a signal handler: it takes the recorder's and the SDK's locks,
        which the interrupted thread may hold (see ending.py).
        """
        with self._lock:
            if self.ended or self.pid != os.getpid():
                return False
            self.ended = True
            self.end_reason = reason
        end_ns = self.end_ns = time.time_ns()
        self._end_attributes = {semconv.READY: ready, semconv.END_REASON: reason}
        if exception_type:
            self._end_attributes[semconv.END_EXCEPTION_TYPE] = exception_type
        if not ready and reason != semconv.END_READY:
            with internal_errors("interrupt open work"):
                running = self.running_phase()
                failed = self._failed_phase
                if running is None and failed is not None and (exception_type or isinstance(failed[0], SystemExit)):
                    running = failed[1]  # where the uncaught exception (or sys.exit()) was raised
                if running is not None:
                    self._end_attributes[semconv.END_PHASE] = running
                self._interrupt_open_work(end_ns)
        return True

    def end_root(self) -> None:
        """The aggregates still collecting are written (marked interrupted if the start-up was
        cut short), then the root ends with why (after :meth:`end_work`)."""
        interrupted = self.end_reason != semconv.END_READY and not self._end_attributes[semconv.READY]
        with internal_errors("aggregate flush"):
            self.recorder.flush_all(interrupted=interrupted)
        attrs = dict(self.root_attributes)
        attrs.update(self._end_attributes)
        end_ns = self.end_ns if self.end_ns is not None else time.time_ns()  # end_work sets it first
        self.root.set_attributes(attrs)
        self.root.end(end_time=end_ns)
        self._keep(self.root_context, self._root_parent_id, semconv.SPAN_ROOT, self.start_ns, end_ns, attrs, "unset")

    def _interrupt_open_work(self, end_ns: int) -> None:
        """End every open piece of work at ``end_ns``, innermost (latest started) first so
        that a parent's aggregates are flushed under it."""
        with self._lock:
            tracked = list(self._open.values())
        for _, interrupt in sorted(tracked, key=lambda entry: entry[0].start_ns, reverse=True):
            with internal_errors("interrupt open work"):
                interrupt(end_ns)

    def records(self) -> list[SpanRecord]:
        """Every span ended so far, as the analyzer's records (the same pure functions the
        ``analyze`` command runs compute the summary and the metrics from them)."""
        from .analyze.model import Span as SpanRecord  # the analyzer's model: only when asked
        from .analyze.settlements import merge_settlements

        with self._lock:
            kept = list(self.ledger)
        return merge_settlements([SpanRecord(trace_id=format(k.trace_id, "032x"), span_id=format(k.span_id, "016x"),
                           parent_id=format(k.parent_id, "016x") if k.parent_id else None, name=k.name,
                           start_ns=k.start_ns, end_ns=k.end_ns, attributes=k.attributes, resource=self.resource,
                           status=k.status)
                for k in kept])

    def kept_spans(self) -> list[_Kept]:
        """Every span ended so far, as the ledger keeps it (what a fallback file is written from)."""
        with self._lock:
            return list(self.ledger)


class _Kept(namedtuple("_Kept", (
    "trace_id",
    "span_id",
    "parent_id",
    "name",
    "start_ns",
    "end_ns",
    "attributes",
    "status",
))):
    """A span as the ledger keeps it; :meth:`StartupSession.records` makes analyzer records."""

    __slots__ = ()


_FORKED_COPY = SpanContext(0, 0, False)  # an invalid context: what a forked copy "emits"


def qualified_type_name(error: BaseException) -> str:
    """``error.type`` as OTel's semantic conventions spell an exception's: the fully qualified
    class name, without ``builtins.`` (as ``exception.type`` is written)."""
    kind = type(error)
    module = kind.__module__
    return f"{module}.{kind.__qualname__}" if module and module != "builtins" else kind.__qualname__


def _thread_attributes() -> dict:
    thread = threading.current_thread()
    return {semconv.THREAD_ID: threading.get_ident(), semconv.THREAD_NAME: thread.name}


def _context_with_parent(parent: SpanContext | None):
    if parent is None or not parent.is_valid:
        return otel_context.Context()  # explicit root: do not pick up whatever is current
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _parent_id_from_context(ctx) -> int | None:
    if ctx is None:
        return None
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context.span_id if span_context.is_valid else None


def _span_id(parent: SpanContext | None) -> int | None:
    return parent.span_id if parent is not None and parent.is_valid else None
