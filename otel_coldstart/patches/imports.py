"""Imports after ``instrument()``: phase ``import``, one span per slow top-level import.

In a script that calls ``instrument()`` first and then imports torch and its stack, the
imports are most of the start-up; without this they read as "unattributed".

Where: CPython's import statement (``PyImport_ImportModuleLevelObject`` in Python/import.c,
3.8 to 3.13) looks ``_find_and_load`` up on the ``_frozen_importlib`` module (which is also
``importlib._bootstrap``) each time a module is not in ``sys.modules`` yet, and calls it;
``-X importtime`` times exactly that call. ``importlib.import_module`` and ``__import__``
reach the same function through a module-global lookup in ``_bootstrap._gcd_import``, and a
package's parent imports go back through ``__import__``. So replacing that one attribute
sees every module really loaded, once, with nesting, on every path, and nothing else: a
module already imported costs a dictionary lookup in C and never reaches us.

What it must not change: the wrapper calls the original with the same arguments and returns
or raises exactly what it returned or raised (``ImportError`` used as control flow,
circular imports, import locks and threads are the original's business: it runs unchanged
inside). Its code object is compiled with the file name ``<frozen importlib._bootstrap>``,
so that CPython trims it from import tracebacks with the rest of importlib
(``remove_importlib_frames``) and ``warnings.warn(stacklevel=...)`` skips it as an internal
frame: a traceback or a warning raised during an import reads exactly as without us.

What it records: per thread, a stack of the imports in progress; each module's self time
(its own body, without what it imported) goes to the top-level import it happens under.
When a top-level import ends and took at least ``OTEL_COLDSTART_IMPORT_MIN_MS`` (20 ms by
default), it becomes one ``coldstart.import`` span under whatever span was current when it
began, with its cumulative and self time, the modules it loaded and the heaviest of them and
of their top-level packages (bounded lists). Faster ones (``from safetensors import
safe_open``: 2 ms) are coalesced: consecutive fast imports on a thread under the same parent,
each starting within ``BATCH_GAP_MS`` of the previous one's end, become one aggregate
``coldstart.import`` span (``coldstart.calls`` imports, ``coldstart.busy_s`` their summed
time, its start and end those of the first and the last), written when the run of imports
is over (the next import starts later or elsewhere, a slow one starts, or the start-up ends).
So a block of import statements is one span, never one per statement, and nothing of it is
left "unattributed"; a batch under ``BATCH_MIN_MS`` in all is not written.

Why it was slow (issue 38), measured around each top-level import and never per module: the
modules compiled from source because no valid cached bytecode existed, and the time compiling
them (``SourceLoader.source_to_code`` is wrapped too: importlib calls it only when it found no
usable ``.pyc``, so a start-up with its bytecode cached never reaches it), the bytes the
process read from storage meanwhile (``getrusage(RUSAGE_SELF).ru_inblock``, the sum over the
process's threads of the counter ``/proc/self/io`` calls ``read_bytes``: page faults of a
``.so`` included), the importing thread's CPU time and its time waiting for a core (the
scheduler's run-queue wait, ``/proc/thread-self/schedstat``): what is neither waited on
storage or a lock, so a busy machine's wait is not taken for storage's. A few system calls at
each end of a top-level import.

``HOT_PATH``: removed at ``ready()`` (the original function is put back), so serving pays
nothing. Only CPython: elsewhere ``_frozen_importlib`` does not exist and nothing is patched.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from array import array
from types import FrameType
from typing import Any

from .. import own_cost, semconv, session as _session
from .._errors import report_internal_error

TARGETS = ("_frozen_importlib",)
HOT_PATH = True

DEFAULT_MIN_MS = 20.0
MAX_LISTED = 10  # entries of the heaviest-modules and heaviest-packages lists
BATCH_GAP_MS = 5.0  # fast imports further apart than this are separate batches
BATCH_MIN_MS = 0.5  # a batch of fast imports shorter than this in all is not written

# The wrapper. Compiled under importlib's own file name (see the module docstring); it calls
# back into this module only before and after the original, never around the import's body.
_WRAPPER_SOURCE = """
def _find_and_load(name, import_):
    frame = _enter(name) if _live[0] else None
    if frame is None:
        return _original(name, import_)
    try:
        module = _original(name, import_)
    except BaseException:
        _leave(frame, True)
        raise
    _leave(frame, False)
    return module
