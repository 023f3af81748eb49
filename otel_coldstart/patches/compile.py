"""torch.compile / dynamo compilation: phase ``compile``.

torch provides the hook: ``torch._dynamo.callback``'s start and end callbacks run around
each compilation (the outermost one when compilations nest), with a compile id and what
triggered it (``dynamo`` for a new frame, ``lazy_backward``, ``cudagraph_recording``...).
Each becomes one ``coldstart.compile`` span, current while it runs so that graph captures
made by the compiler nest under it. Registering two callbacks is the whole patch
(plus re-registering them when ``torch._dynamo.reset()`` clears them), so it stays after ``ready()``, where a compilation (a new
shape on a first request) is marked ``coldstart.after_ready``.

Not included: importing ``torch._dynamo`` itself, which happens before the first callback.

Provenance (issue 26): whether a cache served the compilation, and where its time went, from
torch's own signals, each read guarded so that a torch without it leaves the attribute out
and names the source in ``coldstart.compile.evidence.unavailable`` (unknown, never zero):

- cache hits and misses per cache: the difference of ``torch._dynamo.utils.counters``
  (``inductor.fxgraph_cache_*``, ``aot_autograd.autograd_cache_*``,
  ``dynamo_cache.dynamo_cache_*``) between the start and the end callback;
- the compiled code (``coldstart.compile.frame``), torch's stage times (Dynamo, AOTAutograd,
  Inductor, code generation, kernel compilation, autotuning), the recompilation reason, the
  failure and the graph breaks: the ``CompilationMetrics`` torch records for each
  compilation. torch publishes them just after the end callback, from the exit of the
  compilation's metrics context, through ``torch._dynamo.utils.log_compilation_event`` (a
  hook point torch keeps for its own logging). So when that context is still open at the end
  callback, the span waits for them (on the same thread, microseconds later) and ends at the
  end callback's time; if they do not come, it is written without them at the next
  compilation or at the end of the start-up;
- the Inductor cache directory: ``TORCHINDUCTOR_CACHE_DIR`` as torch set it (torch writes the
  directory it uses there; it is read, never computed, which would create it).

Whether the cache could hit at all (issue 39): before the start-up's first compilation, how
many entries the FX graph and AOTAutograd cache directories already held (a persisted cache
that misses is not a cache that was lost); per compilation, whether autograd was on (torch
then compiles a training graph and writes its AOTAutograd entry only once the backward is
compiled, which a server never does: every start-up misses again) and how many AOTAutograd
entries torch saved (its ``autograd_cache_saved`` counter).

Why a cache was bypassed (issue 39), in torch's own words: the reason string torch puts in the
bypass exception it catches and counts (``fxgraph_cache_bypass``, ``autograd_cache_bypass``),
taken where torch produces it, at no cost to a compilation that is not bypassed: the
``cache_info`` that ``FxGraphCache.prepare_key`` returns ("Unsupported post grad custom
pass"), and the exception that passes through ``autograd_cache_key`` or reaches
``AOTAutogradCache._handle_save_error`` ("Cannot cache a graph with freezing enabled").
torch's own routes to these strings (its INFO log, the structured trace, the chromium event
log) are off unless the user turns them on, and turning them on would change what the host
logs. The modules are wrapped when torch imports them (the first compilation does), never
imported by us.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import time

from .. import semconv, session as _session, verdicts
from .._errors import internal_errors
from . import pinning
from ._wrapping import ColdstartWrapper, PatchSet, installed_version

TARGETS = ("torch._dynamo",)
HOT_PATH = False

_handler = None  # the callback handler we registered with (once per process)
_patches = PatchSet()


# Per cache: torch's counter group and its hit / miss / bypass counters.
_CACHE_COUNTERS = {
    "fx_graph": ("inductor", "fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
    "aot_autograd": ("aot_autograd", "autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
    "dynamo": ("dynamo_cache", "dynamo_cache_hit", "dynamo_cache_miss", None),
}
# CompilationMetrics fields (microseconds) -> our stage names (semconv.COMPILE_STAGES).
_STAGE_FIELDS = (
    ("dynamo", "dynamo_cumulative_compile_time_us"),
    ("aot_autograd", "aot_autograd_cumulative_compile_time_us"),
    ("inductor", "inductor_cumulative_compile_time_us"),
    ("codegen", "inductor_code_gen_cumulative_compile_time_us"),
    ("kernel_compile", "triton_compile_time_us"),
    ("autotune", "compile_time_autotune_time_us"),
)
# CompilationMetrics' own per-compilation cache counts: the fallback where counters are missing.
_METRIC_CACHE_FIELDS = {
    "fx_graph": (("inductor_fx_local_cache_hit_count", "inductor_fx_remote_cache_hit_count"),
                 ("inductor_fx_local_cache_miss_count", "inductor_fx_remote_cache_miss_count")),
    "aot_autograd": (("aotautograd_local_cache_hit_count", "aotautograd_remote_cache_hit_count"),
                     ("aotautograd_local_cache_miss_count", "aotautograd_remote_cache_miss_count")),
}
_MAX_REASON = 500  # a recompilation reason names guards; bounded
# Counters of entries torch wrote, per cache (read like _CACHE_COUNTERS).
_SAVED_COUNTERS = {"aot_autograd": ("aot_autograd", "autograd_cache_saved")}
# The subdirectories of the Inductor cache directory each cache keeps its entries in (torch's
# FxGraphCache._get_tmp_dir and AOTAutogradCache._get_tmp_dir).
_CACHE_SUBDIRS = {"fx_graph": "fxgraph", "aot_autograd": "aotautograd"}
# Where torch has a bypass reason in hand: (module, class or None, function, cache).
_BYPASS_REASON_SOURCES = (
    ("torch._inductor.codecache", "FxGraphCache", "prepare_key", "fx_graph"),
    ("torch._functorch._aot_autograd.autograd_cache", None, "autograd_cache_key", "aot_autograd"),
    ("torch._functorch._aot_autograd.autograd_cache", "AOTAutogradCache", "_handle_save_error", "aot_autograd"),
)
_MAX_REASONS = 8  # per start-up and cache: a model of 100 graphs bypassed for one reason says it once


class _Compilation:
    """One compilation: its span, the counters when it began, and, between the end callback
    and torch's CompilationMetrics, the end time and attributes it waits with."""

    __slots__ = ("container", "counts", "compile_id", "end_ns", "attrs", "thread", "reasons_from")

    def __init__(self, container, counts, compile_id: str, reasons_from: int = 0) -> None:
        self.reasons_from = reasons_from  # its bypass reasons: _OpenCompilations.reasons from here
        self.container = container
        self.counts = counts
        self.compile_id = compile_id
        self.end_ns = 0
        self.attrs: dict = {}
        self.thread = 0


