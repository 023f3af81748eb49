"""CUDA graph capture: phase ``graph_capture``.

Capturing graphs for every batch size a server may see (vLLM: 1..512, and per layer when
capture is piecewise) can take longer than loading the weights. Every capture is seen where
all callers go through:

- ``torch.cuda.CUDAGraph.capture_begin/capture_end`` (``torch.cuda.graph`` and
  ``make_graphed_callables`` call them; so does code that drives a graph by hand);
- ``torch.accelerator.Graph.capture_begin/capture_end``: torch 2.13's device-generic graph,
  which bypasses ``torch.cuda.graph``;
- the ``__enter__/__exit__`` of ``torch.cuda.graph`` and ``torch.accelerator.Graph``. Their
  ``__enter__`` starts with ``synchronize()`` (which waits for whatever GPU work was queued
  before, such as vLLM's eager warm-up run) and cache flushes: that part is reported apart
  (``coldstart.graph.pre_capture_s``); capture time starts at ``capture_begin``;
- ``torch.cuda.make_graphed_callables``: one parent span over its warm-up and captures.

A capture is one ``coldstart.graph_capture`` span. Captures that repeat under the same parent
on the same thread (a loop over batch sizes, piecewise captures per layer) become one
aggregate span with their count (``coldstart.calls``), total and longest time, and the batch
sizes captured when they can be known (from ``make_graphed_callables``' sample inputs, from
vLLM's forward context, or from :func:`batch_size` around the capture) with the time spent
capturing each size (``coldstart.graph.capture_times_s``, parallel to the sizes: the captures
of one size summed, as piecewise graphs capture each size once per piece). Captures after
``ready()`` (lazy capture on a first request) are written one span each, at once, marked
``coldstart.after_ready``; so these patches stay after ``ready()`` (they are rare calls).

While a capture runs on a thread, the per-tensor patches record nothing there: work inside a
capture is recorded into the graph, not executed. From the start of ``__enter__`` (or
``capture_begin``) to the end of the capture, no other thread makes a CUDA event call for
device timing: the open count is raised before torch begins the capture, under the lock the
event calls are made under (patches/_guard.py), which in ``global`` capture mode (vLLM's)
would otherwise invalidate the capture.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from .. import semconv, session as _session
from .._errors import internal_errors
from . import _guard
from ._wrapping import PatchSet, installed_version

TARGETS = ("torch",)
HOT_PATH = False

API_CUDA_GRAPH_CM = "torch.cuda.graph"
API_CUDA_GRAPH = "torch.cuda.CUDAGraph"
API_ACCELERATOR_GRAPH = "torch.accelerator.Graph"
API_MAKE_GRAPHED = "torch.cuda.make_graphed_callables"

_MAX_BATCH_SIZES = 512  # an attribute array stays bounded whatever a loop captures

_patches = PatchSet()
is_patched = _patches.is_patched  # the patch module protocol (patches/__init__.py)
# .batch_sizes: stack of hints from batch_size() / make_graphed_callables (the caller's
# dynamic scope, like a context variable: not start-up state)
_local = threading.local()


class _OpenGraphCaptures:
    """The captures running now in this start-up, kept on its session (``session.state``)."""

    __slots__ = ("lock", "by_graph")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_graph: dict[int, _Capture] = {}  # id(graph object) -> the capture running on it


def _open_graph_captures(session) -> _OpenGraphCaptures:
    return session.state(__name__, _OpenGraphCaptures)


def get_version() -> str | None:
    return installed_version("torch")


def patch() -> None:
    import torch

    cuda_graph = getattr(torch.cuda, "CUDAGraph", None)
    if cuda_graph is not None:
        _patches.wrap(cuda_graph, "capture_begin", _capture_begin(API_CUDA_GRAPH))
        _patches.wrap(cuda_graph, "capture_end", _capture_end)
    graph_cm = getattr(torch.cuda, "graph", None)
    if graph_cm is not None:
        _patches.wrap(graph_cm, "__enter__", _context_enter(API_CUDA_GRAPH_CM, _graph_of_cuda_cm))
        _patches.wrap(graph_cm, "__exit__", _context_exit(_graph_of_cuda_cm))
    accelerator = getattr(torch, "accelerator", None)
    accelerator_graph = getattr(accelerator, "Graph", None)
    if accelerator_graph is not None:
        _patches.wrap(accelerator_graph, "capture_begin", _capture_begin(API_ACCELERATOR_GRAPH))
        _patches.wrap(accelerator_graph, "capture_end", _capture_end)
        _patches.wrap(accelerator_graph, "__enter__", _context_enter(API_ACCELERATOR_GRAPH, _graph_itself))
        _patches.wrap(accelerator_graph, "__exit__", _context_exit(_graph_itself))
    # Bound under both names; callers use either.
    for owner in (torch.cuda, sys.modules.get("torch.cuda.graphs")):
        if owner is not None and hasattr(owner, "make_graphed_callables"):
            _patches.wrap(owner, "make_graphed_callables", _make_graphed_callables)


def unpatch() -> None:
    _patches.restore()  # open captures go with their session
    _guard.reset_captures()  # the process-wide count (see _guard) starts again from none


@contextlib.contextmanager
def batch_size(size: int) -> Iterator[None]:
    """Name the batch size of the captures made inside the block, for code whose graph API
    cannot tell it (``torch.cuda.graph`` in a loop over sizes)::

        for n in sizes:
            with cuda_graphs.batch_size(n), torch.cuda.graph(g[n]):
                out[n] = model(inputs[:n])
    """
    stack = _local.__dict__.setdefault("batch_sizes", [])
    stack.append(int(size))
    try:
        yield
    finally:
        stack.pop()


# --- one capture ------------------------------------------------------------------------------

class _Capture:
    __slots__ = ("key", "api", "owner", "start_ns", "batch_size", "begun", "pre_capture_ns", "session", "parent",
                 "counted")

    def __init__(self, key: int, api: str, owner: str, batch: int | None, session) -> None:
        self.key = key
        self.api = api
        self.owner = owner  # "context": its __enter__/__exit__ bound it; "begin": capture_begin/end did
        self.start_ns = time.time_ns()
        self.batch_size = batch
        self.begun = owner == "begin"
        self.pre_capture_ns = 0
        self.session = session
        self.parent = session.parent_span_context()  # for a span written if the start-up is cut short
        self.counted = True  # in _guard's count of captures running, until it really ends

    def capture_begins(self) -> None:
        """capture_begin inside a graph context: the capture's time starts here. What the
        context's ``__enter__`` did before (``synchronize()``, which waits for the eager
        warm-up queued before it, and the cache flushes) is reported apart."""
        if not self.begun:
            now = time.time_ns()
            self.pre_capture_ns = now - self.start_ns
            self.start_ns = now
            self.begun = True


def _open_capture(graph, api: str, owner: str) -> _Capture | None:
    session = _session.ACTIVE
    if session is None:
        return None
    capture = _Capture(id(graph), api, owner, _batch_size_hint(), session)
    state = _open_graph_captures(session)
    with state.lock:
        state.by_graph[capture.key] = capture
    _guard.capture_started()
    session.track_open(capture, semconv.phase_span_name(semconv.PHASE_GRAPH_CAPTURE), semconv.PHASE_GRAPH_CAPTURE,
                       capture.start_ns, lambda end_ns: _interrupt_capture(capture, end_ns))
    return capture


def _find_capture(graph) -> _Capture | None:
    session = _session.ACTIVE
    if session is None:
        return None
    state = _open_graph_captures(session)
    with state.lock:
        return state.by_graph.get(id(graph))


def _forget_capture(capture: _Capture) -> bool:
    """Take the capture off its session's open list; False if it was not there any more."""
    session = capture.session
    state = _open_graph_captures(session)
    with state.lock:
        if state.by_graph.get(capture.key) is not capture:
            return False  # closed already (an __exit__ after a failed capture_end)
        del state.by_graph[capture.key]
    session.untrack_open(capture)
    return True


