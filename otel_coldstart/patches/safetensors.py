"""safetensors: ``load_file``, ``load`` and every ``safe_open`` path.

transformers, accelerate and vLLM bind ``safe_open`` by name at import time, so replacing
the module attribute would miss them. Instead the methods of the Rust class itself
(``safetensors._safetensors_rust.safe_open``) are wrapped: ``__enter__``/``__exit__``,
``get_tensor``, ``get_slice`` (and the slice's ``__getitem__``, where the bytes are read)
and ``get_tensors`` (which ``load_file`` calls: a Rust loop that never goes through a
wrapped ``get_tensor``). ``__new__``/``__init__`` are never wrapped: a PyO3 type stays broken
after such an attribute is removed again.

A handle's span covers its lifetime, from ``__enter__`` (or its first read) to ``__exit__``
(or its last read), and is written only if a tensor was read through it: handles opened
just to look at metadata or keys emit nothing. Since the handle does not expose its path,
the path is found once per handle among the files this process has mapped (or holds open,
for the ``pread`` backend) by matching the handle's tensor names against each file's header.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
import threading
import time

from .. import probes, semconv, session as _session
from .._errors import internal_errors, report_internal_error
from .._regular_files import open_regular
from . import _folded_files
from ._files import (
    FileRead,
    _local as _file_reads,  # .depth: in_file_read() without a call, per tensor
    charge_own_cost,
    in_file_read,
    traced_read,
)
from ._storage import observe_file
from ._wrapping import ColdstartWrapper, PatchSet, installed_version

TARGETS = ("safetensors", "safetensors.torch")
HOT_PATH = False

_patches = PatchSet()
# A cache of file facts (tensor names by file identity), valid for the process's life.
_header_lock = threading.Lock()
_header_keys: dict[tuple, frozenset | None] = {}  # (path, size, mtime) -> tensor names


class _OpenHandles:
    """This start-up's safe_open handles, kept on its session (``session.state``): a fork or
    a new start-up begins with none of another's."""

    __slots__ = ("lock", "handles", "slices")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handles: dict[int, _Handle] = {}  # id(safe_open object) -> its read, while open
        self.slices: dict[int, _Handle] = {}  # id(slice object) -> the handle it came from


def _open_handles(session) -> _OpenHandles:
    return session.state(__name__, _OpenHandles)


def get_version() -> str | None:
    return installed_version("safetensors")


def is_patched() -> bool:
    return bool(_patches)


def patch() -> None:
    # Patch only what is imported already: importing safetensors.torch ourselves would
    # import torch into a process that only asked for safetensors. The post-import hooks
    # call patch() again when safetensors.torch arrives.
    rust = sys.modules.get("safetensors._safetensors_rust")
    if rust is not None:
        handle_type = rust.safe_open
        _patches.wrap(handle_type, "__enter__", _enter)
        _patches.wrap(handle_type, "__exit__", _exit)
        _patches.wrap(handle_type, "get_tensor", _get_tensor)
        _patches.wrap(handle_type, "get_slice", _get("get_slice"))
        _patches.wrap(handle_type, "get_tensors", _get("get_tensors"))
        _wrap_safe_open_names(handle_type)
    st_torch = sys.modules.get("safetensors.torch")
    if st_torch is not None:
        _patches.wrap(st_torch, "load_file", _load_file)
        _patches.wrap(st_torch, "load", _load_bytes)
        # load() looks deserialize up in its module at call time, so wrapping that global
        # also reaches callers who bound ``load`` by name before we patched.
        if hasattr(st_torch, "deserialize"):
            _patches.wrap(st_torch, "deserialize", _load_bytes)


def unpatch() -> None:
    session = _session.ACTIVE
    if session is not None:
        close_open_handles(session)
    _patches.restore()
    _restore_safe_open_names()


def end_of_startup(session) -> None:
    # Every handle's span ends at its last read: the start-up's reads of the file are over, its
    # figure is settled with the other files', and what it still maps out of the page cache is
    # followed after ready() (first-use records) like any mapped file, whether the server keeps
    # the handle inside a with-block or not (issue 39 item 7). At ready(), one inside a
    # with-block stays known, ended, until its __exit__: reads through it while serving open no
    # span and pay no hook. Any other end forgets every handle (the start-up was cut short).
    close_open_handles(session, keep_entered=session.end_reason == semconv.END_READY)