"""
_WRAPPER_FILENAME = "<frozen importlib._bootstrap>"

# Compiling a module's source: importlib's SourceLoader.get_code calls source_to_code only when
# no valid cached bytecode was found. Under importlib's external module's file name, so that a
# SyntaxError's traceback is trimmed as without us.
_COMPILE_WRAPPER_SOURCE = """
def source_to_code(self, *args, **kwargs):
    if not _live[0]:
        return _original(self, *args, **kwargs)
    start = _clock()
    try:
        return _original(self, *args, **kwargs)
    finally:
        _compiled(start)
"""
_COMPILE_WRAPPER_FILENAME = "<frozen importlib._bootstrap_external>"

_installed = None  # (bootstrap module, original function, our wrapper, its live flag) while patched
_installed_compile: tuple[Any, Any, Any, list] | None = None  # (SourceLoader class, original source_to_code, our wrapper, its live flag)
_min_ns = int(DEFAULT_MIN_MS * 1e6)
_local = threading.local()  # .stack: imports in progress on this thread; .busy: our own bookkeeping
OWN_THREAD_PREFIX = "otel-coldstart-"  # every thread the plugin starts is named so
_OWN_PACKAGE = __name__.split(".")[0] + "."  # "otel_coldstart.": the plugin's own modules
_OWN_MODULE = __name__.split(".")[0] + ":"  # its __init__, as _importer() names an importer


def get_version() -> str | None:
    return None  # the interpreter's own import system


def is_patched() -> bool:
    return _installed is not None


def patch() -> None:
    global _installed, _min_ns
    if _installed is not None:
        return
    bootstrap: Any = sys.modules.get("_frozen_importlib")  # importlib._bootstrap: private names patched
    original = getattr(bootstrap, "_find_and_load", None)
    if bootstrap is None or not callable(original) or getattr(original, "__coldstart_imports__", False):
        return
    _min_ns = _threshold_ns()
    live = [True]  # cleared by unpatch(): a wrapper left in someone else's chain goes inert
    wrapper = _make_wrapper(_WRAPPER_SOURCE, _WRAPPER_FILENAME, "_find_and_load", original, live,
                            _enter=_enter, _leave=_leave)
    bootstrap._find_and_load = wrapper
    _installed = (bootstrap, original, wrapper, live)
    _patch_compile()


def _make_wrapper(source: str, filename: str, name: str, original, live: list, **calls):
    """The wrapper ``name`` defined by ``source``, compiled under importlib's ``filename``."""
    namespace = {"_original": original, "_live": live, "__name__": __name__, **calls}
    exec(compile(source, filename, "exec"), namespace)
    wrapper = namespace[name]
    wrapper.__coldstart_imports__ = True
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    return wrapper


def _patch_compile() -> None:
    global _installed_compile
    loader = getattr(sys.modules.get("_frozen_importlib_external"), "SourceLoader", None)
    original = loader.__dict__.get("source_to_code") if loader is not None else None
    if loader is None or not callable(original) or getattr(original, "__coldstart_imports__", False):
        return
    live = [True]
    wrapper = _make_wrapper(_COMPILE_WRAPPER_SOURCE, _COMPILE_WRAPPER_FILENAME, "source_to_code", original, live,
                            _compiled=_compiled, _clock=time.perf_counter_ns)
    loader.source_to_code = wrapper
    _installed_compile = (loader, original, wrapper, live)


def _unpatch_compile() -> None:
    global _installed_compile
    installed, _installed_compile = _installed_compile, None
    if installed is None:
        return
    loader, original, wrapper, live = installed
    live[0] = False
    if loader.__dict__.get("source_to_code") is wrapper:
        loader.source_to_code = original