class _OpenCompilations:
    """Compilations in progress in this start-up, innermost last, and those waiting for their
    metrics (kept on its session). Per start-up, not per thread: torch runs the end callbacks
    of a compilation on whichever thread ends the last one pending."""

    __slots__ = ("lock", "stack", "waiting", "entries_at_start", "reasons")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stack: list[_Compilation] = []
        self.waiting: list[_Compilation] = []
        self.entries_at_start: dict | None = None  # per cache, before the first compilation
        self.reasons: list[tuple[str, str]] = []  # (cache, torch's bypass reason), in order


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
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None and callable(getattr(utils, "log_compilation_event", None)):
        _patches.wrap(utils, "log_compilation_event", _metrics_published)
    _handler = callback_handler
    import wrapt

    for module in dict.fromkeys(source[0] for source in _BYPASS_REASON_SOURCES):
        # At once where torch imported it already; else when the first compilation does.
        wrapt.register_post_import_hook(_wrap_bypass_reasons, module)


def _wrap_bypass_reasons(module) -> None:
    with internal_errors("compile cache reasons"):
        if _handler is None:  # unpatched since the hook was registered
            return
        for name, owner_name, function, cache in _BYPASS_REASON_SOURCES:
            if name != module.__name__:
                continue
            owner = getattr(module, owner_name) if owner_name else module
            if not callable(getattr(owner, function, None)):
                continue  # another torch: that reason stays unknown
            if function == "prepare_key":
                _patches.wrap(owner, function, _fx_graph_key_prepared)
            else:
                _patches.wrap(owner, function, functools.partial(_aot_autograd_bypassed, cache))