def _interrupt_capture(capture: _Capture, end_ns: int) -> None:
    """The start-up was cut short while this capture ran: write it, marked interrupted."""
    if not _forget_capture(capture):
        return
    attrs = {semconv.GRAPH_API: capture.api, semconv.INTERRUPTED: True}
    if capture.batch_size is not None:
        attrs[semconv.GRAPH_BATCH_SIZE] = capture.batch_size
    capture.session.emit_span(semconv.phase_span_name(semconv.PHASE_GRAPH_CAPTURE), semconv.PHASE_GRAPH_CAPTURE,
                              capture.parent, capture.start_ns, end_ns, attrs)


def _close_capture(capture: _Capture, error: BaseException | None) -> None:
    end = time.time_ns()
    if capture.counted:  # the capture really ended: even one the start-up's end wrote already
        capture.counted = False
        _guard.capture_ended()
    if not _forget_capture(capture):
        return
    session = capture.session
    if session is not _session.ACTIVE or session is None:
        return  # uninstrumented (or re-instrumented) since it began
    attrs: dict = {semconv.GRAPH_API: capture.api}
    if capture.batch_size is not None:
        attrs[semconv.GRAPH_BATCH_SIZE] = capture.batch_size
    if capture.pre_capture_ns:
        attrs[semconv.GRAPH_PRE_CAPTURE_S] = capture.pre_capture_ns / 1e9
    if error is not None:
        # A failed capture is rare and worth its own span, with the host's exception on it.
        attrs[semconv.GRAPH_FAILED] = True
        container = session.start_container(semconv.PHASE_GRAPH_CAPTURE, attrs, start_ns=capture.start_ns,
                                             make_current=False)
        container.finish(error=error, end_ns=end)
    elif session.ended:
        # After ready() nothing flushes aggregates any more: one span per lazy capture, now.
        session.emit_span(semconv.phase_span_name(semconv.PHASE_GRAPH_CAPTURE), semconv.PHASE_GRAPH_CAPTURE,
                          session.parent_span_context(), capture.start_ns, end, attrs)
    else:
        duration = end - capture.start_ns

        def note(aggregate, size=capture.batch_size, pre_ns=capture.pre_capture_ns):
            _note_capture(aggregate, size, duration, pre_ns)

        session.recorder.add(semconv.PHASE_GRAPH_CAPTURE, capture.api, {semconv.GRAPH_API: capture.api}, 0,
                             capture.start_ns, end, 0, 0, on_add=note)