def unpatch() -> None:
    global _installed
    _unpatch_compile()
    installed, _installed = _installed, None
    if installed is None:
        return
    bootstrap, original, wrapper, live = installed
    live[0] = False
    # Put the original back unless someone wrapped over ours since: then ours stays in their
    # chain, inert (a pass-through), so theirs keeps working, and a later patch() wraps theirs.
    if getattr(bootstrap, "_find_and_load", None) is wrapper:
        bootstrap._find_and_load = original


def _threshold_ns() -> int:
    value = os.environ.get("OTEL_COLDSTART_IMPORT_MIN_MS", "").strip()
    try:
        ms = float(value) if value else DEFAULT_MIN_MS
    except ValueError:
        ms = DEFAULT_MIN_MS
    return int(max(0.0, ms) * 1e6) if ms == ms else int(DEFAULT_MIN_MS * 1e6)


class _Import:
    """A top-level import in progress on a thread: what becomes the span (its session,
    wall-clock start) and every module loaded under it, as parallel name and self-ns columns.

    The imports nested in it are not objects: their name, start and children's time are
    columns of the thread's stack (``_Stack``). A model server imports thousands of modules
    during its start-up, and every garbage-collected object made per module (a frame object,
    a (name, ns) tuple) counted towards the interpreter's next full collection: measured on
    the 650 MB load + cast benchmark, torch's import through the hook moved a 100 ms
    generation-2 collection into the host's cast. Strings, ints and arrays are not tracked
    by the collector."""

    __slots__ = ("name", "session", "wall_start", "module_names", "module_ns", "plugin_ns", "importer",
                 "compiled", "compile_ns", "read_blocks", "cpu_ns", "queued_ns")

    def __init__(self, name: str) -> None:
        self.name = name
        self.importer: str | None = None  # "module:line" of the code that ran the import
        self.session = None
        self.wall_start = 0
        self.module_names: list | None = None
        self.module_ns = array("q")
        self.plugin_ns = 0  # the plugin's own work inside it (run_as_plugin): coldstart.import.own_s
        self.compiled = 0  # modules compiled from source under it (no valid cached bytecode)
        self.compile_ns = 0
        self.read_blocks = -1  # the process's storage reads (512-byte blocks) when it began; -1: unknown
        self.cpu_ns = 0  # the thread's CPU time when it began
        self.queued_ns = -1  # the thread's run-queue wait when it began; -1: unknown

    @property
    def modules(self) -> list | None:
        """(name, self ns) of every module loaded under it so far, made when a span is written."""
        return None if self.module_names is None else list(zip(self.module_names, self.module_ns))


class _Stack:
    """The imports in progress on one thread, top-level first, as columns (no object per import)."""

    __slots__ = ("top", "names", "starts", "children")

    def __init__(self) -> None:
        self.top: _Import | None = None
        self.names: list = []
        self.starts = array("q")
        self.children = array("q")  # time of the imports nested in each, to leave its self time

    def cut(self, depth: int) -> None:
        del self.names[depth:]
        del self.starts[depth:]
        del self.children[depth:]


def _thread_stack(local) -> _Stack:
    """This thread's import stack, made on its first import."""
    stack = getattr(local, "stack", None)
    if stack is None:
        stack = local.stack = _Stack()
        # Our own threads (the in-flight monitor, the span exporter, ...) import our modules and
        # the SDK's lazily: the plugin's cost, not the host's import time, and a second thread's
        # span would overlap the host's phases. Decided once per thread.
        local.busy = threading.current_thread().name.startswith(OWN_THREAD_PREFIX)
    return stack


class _PluginWork:
    """The plugin's own work inside a host's import, in progress (see run_as_plugin)."""

    __slots__ = ("start", "was_busy")
    start: int
    was_busy: bool


def _begin_plugin_work(local) -> _PluginWork:
    _thread_stack(local)
    work = _PluginWork()
    work.was_busy = local.busy
    local.busy = True  # its own imports are not recorded
    work.start = time.perf_counter_ns()
    return work