def _fx_graph_key_prepared(wrapped, instance, args, kwargs):
    """FxGraphCache.prepare_key: its ``cache_info`` says "bypass" and why when torch will not
    cache the graph."""
    result = wrapped(*args, **kwargs)
    with internal_errors("compile cache reasons"):
        info = result[1] if isinstance(result, tuple) and len(result) == 2 else None
        if isinstance(info, dict) and info.get("cache_state") == "bypass":
            _note_bypass_reason("fx_graph", info.get("cache_bypass_reason"))
    return result


def _aot_autograd_bypassed(cache, wrapped, instance, args, kwargs):
    """autograd_cache_key (an exception through it is a bypass: torch catches and counts it) and
    AOTAutogradCache._handle_save_error (``is_bypass``: the entry could not be written)."""
    try:
        result = wrapped(*args, **kwargs)
    except Exception as error:
        with internal_errors("compile cache reasons"):
            if type(error).__name__ != "FXGraphCacheMiss":  # torch counts that one a miss
                _note_bypass_reason(cache, str(error) or type(error).__name__)
        raise
    with internal_errors("compile cache reasons"):
        if kwargs.get("is_bypass") is True and args:  # _handle_save_error(e, remote, is_bypass=True)
            _note_bypass_reason(cache, "not saved: " + (str(args[0]) or type(args[0]).__name__))
    return result


def _note_bypass_reason(cache: str, reason) -> None:
    session = _session.ACTIVE
    if session is None or not isinstance(reason, str) or not reason:
        return
    reason = " ".join(reason.split())[:_MAX_REASON]  # torch's reasons span lines
    state = _open_compilations(session)
    with state.lock:
        if sum(1 for c, _ in state.reasons if c == cache) < _MAX_REASONS:
            state.reasons.append((cache, reason))


def _bypass_reasons_since(state: _OpenCompilations, start: int) -> dict:
    """Per cache, the distinct bypass reasons torch gave since ``start``, joined."""
    with state.lock:
        recent = state.reasons[start:]
    found: dict[str, list[str]] = {}
    for cache, reason in recent:
        if reason not in found.setdefault(cache, []):
            found[cache].append(reason)
    return {semconv.compile_cache_attribute(cache, "bypass_reason"): "; ".join(reasons)[:_MAX_REASON]
            for cache, reasons in found.items()}


def _register(handler) -> None:
    handler.register_start_callback(_on_compile_start)
    handler.register_end_callback(_on_compile_end)