def _note_capture(aggregate, size: int | None, duration_ns: int, pre_capture_ns: int = 0) -> None:
    state = aggregate.extras.get("graph")
    if state is None:
        state = aggregate.extras["graph"] = {"sizes": [], "times_ns": {}, "longest_ns": 0, "pre_ns": 0}
        aggregate.end_hooks.append(_graph_attributes)
    state["longest_ns"] = max(state["longest_ns"], duration_ns)
    state["pre_ns"] += pre_capture_ns
    times = state["times_ns"]
    if size is not None and (size in times or len(state["sizes"]) < _MAX_BATCH_SIZES):
        if size not in times:
            times[size] = 0
            state["sizes"].append(size)
        times[size] += duration_ns


def _graph_attributes(aggregate) -> None:
    state = aggregate.extras.pop("graph", None)
    if state is None:
        return
    aggregate.attributes[semconv.GRAPH_MAX_CAPTURE_S] = state["longest_ns"] / 1e9
    if state["pre_ns"]:
        aggregate.attributes[semconv.GRAPH_PRE_CAPTURE_S] = state["pre_ns"] / 1e9
    if state["sizes"]:
        aggregate.attributes[semconv.GRAPH_BATCH_SIZES] = list(state["sizes"])
        aggregate.attributes[semconv.GRAPH_CAPTURE_TIMES_S] = [state["times_ns"][n] / 1e9 for n in state["sizes"]]


def _batch_size_hint() -> int | None:
    stack = getattr(_local, "batch_sizes", None)
    if stack:
        return stack[-1]
    return _vllm_batch_size()