def _end_plugin_work(local, work: _PluginWork, end: int) -> None:
    local.busy = work.was_busy
    stack = local.stack
    if stack.names and stack.top is not None:
        elapsed = end - work.start
        stack.children[-1] += elapsed  # not the importing module's self time
        top = stack.top
        top.plugin_ns += elapsed
        session = top.session
        if session is not None:  # the plugin's own cost too, in the import phase it lands in (own_cost.py)
            try:
                own_cost.of(session).add(semconv.PHASE_IMPORT, elapsed)
            except Exception:  # in the host's import's finally: never raised into it
                report_internal_error("own cost of patching")


def run_as_plugin(work, *args):
    """Run the plugin's own work inside whatever import is in progress on this thread: a patch
    module imported and applied when its library arrives (the post-import hook runs inside the
    host's ``import torch``). Its modules are not listed as the host's, and its time is taken
    out of the importing module's self time and written as the import span's
    ``coldstart.import.own_s``, which the analyzer keeps out of its "import less" advice.
    A module of this package imported lazily on the host's thread is treated the same way
    (``_enter``)."""
    local = _local
    token = _begin_plugin_work(local)
    try:
        return work(*args)
    finally:
        _end_plugin_work(local, token, time.perf_counter_ns())


def _enter(name):
    """Before the original runs: None when there is nothing to record (no start-up, a module
    already imported, our own bookkeeping importing something), else a token for ``_leave``:
    the top-level import's record, a nested import's depth, or the plugin's own module's
    ``_PluginWork``. Runs once per module loaded: kept to a few attribute reads, and no object
    the garbage collector tracks (but for our own modules, a handful per process)."""
    session = _session.ACTIVE
    if session is None or session.ended or name in sys.modules:
        return None
    local = _local
    stack = _thread_stack(local)
    if local.busy:
        return None
    if name.startswith(_OWN_PACKAGE):
        # The plugin importing one of its own modules lazily on the host's thread (a probe's
        # or a patch module's first use): the plugin's work, never the host's import.
        return _begin_plugin_work(local)
    names = stack.names
    if names and stack.top.session is not session:
        # Left from another start-up: a child forked during an import, or a re-instrument
        # in the middle of one. Those imports are not this start-up's.
        stack.cut(0)
    start = time.perf_counter_ns()
    depth = len(names)
    token = depth
    if not depth:  # a top-level import: it may become a span
        try:
            importer = _importer()
        except Exception:  # a frame we cannot read: the import is recorded without its importer
            importer = None
        if importer is not None and (importer.startswith(_OWN_PACKAGE) or importer.startswith(_OWN_MODULE)):
            # The plugin importing a library lazily on the host's thread (ctypes at the first
            # residency probe or the SIGTERM watcher): its own work, never the host's import.
            return _begin_plugin_work(local)
        frame = _Import(name)
        local.busy = True
        try:
            frame.importer = importer
            frame.session = session
            frame.wall_start = time.time_ns()
            frame.module_names = []
            frame.read_blocks = _process_read_blocks()
            frame.cpu_ns = time.thread_time_ns()
            frame.queued_ns = _runqueue_wait_ns()
            session.track_open(frame, semconv.phase_span_name(semconv.PHASE_IMPORT), semconv.PHASE_IMPORT,
                               frame.wall_start, lambda end_ns, f=frame: _interrupt(f, end_ns), label=name)
        except Exception:
            report_internal_error("import start")
            return None
        finally:
            local.busy = False
        stack.top = token = frame
    names.append(name)
    stack.starts.append(start)
    stack.children.append(0)
    return token


def _importer() -> str | None:
    """``module:line`` of the code that ran the import being entered: the first frame out of the
    import system (our wrapper, importlib's frozen modules, ``importlib.import_module``). Once
    per top-level import only: a few frame reads and one string, which the collector does not
    track."""
    frame: FrameType | None = sys._getframe(2)  # above _enter and the wrapper
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith("<frozen importlib") or filename.endswith(_IMPORTLIB_INIT)):
            module = frame.f_globals.get("__name__")
            return f"{module}:{frame.f_lineno}" if isinstance(module, str) else None
        frame = frame.f_back
    return None


_IMPORTLIB_INIT = os.path.join("importlib", "__init__.py")  # import_module()