def _clear_then_register(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if _handler is not None:
        with internal_errors("compile callbacks"):
            _register(_handler)
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
    with internal_errors("compile start"):
        pinning.suspend_allocators()  # before dynamo traces (and guards on) torch.empty
    with internal_errors("compile start"):
        session = _session.ACTIVE
        if session is None:
            return
        state = _open_compilations(session)
        _finish_waiting(state)  # a compilation whose metrics never came: write it without them
        compile_id = str(getattr(args, "compile_id", ""))
        attrs: dict = {semconv.COMPILE_ID: compile_id}
        trigger = getattr(args, "callback_trigger", None)
        if trigger is not None:
            attrs[semconv.COMPILE_TRIGGER] = getattr(trigger, "name", str(trigger)).lower()
        attempt = verdicts.frame_compile_index(compile_id)
        if attempt is not None:
            attrs[semconv.COMPILE_RECOMPILE] = attempt > 0
        if state.entries_at_start is None:  # once, before this start-up's first compilation writes any
            state.entries_at_start = _entries_in_cache_dirs()
        for cache, entries in state.entries_at_start.items():
            attrs[semconv.compile_cache_attribute(cache, "entries_at_start")] = entries
        grad = _grad_enabled()
        if grad is not None:
            attrs[semconv.COMPILE_GRAD_ENABLED] = grad
        with state.lock:
            reasons_from = len(state.reasons)
        compilation = _Compilation(None, _cache_counts(), compile_id, reasons_from)
        container = session.start_container(semconv.PHASE_COMPILE, attrs)
        compilation.container = container
        container.on_interrupt = functools.partial(_interrupted, compilation)
        with state.lock:
            state.stack.append(compilation)


def _on_compile_end(args) -> None:
    with internal_errors("compile end"):
        session = _session.ACTIVE
        if session is None:
            return
        state = _open_compilations(session)
        with state.lock:
            compilation = state.stack.pop() if state.stack else None
        if compilation is None:
            return
        compilation.end_ns = time.time_ns()
        compilation.attrs = _cache_attributes(compilation.counts)
        compilation.attrs.update(_bypass_reasons_since(state, compilation.reasons_from))
        cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        if cache_dir:
            compilation.attrs[semconv.COMPILE_CACHE_DIR] = cache_dir
        # No longer the current span (on the thread that attached it); it ends at end_ns, now
        # or when the metrics come.
        compilation.container.detach()
        if _metrics_will_follow():
            compilation.thread = threading.get_ident()
            with state.lock:
                state.waiting.append(compilation)
            return
        _finish(compilation, None)


def _metrics_published(wrapped, instance, args, kwargs):
    """torch's log_compilation_event(metrics): torch's own call first, then ours."""
    result = wrapped(*args, **kwargs)
    with internal_errors("compile metrics"):
        session = _session.ACTIVE
        metrics = args[0] if args else kwargs.get("metrics")
        if session is not None and metrics is not None:
            _take_metrics(_open_compilations(session), metrics)
    return result


def _take_metrics(state: _OpenCompilations, metrics) -> None:
    compile_id = str(getattr(metrics, "compile_id", "") or "")
    thread = threading.get_ident()
    with state.lock:
        mine = [c for c in state.waiting if c.thread == thread]
        match = next((c for c in reversed(mine) if c.compile_id == compile_id), None)
        if match is None and len(mine) == 1:
            match = mine[0]
        if match is None:
            return
        state.waiting.remove(match)
    _finish(match, metrics)


def _finish_waiting(state: _OpenCompilations) -> None:
    with state.lock:
        waiting, state.waiting = state.waiting, []
    for compilation in waiting:
        _finish(compilation, None)


def end_of_startup(session) -> None:
    """Compilations still waiting for their metrics are written without them."""
    _finish_waiting(_open_compilations(session))


def _finish(compilation: _Compilation, metrics) -> None:
    attrs = dict(compilation.attrs)
    unavailable = [] if compilation.counts is not None else ["counters"]
    if metrics is None:
        unavailable.append("compilation_metrics")
    else:
        attrs.update(_metrics_attributes(metrics, compilation))
        if compilation.counts is None:
            attrs.update(_cache_attributes_from_metrics(metrics))
    if unavailable:
        attrs[semconv.COMPILE_EVIDENCE_UNAVAILABLE] = unavailable
    compilation.container.finish(attrs, end_ns=compilation.end_ns or None, detach=False)


def _interrupted(compilation: _Compilation, end_ns: int) -> None:
    """The start-up was cut short: a compilation still running ends now, marked interrupted;
    one that had ended and waited for its metrics keeps its own end."""
    attrs = dict(compilation.attrs)
    if compilation.end_ns:
        attrs[semconv.COMPILE_EVIDENCE_UNAVAILABLE] = ["compilation_metrics"]
        compilation.container.finish(attrs, end_ns=compilation.end_ns, detach=False)
    else:
        attrs[semconv.INTERRUPTED] = True
        compilation.container.finish(attrs, end_ns=end_ns, detach=False)


def _metrics_will_follow() -> bool:
    """torch will publish this compilation's CompilationMetrics on this thread: its metrics
    context is still open and log_compilation_event is ours."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None or not isinstance(getattr(utils, "log_compilation_event", None), ColdstartWrapper):
        return False
    config = sys.modules.get("torch._dynamo.config")
    if config is not None and getattr(config, "log_compilation_metrics", True) is False:
        return False
    try:
        return bool(utils.get_metrics_context().in_progress())
    except Exception:  # torch's private metrics context moved: no metrics to wait for
        return False


def _cache_counts() -> dict | None:
    """The cache counters now, None where torch has none (unknown, not zero). Read with
    .get: torch's counters are defaultdicts, and a lookup must not add to them."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None or not hasattr(counters, "get"):
        return None
    counts: dict = {}
    for cache, (group, *keys) in _CACHE_COUNTERS.items():
        values = counters.get(group) or {}
        counts[cache] = tuple(int(values.get(key, 0)) if key else 0 for key in keys)
    for cache, (group, key) in _SAVED_COUNTERS.items():
        counts[f"{cache}:saved"] = int((counters.get(group) or {}).get(key, 0))
    return counts


def _entries_in_cache_dirs() -> dict:
    """Per cache, the entries its directory holds now (0: none, or no directory yet), counted
    up to COMPILE_CACHE_ENTRIES_COUNTED; a cache whose directory cannot be read is left out."""
    directory = _inductor_cache_dir()
    found = {}
    for cache, subdir in _CACHE_SUBDIRS.items():
        try:
            with os.scandir(os.path.join(directory, subdir)) as entries:
                found[cache] = sum(1 for _ in itertools.islice(entries, semconv.COMPILE_CACHE_ENTRIES_COUNTED))
        except FileNotFoundError:
            found[cache] = 0
        except OSError:
            continue
    return found


def _inductor_cache_dir() -> str:
    """The directory torch will use, found without creating it (torch's cache_dir() makes it)."""
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured:
        return os.path.abspath(configured)
    utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    default = getattr(utils, "default_cache_dir", None)
    if default is not None:
        return os.path.abspath(default())
    # Not imported yet (the first compilation imports it): torch's own default, as it computes it.
    import getpass
    import re
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def _grad_enabled() -> bool | None:
    torch = sys.modules.get("torch")
    try:
        return bool(torch.is_grad_enabled()) if torch is not None else None
    except Exception:  # the host's torch, probed: unknown rather than raised
        return None


def _cache_attributes(before: dict | None) -> dict:
    after = _cache_counts() if before is not None else None
    if before is None or after is None:
        return {}
    attrs, hits, misses = {}, 0, 0
    for cache in _SAVED_COUNTERS:
        key = f"{cache}:saved"
        if key in before and key in after:
            attrs[semconv.compile_cache_attribute(cache, "saved")] = max(0, after[key] - before[key])
    for cache in _CACHE_COUNTERS:
        hit, miss, bypass = (max(0, a - b) for a, b in zip(after[cache], before[cache]))
        if hit or miss or bypass:
            attrs[semconv.compile_cache_attribute(cache, "hits")] = hit
            attrs[semconv.compile_cache_attribute(cache, "misses")] = miss
            if bypass:
                attrs[semconv.compile_cache_attribute(cache, "bypasses")] = bypass
        hits += hit
        misses += miss
    attrs[semconv.COMPILE_CACHE_HITS] = hits
    attrs[semconv.COMPILE_CACHE_MISSES] = misses
    return attrs


def _cache_attributes_from_metrics(metrics) -> dict:
    attrs, hits, misses, seen = {}, 0, 0, False
    for cache, (hit_fields, miss_fields) in _METRIC_CACHE_FIELDS.items():
        hit = sum(_int_field(metrics, f) or 0 for f in hit_fields)
        miss = sum(_int_field(metrics, f) or 0 for f in miss_fields)
        seen = seen or any(_int_field(metrics, f) is not None for f in hit_fields + miss_fields)
        if hit or miss:
            attrs[semconv.compile_cache_attribute(cache, "hits")] = hit
            attrs[semconv.compile_cache_attribute(cache, "misses")] = miss
        hits, misses = hits + hit, misses + miss
    if seen:
        attrs[semconv.COMPILE_CACHE_HITS] = hits
        attrs[semconv.COMPILE_CACHE_MISSES] = misses
    return attrs


def _metrics_attributes(metrics, compilation: _Compilation) -> dict:
    attrs: dict = {}
    name = getattr(metrics, "co_name", None)
    filename = getattr(metrics, "co_filename", None)
    line = _int_field(metrics, "co_firstlineno")
    if isinstance(name, str) and isinstance(filename, str):
        frame = f"{name} ({filename}:{line})" if line is not None else f"{name} ({filename})"
        attempt = verdicts.frame_compile_index(compilation.compile_id)
        attrs[semconv.COMPILE_FRAME] = frame + (f" #{attempt}" if attempt else "")
    for stage, field in _STAGE_FIELDS:
        micros = _int_field(metrics, field)
        if micros is not None and micros >= 0:
            attrs[semconv.compile_stage_attribute(stage)] = micros / 1e6
    reason = getattr(metrics, "recompile_reason", None)
    if isinstance(reason, str) and reason:
        attrs[semconv.COMPILE_RECOMPILE_REASON] = reason[:_MAX_REASON]
    failure = getattr(metrics, "fail_type", None)
    if isinstance(failure, str) and failure:
        attrs[semconv.COMPILE_FAILURE] = failure
    breaks = _int_field(metrics, "num_graph_breaks")
    if breaks:
        attrs[semconv.COMPILE_GRAPH_BREAKS] = breaks
    return attrs


def _int_field(metrics, name: str) -> int | None:
    value = getattr(metrics, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