def _vllm_batch_size() -> int | None:
    """vLLM sets a forward context around each capture whose batch descriptor holds the
    number of tokens the graph is captured for. Read only if vLLM is already imported."""
    module = sys.modules.get("vllm.forward_context")
    if module is None:
        return None
    try:
        context = getattr(module, "_forward_context", None)
        descriptor = getattr(context, "batch_descriptor", None)
        size = getattr(descriptor, "num_tokens", None)
    except Exception:  # vLLM's private context, probed: unknown rather than raised
        return None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


# --- wrappers -------------------------------------------------------------------------------------

def _graph_of_cuda_cm(instance):
    return instance.cuda_graph


def _graph_itself(instance):
    return instance


def _context_enter(api: str, graph_of):
    def wrapper(wrapped, instance, args, kwargs):
        if _session.ACTIVE is None:
            return wrapped(*args, **kwargs)
        capture = None
        with internal_errors("graph capture enter"):
            capture = _open_capture(graph_of(instance), api, "context")
        try:
            return wrapped(*args, **kwargs)
        except BaseException as error:
            _close_guarded(capture, error)
            raise

    return wrapper


def _context_exit(graph_of):
    def wrapper(wrapped, instance, args, kwargs):
        capture = None
        if _session.ACTIVE is not None:
            with internal_errors("graph capture exit"):
                capture = _find_capture(graph_of(instance))
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as error:
            _close_guarded(capture, _body_error(args) or error)
            raise
        _close_guarded(capture, _body_error(args))
        return result

    return wrapper


def _body_error(exit_args) -> BaseException | None:
    """The exception the ``with`` body raised, as ``__exit__`` receives it."""
    if len(exit_args) >= 2 and isinstance(exit_args[1], BaseException):
        return exit_args[1]
    return None


def _capture_begin(api: str):
    def wrapper(wrapped, instance, args, kwargs):
        if _session.ACTIVE is None:
            return wrapped(*args, **kwargs)
        created = None
        with internal_errors("capture_begin"):
            found = _find_capture(instance)
            if found is None:  # not inside a graph context we already opened
                created = _open_capture(instance, api, "begin")
            else:
                found.capture_begins()
        try:
            return wrapped(*args, **kwargs)
        except BaseException as error:
            _close_guarded(created, error)
            raise

    return wrapper


def _capture_end(wrapped, instance, args, kwargs):
    capture = None
    if _session.ACTIVE is not None:
        with internal_errors("capture_end"):
            found = _find_capture(instance)
            capture = found if found is not None and found.owner == "begin" else None
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        _close_guarded(capture, error)
        raise
    _close_guarded(capture, None)
    return result


def _close_guarded(capture: _Capture | None, error: BaseException | None) -> None:
    if capture is None:
        return
    with internal_errors("graph capture end"):
        _close_capture(capture, error)


def _make_graphed_callables(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None:
        return wrapped(*args, **kwargs)
    container = None
    hint = None
    with internal_errors("make_graphed_callables"):
        hint = _sample_batch_size(args, kwargs)
        container = session.start_container(semconv.PHASE_GRAPH_CAPTURE, {semconv.GRAPH_API: API_MAKE_GRAPHED},
                                            name=semconv.SPAN_MAKE_GRAPHED_CALLABLES)
    stack = _local.__dict__.setdefault("batch_sizes", [])
    if hint is not None:
        stack.append(hint)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        _finish_guarded(container, error)
        raise
    finally:
        if hint is not None:
            stack.pop()
    _finish_guarded(container, None)
    return result


def _finish_guarded(container, error: BaseException | None) -> None:
    if container is None:
        return
    with internal_errors("make_graphed_callables"):
        container.finish(error=error)


def _sample_batch_size(args, kwargs) -> int | None:
    """Dimension 0 of the first sample input: the batch size the graphs are captured for."""
    import torch

    sample = args[1] if len(args) > 1 else kwargs.get("sample_args")
    for leaf in torch.utils._pytree.tree_leaves(sample):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return None