def _leave(token, failed: bool) -> None:
    """After the original returned or raised: never raises (the host's result or exception
    is on its way back)."""
    end = time.perf_counter_ns()
    if type(token) is _PluginWork:
        try:
            _end_plugin_work(_local, token, end)
        except Exception:
            report_internal_error("import end")
        return
    try:
        stack = _local.stack
        top = token if type(token) is _Import else None
        depth = 0 if top is not None else token
        if depth >= len(stack.names) or (top is not None and stack.top is not top):
            return  # cut away meanwhile (another start-up's import stack): nothing of ours
        name, cumulative = stack.names[depth], end - stack.starts[depth]
        own = cumulative - stack.children[depth]
        stack.cut(depth)  # an inner record left behind goes too: the stack stays consistent
        if depth:
            stack.children[depth - 1] += cumulative
            names = stack.top.module_names
            if names is not None:
                names.append(name)
                stack.top.module_ns.append(own)
            return
        stack.top = None
        if top is None:  # (never: depth 0 is entered with its _Import)
            return
        top.module_names.append(name)
        top.module_ns.append(own)
        cpu_ns = time.thread_time_ns() - top.cpu_ns
        read_blocks = _since(top.read_blocks, _process_read_blocks)
        queued_ns = _since(top.queued_ns, _runqueue_wait_ns)
    except Exception:
        report_internal_error("import end")
        return
    _local.busy = True  # emitting the span may import (the SDK's lazy modules): not recorded
    try:
        _finish(top, cumulative, own, failed, read_blocks, cpu_ns, queued_ns)
    except Exception:
        report_internal_error("import end")
    finally:
        _local.busy = False


def _finish(frame: _Import, cumulative_ns: int, own_ns: int, failed: bool, read_blocks: int, cpu_ns: int,
            queued_ns: int) -> None:
    session = frame.session
    # The session's open-work registry decides, under its lock, who writes the span: this
    # thread, or the end of the start-up that cut the import short (_interrupt).
    if session is None or not session.untrack_open(frame):
        return
    if session is not _session.ACTIVE:
        return  # uninstrumented or forked since it began
    # The parent is read now, on the importing thread: the span current when the import ends
    # is the one current when it began (an import statement opens no span around itself).
    parent = session.parent_span_context()
    batches = session.state(__name__, _Batches)
    if cumulative_ns < _min_ns:
        batches.add(session, frame, parent, cumulative_ns, read_blocks, cpu_ns, queued_ns)
        return
    batches.flush(session, threading.get_ident())  # what came before it, first
    attrs = _attributes(list(frame.modules or ()))
    _why_slow(attrs, frame.compiled, frame.compile_ns, read_blocks, cpu_ns, queued_ns)
    attrs[semconv.IMPORT_MODULE] = frame.name
    attrs[semconv.IMPORT_CUMULATIVE_S] = cumulative_ns / 1e9
    attrs[semconv.IMPORT_SELF_S] = own_ns / 1e9
    attrs[semconv.THREAD_ID] = threading.get_ident()
    attrs[semconv.THREAD_NAME] = threading.current_thread().name
    if failed:
        attrs[semconv.IMPORT_FAILED] = True
    if frame.importer is not None:
        attrs[semconv.IMPORT_IMPORTER] = frame.importer
    if frame.plugin_ns:
        attrs[semconv.IMPORT_OWN_S] = frame.plugin_ns / 1e9
    session.emit_span(semconv.phase_span_name(semconv.PHASE_IMPORT), semconv.PHASE_IMPORT, parent,
                      frame.wall_start, frame.wall_start + cumulative_ns, attrs)


class _Batch:
    """Consecutive fast top-level imports of one thread under one parent."""

    __slots__ = ("parent", "start", "end", "busy_ns", "calls", "modules", "thread_name", "plugin_ns",
                 "compiled", "compile_ns", "read_blocks", "cpu_ns", "queued_ns")

    def __init__(self, parent, start: int, thread_name: str) -> None:
        self.parent = parent
        self.start = start
        self.end = start
        self.busy_ns = 0
        self.calls = 0
        self.modules: list = []
        self.thread_name = thread_name
        self.plugin_ns = 0
        self.compiled = 0
        self.compile_ns = 0
        self.read_blocks = 0  # -1 once one of its imports could not count them
        self.cpu_ns = 0
        self.queued_ns = 0  # -1 once one of its imports could not count it