# --- whole-file loads ----------------------------------------------------------------------


def _load_file(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or in_file_read():
        return wrapped(*args, **kwargs)
    filename = args[0] if args else kwargs.get("filename")
    if not isinstance(filename, (str, bytes, os.PathLike)):
        return wrapped(*args, **kwargs)  # not a path: the host's call says so, nothing to trace
    began = time.perf_counter_ns()
    folded = None
    with internal_errors("folded file"):
        path = _path_of(filename)
        facts = _folded_files.folds(session, path) if path is not None else None
        if facts is not None:  # a small file past the first few: one aggregate for all of them
            folded = _folded_files.FoldedRead(session, path, facts, "safetensors.torch.load_file")
    if folded is not None:
        return _folded_files.traced_fold(folded, wrapped, args, kwargs, began)

    def open_read():
        return FileRead(session, os.fspath(filename), semconv.FORMAT_SAFETENSORS, "safetensors.torch.load_file")

    charge_own_cost(session, began)  # the size asked above
    return traced_read(open_read, wrapped, args, kwargs)


def _load_bytes(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or in_file_read():
        return wrapped(*args, **kwargs)
    data = args[0] if args else kwargs.get("data")

    def open_read():
        return FileRead(session, None, semconv.FORMAT_SAFETENSORS, "safetensors.torch.load", size=len(data))

    return traced_read(open_read, wrapped, args, kwargs)


# --- safe_open handles ---------------------------------------------------------------------


class _Handle:
    """A safe_open handle's read; its span starts with the first tensor read through it
    (at the handle's creation where our ``safe_open`` name wrapper saw it).

    ``get_slice`` reads no tensor data (transformers 4.x takes slices only for their dtype and
    shape when it builds a meta state dict): it only finds the handle's file, and the span
    is opened by the first real read, a ``get_tensor`` or a slice's ``[...]``, which may run on
    a pool thread (transformers 5), hence the lock.
    """

    __slots__ = ("opened_ns", "thread", "in_with", "encloses", "parent", "read", "ambient", "path", "path_known",
                 "lock", "seen_open", "ended", "folded")

    def __init__(self, opened_ns: int, in_with: bool, parent=None, path: str | None = None,
                 folded: _folded_files.FoldedRead | None = None) -> None:
        self.opened_ns = opened_ns
        self.thread = threading.get_ident()
        self.in_with = in_with
        # The span current at __enter__: work done while it is still current is inside the
        # with-block and outside any span the host opened there.
        self.encloses = _session.current_span_id() if in_with else 0
        self.parent = parent  # where the with-block was entered; else where the first read is
        self.read: FileRead | _folded_files.FoldedRead | None = None
        self.ambient: _session.AmbientParent | None = None
        self.path: str | None = path
        # Created through our safe_open name wrapper: path from its argument, residency
        # measured before the handle read the header (see _open_handle).
        self.seen_open = path is not None
        self.path_known = path is not None
        self.lock = threading.Lock()
        self.ended = False  # its span was ended by the end of the start-up (kept open while serving)
        # A small file past the first few (_folded_files): no span, its read joins the aggregate.
        self.folded = folded

    def know_path(self, handle_object) -> None:
        if not self.path_known:
            self.path = _resolve_path(handle_object)
            self.path_known = True

    def ensure_read(self, session, handle_object=None) -> FileRead | _folded_files.FoldedRead:
        with self.lock:
            if self.read is None and self.folded is not None:
                # No span, so nothing to nest the with-block's work under: it stays where it is.
                self.read = self.folded
            elif self.read is None:
                if handle_object is not None:
                    self.know_path(handle_object)
                self.read = FileRead(session, self.path, semconv.FORMAT_SAFETENSORS, "safetensors.safe_open",
                                     make_current=False, start_ns=self.opened_ns, parent=self.parent,
                                     lazy_reads=True, opened_unseen=not self.seen_open)
                if self.in_with and self.thread == threading.get_ident():
                    # Work done inside the with-block (casts, copies) nests under this shard.
                    # Never by attaching the span to the OTel context: the handle outlives
                    # the host's own spans, whose detach would then run out of order.
                    self.ambient = _session.push_ambient_parent(self.encloses, self.read.span_context, session)
            return self.read

    def close(self, error: BaseException | None, end_ns: int | None) -> None:
        if self.ended:
            return
        self.ended = True
        if self.ambient is not None:
            self.ambient.open = False
        if self.read is not None:
            self.read.finish(error, end_ns=end_ns)


def _enter(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or in_file_read():
        return wrapped(*args, **kwargs)
    opened = time.time_ns()
    result = wrapped(*args, **kwargs)
    began = time.perf_counter_ns()
    with internal_errors("safe_open.__enter__"):
        state = _open_handles(session)
        with state.lock:
            stale = state.handles.pop(id(instance), None)
            if stale is not None and stale.folded is not None and _created_and_unused(stale):
                # A folded small file: no span, so no parent or enclosing span to learn.
                stale.in_with = True
                state.handles[id(instance)] = stale
                stale = None
            elif _created_and_unused(stale):  # made by our safe_open wrapper just before: keep what it saw
                entered = _Handle(stale.opened_ns, in_with=True, parent=session.parent_span_context(),
                                  path=stale.path, folded=stale.folded)
                state.handles[id(instance)] = entered
                stale = None
                if entered.folded is None:  # its span starts at opened_ns, whenever it is made
                    session.wait_for_first_read(functools.partial(_open_if_still_enclosed, entered, session))
            else:
                state.handles[id(instance)] = _Handle(opened, in_with=True, parent=session.parent_span_context())
        if stale is not None:  # an earlier handle at the same address that never exited
            stale.close(None, stale.read.last_ns if stale.read else None)
    charge_own_cost(session, began)
    return result


def _open_if_still_enclosed(handle: _Handle, session) -> bool:
    """session.wait_for_first_read's callback: make the handle's span now, if the with-block's
    span is still current; True once nothing is left to do for it."""
    if handle.read is not None or handle.ended:
        return True
    if _session.current_span_id() != handle.encloses:
        return False  # inside a span the host opened in the with-block: its work nests there
    with internal_errors("safe_open: span before the first read"):
        handle.ensure_read(session)
    return True


def _exit(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    # Inside a traced whole-file read (load_file's own handle) no handle was registered: its
    # __enter__ stood aside too, and a handle always exits inside the read that entered it.
    if session is None or _file_reads.depth:
        return wrapped(*args, **kwargs)
    began = time.perf_counter_ns()
    state = _open_handles(session)
    with state.lock:
        handle = state.handles.pop(id(instance), None)
    host_began = time.perf_counter_ns()
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as raised:  # the handle's own exit failed (or was interrupted): it ends with that
        host_ns = time.perf_counter_ns() - host_began
        _close_exited(state, handle, raised)
        charge_own_cost(session, began, host_ns, handle.read if handle is not None else None)
        raise
    host_ns = time.perf_counter_ns() - host_began
    error = args[1] if len(args) > 1 and isinstance(args[1], BaseException) else None
    _close_exited(state, handle, error)
    charge_own_cost(session, began, host_ns, handle.read if handle is not None else None)
    return result


def _close_exited(state: _OpenHandles, handle: _Handle | None, error: BaseException | None) -> None:
    if handle is None:
        return
    with internal_errors("safe_open.__exit__"):
        handle.close(error, None)
        _forget_slices(state, handle)


def _get_tensor(wrapped, instance, args, kwargs):
    """``get_tensor``: once per tensor, so the least that keeps the file's figures (its bytes,
    last read, and its storage reads where the start-up expects any: recorder.py)."""
    session = _session.ACTIVE
    if session is None or _file_reads.depth:  # _files.in_file_read(), written out
        return wrapped(*args, **kwargs)
    began = time.perf_counter_ns()
    read = io_before = None
    try:
        # A handle's read is opened once (its first tensor); every later call finds it with one
        # dictionary lookup (atomic: no lock on the per-tensor path).
        handle = session.state(__name__, _OpenHandles).handles.get(id(instance))
        read = handle.read if handle is not None else None
        if handle is not None and handle.ended:  # a handle kept open after ready(): serving
            read = None
        elif read is None and handle is not None and handle.folded is not None:
            read = handle.ensure_read(session)  # its header read was counted at its creation
            if session.recorder.sample_io:
                io_before = probes.thread_io()
        elif read is None:
            # Once per handle, before _read_for: finding the file reads its header, and those
            # reads are this file's reads too.
            io_before = probes.thread_io()
            read = _read_for(session, instance)
        elif session.recorder.sample_io:
            # The tensor's own storage reads, only where the start-up expects any: a file
            # not wholly in the page cache when its read began (a warm file is judged by
            # its residency then, and pages are not read one tensor at a time).
            io_before = probes.thread_io()
    except Exception:
        report_internal_error("safe_open.get_tensor")
    host_began = time.perf_counter_ns()
    result = wrapped(*args, **kwargs)
    host_ns = time.perf_counter_ns() - host_began
    if read is not None:
        try:
            if io_before is None:
                read.add_io(0, 0, result.nbytes, time.time_ns())
            else:
                io_after = probes.thread_io()
                read.add_io(io_after.read_bytes - io_before.read_bytes,
                            io_after.major_faults - io_before.major_faults, result.nbytes, time.time_ns())
        except Exception:
            report_internal_error("safe_open.get_tensor")
    charge_own_cost(session, began, host_ns)
    return result


def _get(method: str):
    """``get_slice`` (which only finds the handle's file: the slice's ``[...]`` reads) and
    ``get_tensors`` (every tensor of the file in one call)."""
    where = f"safe_open.{method}"

    def wrapper(wrapped, instance, args, kwargs):
        session = _session.ACTIVE
        if session is None or in_file_read():
            return wrapped(*args, **kwargs)
        began = time.perf_counter_ns()
        read = io_before = None
        try:
            if method == "get_slice":  # no data yet: the slice's [...] reads it
                _handle_for(session, instance).know_path(instance)
            else:
                # Before _read_for: finding the file reads its header, and those reads are
                # this file's reads too.
                io_before = probes.thread_io()
                read = _read_for(session, instance)
        except Exception:
            report_internal_error(where)
        host_began = time.perf_counter_ns()
        result = wrapped(*args, **kwargs)
        host_ns = time.perf_counter_ns() - host_began
        if method == "get_slice":
            try:
                _track_slice(session, result, instance)
            except Exception:
                report_internal_error("safe_open.get_slice")
        if read is not None and io_before is not None:
            try:
                io_after = probes.thread_io()
                read.add_io(io_after.read_bytes - io_before.read_bytes,
                            io_after.major_faults - io_before.major_faults,
                            sum(t.nbytes for t in result.values()), time.time_ns())
            except Exception:
                report_internal_error(where)
        charge_own_cost(session, began, host_ns)
        return result

    return wrapper


def _handle_for(session, instance) -> _Handle:
    state = _open_handles(session)
    with state.lock:
        handle = state.handles.get(id(instance))
        if handle is None:  # used without a with-block: lives until the start-up ends
            handle = state.handles[id(instance)] = _Handle(time.time_ns(), in_with=False)
    return handle


def _read_for(session, instance) -> FileRead | _folded_files.FoldedRead:
    return _handle_for(session, instance).ensure_read(session, instance)


def _track_slice(session, slice_object, handle_object) -> None:
    state = _open_handles(session)
    with state.lock:
        handle = state.handles.get(id(handle_object))
        if handle is None:
            return
        state.slices[id(slice_object)] = handle
    _patches.wrap(type(slice_object), "__getitem__", _slice_getitem)


def _forget_slices(state: _OpenHandles, handle: _Handle) -> None:
    if not state.slices:  # most handles take no slice (a read-only look: no lock per exit)
        return
    with state.lock:
        for key in [k for k, v in state.slices.items() if v is handle]:
            del state.slices[key]


def _slice_getitem(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None:
        return wrapped(*args, **kwargs)
    state = _open_handles(session)
    with state.lock:
        handle = state.slices.get(id(instance))
    if handle is None or handle.ended:  # not ours, or a handle kept open after ready(): serving
        return wrapped(*args, **kwargs)
    read = None
    try:
        read = handle.ensure_read(session)
    except Exception:
        report_internal_error("safe_open slice")
    if read is None:
        return wrapped(*args, **kwargs)
    began = time.perf_counter_ns()
    io_before = probes.thread_io() if session.recorder.sample_io else None  # as get_tensor
    host_began = time.perf_counter_ns()
    result = wrapped(*args, **kwargs)
    host_ns = time.perf_counter_ns() - host_began
    try:
        if io_before is not None:
            io_after = probes.thread_io()
            read.add_io(io_after.read_bytes - io_before.read_bytes,
                        io_after.major_faults - io_before.major_faults, result.nbytes, time.time_ns())
        else:
            read.add_io(0, 0, result.nbytes, time.time_ns())
    except Exception:
        report_internal_error("safe_open slice")
    charge_own_cost(session, began, host_ns)
    return result


def _path_of(filename) -> str | None:
    """The path a host passed as a str or path-like object; None for anything else (bytes, a
    wrong type: the host's own call reports that, not our hook)."""
    path = os.fspath(filename) if isinstance(filename, (str, os.PathLike)) else None
    return path if isinstance(path, str) else None


def _created_and_unused(handle: _Handle | None) -> bool:
    return handle is not None and handle.seen_open and not handle.in_with and handle.read is None


# --- the safe_open name: handle creation, before the header is read --------------------------
#
# safe_open(...) reads the file's header when the handle is created, and the kernel reads
# ahead several MiB with it (8 MiB measured here): on a 26 MiB shard, a third of the file.
# The Rust class cannot be touched (wrapping __new__/__init__ of a PyO3 type leaves it broken),
# so the *name* is wrapped where modules bind it (safetensors, safetensors.torch, and any
# module already imported with ``from safetensors import safe_open``; modules imported later
# get the wrapper from safetensors). The wrapper calls the class itself, so the handle is the
# real object (``with`` and its methods unchanged), and ``isinstance(h, safe_open)`` still holds
# (wrapt forwards __instancecheck__ to the class). Before the call it measures the file's
# residency; after it, it registers the handle with its path, taken from the call's own
# argument: no search of /proc/self/maps (~1 ms a file) for handles created this way.


_name_wrapper: list = []  # the one wrapper of the safe_open name, shared by every module


def _wrap_safe_open_names(handle_type) -> None:
    """Bind ``safe_open`` to one wrapper in every imported module that binds the class (one
    object everywhere, so ``safetensors.safe_open is safetensors.torch.safe_open`` still holds).

    Once per wrapper: patch() runs again for each of its targets, and a module imported since
    the scan took the name from ``safetensors``, which already binds the wrapper (with torch
    imported, one scan of sys.modules is ~1 ms on the host's thread; it ran four times)."""
    if _name_wrapper and _name_wrapper[0].__wrapped__ is handle_type:
        return
    wrapper = ColdstartWrapper(handle_type, _open_handle)
    _name_wrapper[:] = [wrapper]
    home = sys.modules.get("safetensors._safetensors_rust")  # the class's own module stays as it is
    for module in _modules_that_may_bind_safe_open():
        namespace = getattr(module, "__dict__", None)
        if module is not home and isinstance(namespace, dict) and namespace.get("safe_open") is handle_type:
            try:
                setattr(module, "safe_open", wrapper)
            except (AttributeError, TypeError):
                pass


def _modules_that_may_bind_safe_open() -> list:
    """Every imported module, or, when safetensors is being imported right now (this is its
    post-import hook: the import system marks its spec ``_initializing`` until the import
    returns), only safetensors' own: no other module can have taken the class from it yet,
    and every later one takes the name from the package, which binds the wrapper by then.
    That hook runs inside the host's load when the host imports safetensors there, and the
    full scan is 0.3-1 ms of its thread with torch imported (1,100 modules)."""
    package = sys.modules.get("safetensors")
    if getattr(getattr(package, "__spec__", None), "_initializing", False) is True:
        return [module for name, module in list(sys.modules.items())
                if name == "safetensors" or name.startswith("safetensors.")]
    return list(sys.modules.values())


def _restore_safe_open_names() -> None:
    """Every module bound to the wrapper gets the class back, including those that imported
    ``safe_open`` while it was the wrapper."""
    if not _name_wrapper:
        return
    wrapper = _name_wrapper.pop()
    handle_type = wrapper.__wrapped__
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("safe_open") is wrapper:
            try:
                setattr(module, "safe_open", handle_type)
            except (AttributeError, TypeError):
                pass


def _open_handle(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or in_file_read():
        return wrapped(*args, **kwargs)
    began = time.perf_counter_ns()
    opened = time.time_ns()  # the handle's span starts here: the residency measured below lands in it
    path = folded = None
    with internal_errors("safe_open"):
        path = _path_of(args[0] if args else kwargs.get("filename"))
        if path is not None:
            facts = _folded_files.folds(session, path)
            if facts is not None:  # a small file past the first few: its read joins the aggregate
                folded = _folded_files.FoldedRead(session, path, facts, "safetensors.safe_open")
                folded.io_before()  # the header read (a small file's whole read, with readahead)
            else:
                observe_file(session, path)  # before the header read
    host_began = time.perf_counter_ns()
    handle_object = wrapped(*args, **kwargs)
    host_ns = time.perf_counter_ns() - host_began
    if path is not None:
        with internal_errors("safe_open"):
            if folded is not None:
                folded.io_after()
            state = _open_handles(session)
            with state.lock:
                state.handles[id(handle_object)] = _Handle(opened, in_with=False, path=path, folded=folded)
    charge_own_cost(session, began, host_ns)
    return handle_object


def close_open_handles(session, keep_entered: bool = False) -> None:
    """End the spans of handles still open (used without ``with``, or never exited) at
    their last read; ``keep_entered``: those inside a with-block stay known, ended, until
    their exit (whatever is read through them later belongs to no span)."""
    state = _open_handles(session)
    with state.lock:
        # One inside a with-block that read nothing yet stays open: a file first read after
        # ready() (an adapter loaded on demand) is after-ready work, its span ending at the exit.
        handles = [h for h in state.handles.values() if not (keep_entered and h.in_with and h.read is None)]
        for key in [k for k, h in state.handles.items() if not (keep_entered and h.in_with)]:
            del state.handles[key]
        if not keep_entered:
            state.slices.clear()
    for handle in handles:
        with internal_errors("safe_open close"):
            handle.close(None, handle.read.last_ns if handle.read else None)


# --- finding a handle's file -----------------------------------------------------------------


def _resolve_path(handle_object) -> str | None:
    try:
        names = frozenset(handle_object.keys())
    except Exception:  # the host's handle, probed: its file stays unknown
        return None
    session = _session.ACTIVE
    state = _open_handles(session) if session is not None else _OpenHandles()
    with state.lock:
        claimed = {h.read.path for h in state.handles.values() if h.read is not None and h.read.path}
    for path in _candidate_files():
        if path in claimed:
            continue
        if _tensor_names(path) == names:
            return path
    for path in _candidate_files():  # a second handle on a file already open
        if _tensor_names(path) == names:
            return path
    return None


def _candidate_files() -> list[str]:
    """Regular files this process maps from offset 0 or holds open, newest fds last."""
    seen: dict[str, None] = {}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[2] == "00000000" and parts[4] != "0":
                    path = parts[5].strip()
                    if path.startswith("/") and not path.endswith(" (deleted)") and ".so" not in path:
                        seen[path] = None
    except OSError:
        pass
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if path.startswith("/") and os.path.isfile(path):
                seen[path] = None
    except OSError:
        pass
    return list(seen)


def _tensor_names(path: str) -> frozenset | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (path, stat.st_size, stat.st_mtime_ns)
    with _header_lock:
        if key in _header_keys:
            return _header_keys[key]
    names = None
    try:
        with open_regular(path) as handle:
            head = handle.read(8)
            if len(head) == 8:
                (length,) = struct.unpack("<Q", head)
                if 2 <= length <= min(stat.st_size - 8, 100 * 1024 * 1024):
                    header = json.loads(handle.read(length))
                    if isinstance(header, dict):
                        names = frozenset(k for k in header if k != "__metadata__")
    except (OSError, ValueError, UnicodeDecodeError):
        names = None
    with _header_lock:
        _header_keys[key] = names
    return names