class _Batches:
    """The open batch of each thread, for one start-up (kept on its session)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_thread: dict[int, _Batch] = {}

    def add(self, session, frame: _Import, parent, cumulative_ns: int, read_blocks: int, cpu_ns: int,
            queued_ns: int) -> None:
        thread = threading.get_ident()
        start, end = frame.wall_start, frame.wall_start + cumulative_ns
        with self.lock:
            batch = self.by_thread.get(thread)
            if batch is not None and (batch.parent != parent or start - batch.end > _BATCH_GAP_NS):
                del self.by_thread[thread]
                _emit_batch(session, thread, batch)
                batch = None
            if batch is None:
                batch = self.by_thread[thread] = _Batch(parent, start, threading.current_thread().name)
            batch.end = end
            batch.busy_ns += cumulative_ns
            batch.calls += 1
            batch.plugin_ns += frame.plugin_ns
            batch.compiled += frame.compiled
            batch.compile_ns += frame.compile_ns
            known = batch.read_blocks >= 0 and read_blocks >= 0
            batch.read_blocks = batch.read_blocks + read_blocks if known else -1
            batch.cpu_ns += cpu_ns
            batch.queued_ns = batch.queued_ns + queued_ns if batch.queued_ns >= 0 and queued_ns >= 0 else -1
            batch.modules.extend(frame.modules or ())

    def flush(self, session, thread: int | None = None) -> None:
        """Write the open batch of ``thread`` (all of them when None)."""
        with self.lock:
            if thread is None:
                taken, self.by_thread = list(self.by_thread.items()), {}
            else:
                batch = self.by_thread.pop(thread, None)
                taken = [(thread, batch)] if batch is not None else []
        for owner, batch in taken:
            _emit_batch(session, owner, batch)


_BATCH_GAP_NS = int(BATCH_GAP_MS * 1e6)
_BATCH_MIN_NS = int(BATCH_MIN_MS * 1e6)


def _emit_batch(session, thread: int, batch: _Batch) -> None:
    if batch.busy_ns < _BATCH_MIN_NS:
        return
    attrs = _attributes(batch.modules)
    _why_slow(attrs, batch.compiled, batch.compile_ns, batch.read_blocks, batch.cpu_ns, batch.queued_ns)
    attrs.update({semconv.AGGREGATE: True, semconv.CALLS: batch.calls, semconv.BUSY_S: batch.busy_ns / 1e9,
                  semconv.THREAD_ID: thread, semconv.THREAD_NAME: batch.thread_name})
    if batch.plugin_ns:
        attrs[semconv.IMPORT_OWN_S] = batch.plugin_ns / 1e9
    session.emit_span(semconv.phase_span_name(semconv.PHASE_IMPORT), semconv.PHASE_IMPORT, batch.parent,
                      batch.start, batch.end, attrs)


def end_of_startup(session) -> None:
    """The start-up ends: write the fast imports still waiting in a batch (they ended)."""
    batches = session.state(__name__, _Batches)
    batches.flush(session)


def _attributes(modules: list) -> dict:
    """The modules loaded (name, self ns): how many, the heaviest, and their top-level
    packages' sums (bounded lists, largest first)."""
    heaviest = sorted(modules, key=lambda item: -item[1])[:MAX_LISTED]
    packages: dict[str, int] = {}
    for name, ns in modules:
        package = name.partition(".")[0]
        packages[package] = packages.get(package, 0) + ns
    top_packages = sorted(packages.items(), key=lambda item: -item[1])[:MAX_LISTED]
    return {
        semconv.IMPORT_MODULES: len(modules),
        semconv.IMPORT_HEAVIEST: [name for name, _ in heaviest],
        semconv.IMPORT_HEAVIEST_S: [ns / 1e9 for _, ns in heaviest],
        semconv.IMPORT_PACKAGES: [name for name, _ in top_packages],
        semconv.IMPORT_PACKAGES_S: [ns / 1e9 for _, ns in top_packages],
    }


def _interrupt(frame: _Import, end_ns: int) -> None:
    """The start-up was cut short (exit, SIGTERM, uninstrument) during this import: write
    what it had loaded so far, marked interrupted (its own self time is not known yet),
    under the root (this runs on the thread that ends the start-up, which cannot read the
    importing thread's current span)."""
    session = frame.session
    if session is None or not session.untrack_open(frame):
        return
    attrs = _attributes(list(frame.modules or ()))
    attrs[semconv.IMPORT_MODULE] = frame.name
    attrs[semconv.IMPORT_CUMULATIVE_S] = max(0, end_ns - frame.wall_start) / 1e9
    attrs[semconv.INTERRUPTED] = True
    # Its CPU time is the importing thread's, which this thread cannot read; the rest is at hand.
    _why_slow(attrs, frame.compiled, frame.compile_ns, _since(frame.read_blocks, _process_read_blocks), None, -1)
    if frame.importer is not None:
        attrs[semconv.IMPORT_IMPORTER] = frame.importer
    if frame.plugin_ns:
        attrs[semconv.IMPORT_OWN_S] = frame.plugin_ns / 1e9
    session.emit_span(semconv.phase_span_name(semconv.PHASE_IMPORT), semconv.PHASE_IMPORT, session.root_context,
                      frame.wall_start, end_ns, attrs)


def _compiled(start: int) -> None:
    """A module's source was compiled (no valid cached bytecode): counted, with its time, on the
    top-level import in progress on this thread. Never raises (the code object is on its way)."""
    elapsed = time.perf_counter_ns() - start
    try:
        local = _local
        stack = getattr(local, "stack", None)
        if stack is None or local.busy or not stack.names:
            return
        top = stack.top
        if top is not None:
            top.compiled += 1
            top.compile_ns += elapsed
    except Exception:
        report_internal_error("import compile")


# ru_inblock is the task I/O accounting's read_bytes in 512-byte blocks on Linux only (other
# systems count operations); RUSAGE_SELF sums it over the process's threads, live and ended.
try:
    import resource as _resource

    _READ_BLOCKS = sys.platform.startswith("linux")
except ImportError:  # not on every platform
    _READ_BLOCKS = False
_BLOCK = 512


def _process_read_blocks() -> int:
    """The process's storage reads so far, in 512-byte blocks; -1 where unknown."""
    if not _READ_BLOCKS:
        return -1
    try:
        return _resource.getrusage(_resource.RUSAGE_SELF).ru_inblock
    except (OSError, ValueError):
        return -1


def _since(start: int, counter) -> int:
    """How far ``counter()`` moved since it read ``start``; -1 where either reading is unknown."""
    if start < 0:
        return -1
    end = counter()
    return end - start if end >= start else -1


_SCHEDSTAT = "/proc/thread-self/schedstat"  # on the CPU, waiting on a run queue (ns), timeslices
_schedstat_readable = [os.path.exists(_SCHEDSTAT)]  # cleared at the first failure: no second try


def _runqueue_wait_ns() -> int:
    """This thread's time so far ready to run but waiting for a core; -1 where unknown."""
    if not _schedstat_readable[0]:
        return -1
    try:
        fd = os.open(_SCHEDSTAT, os.O_RDONLY)
        try:
            return int(os.read(fd, 128).split()[1])
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        _schedstat_readable[0] = False
        return -1


def _why_slow(attrs: dict, compiled: int, compile_ns: int, read_blocks: int, cpu_ns: int | None,
              queued_ns: int) -> None:
    attrs[semconv.IMPORT_COMPILED_MODULES] = compiled
    attrs[semconv.IMPORT_COMPILE_S] = compile_ns / 1e9
    if read_blocks >= 0:
        attrs[semconv.IMPORT_STORAGE_READ_BYTES] = read_blocks * _BLOCK
    if cpu_ns is not None and cpu_ns >= 0:
        attrs[semconv.IMPORT_CPU_S] = cpu_ns / 1e9
    if queued_ns >= 0:
        attrs[semconv.IMPORT_RUNQUEUE_S] = queued_ns / 1e9
