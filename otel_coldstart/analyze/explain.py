"""Why the big phases took long: per start-up summaries of its imports, its compilations and
its graph captures, read from the attributes the patches record (patches/imports.py,
compile.py, cuda_graphs.py; docs/conventions.md).

Pure functions over a :class:`~.breakdown.Breakdown` (its phased spans inside the start-up
window). An attribute a trace lacks (an older plugin, a torch without the signal) reads as
unknown: None, never zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeGuard

from .. import semconv, verdicts
from .breakdown import Breakdown
from .model import Span

# --- imports --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportRecord:
    """One slow top-level import (a coldstart.import span naming its module)."""

    module: str
    ns: int
    self_ns: int | None
    modules: int | None
    heaviest: tuple[tuple[str, int], ...]  # (module, self ns), largest first
    packages: tuple[tuple[str, int], ...]  # (top-level package, summed self ns), largest first
    failed: bool
    interrupted: bool
    parent_id: str | None = None  # the span it ran under (a phase of the user's or a library step)
    importer: str | None = None  # "module:line" whose code ran the import (coldstart.import.importer)
    why: ImportCauses | None = None  # why it was slow (issue 38); None in traces from before

    @property
    def imported_by_itself(self) -> bool:
        """The import was made by the module's own top-level package (torch importing
        torch._dynamo): no import statement of the user's to move."""
        if self.importer is None:
            return False
        importer_module = self.importer.rpartition(":")[0]
        return importer_module.partition(".")[0] == self.module.partition(".")[0] != ""


@dataclass(frozen=True)
class ImportCauses:
    """Why imports were slow (patches/imports.py, issue 38), over one span or summed over many.
    A figure no span recorded is None (an older plugin; storage bytes off Linux)."""

    ns: int = 0  # wall time of the spans that recorded causes
    compiled_modules: int = 0  # modules compiled from source (no valid cached bytecode)
    compile_ns: int = 0
    storage_read_bytes: int | None = None  # the process's reads from storage during the imports
    storage_ns: int = 0  # wall time of the imports that read from storage
    cpu_ns: int | None = None  # the importing thread's CPU time
    # Wall time off the CPU and not waiting for a core (what the run-queue wait leaves, where
    # recorded): waiting on storage, a lock, another thread. In imports that recorded their CPU.
    off_cpu_ns: int = 0
    storage_off_cpu_ns: int = 0  # the same, in the imports that read from storage
    queued_ns: int | None = None  # waiting for a core (a busy machine), where recorded

    def plus(self, other: ImportCauses) -> ImportCauses:
        def add(a, b):
            return b if a is None else a if b is None else a + b
        return ImportCauses(self.ns + other.ns, self.compiled_modules + other.compiled_modules,
                            self.compile_ns + other.compile_ns, add(self.storage_read_bytes, other.storage_read_bytes),
                            self.storage_ns + other.storage_ns, add(self.cpu_ns, other.cpu_ns),
                            self.off_cpu_ns + other.off_cpu_ns, self.storage_off_cpu_ns + other.storage_off_cpu_ns,
                            add(self.queued_ns, other.queued_ns))


def import_causes(span: Span) -> ImportCauses | None:
    """What one coldstart.import span recorded of why it was slow; None for a span from before
    issue 38."""
    attrs = span.attributes
    compiled = verdicts.int_value(attrs, semconv.IMPORT_COMPILED_MODULES)
    if compiled is None or compiled < 0:
        return None
    compile_s = verdicts.number_value(attrs, semconv.IMPORT_COMPILE_S)
    read = verdicts.int_value(attrs, semconv.IMPORT_STORAGE_READ_BYTES)
    cpu = _ns(verdicts.number_value(attrs, semconv.IMPORT_CPU_S))
    queued = _ns(verdicts.number_value(attrs, semconv.IMPORT_RUNQUEUE_S))
    wall = span.busy_ns  # a batch of fast imports: their summed time, not its gaps
    off_cpu = max(0, wall - cpu - (queued or 0)) if cpu is not None else 0
    read = read if read is not None and read >= 0 else None
    return ImportCauses(wall, compiled, min(wall, _ns(compile_s) or 0), read, wall if read else 0,
                        min(wall, cpu) if cpu is not None else None, off_cpu, off_cpu if read else 0,
                        min(wall, queued) if queued is not None else None)


@dataclass(frozen=True)
class ImportSummary:
    imports: tuple[ImportRecord, ...]  # slow top-level imports, longest first
    batched_ns: int  # fast imports, coalesced into aggregate spans (their summed time)
    batched_calls: int
    why: ImportCauses | None = None  # summed over every import span that recorded it

    @property
    def ns(self) -> int:
        return sum(i.ns for i in self.imports) + self.batched_ns


def import_summary(b: Breakdown) -> ImportSummary | None:
    """The imports recorded after ``instrument()``; None when the trace has none."""
    records, batched_ns, batched_calls = [], 0, 0
    why: ImportCauses | None = None
    for span in b.spans:
        if span.phase != semconv.PHASE_IMPORT:
            continue
        attrs = span.attributes
        causes = import_causes(span)
        if causes is not None:
            why = causes if why is None else why.plus(causes)
        module = verdicts.str_value(attrs, semconv.IMPORT_MODULE)
        if module is not None:
            self_s = verdicts.number_value(attrs, semconv.IMPORT_SELF_S)
            records.append(ImportRecord(
                module=module, ns=span.duration_ns,
                self_ns=_ns(self_s),
                modules=verdicts.int_value(attrs, semconv.IMPORT_MODULES),
                heaviest=_pairs(attrs.get(semconv.IMPORT_HEAVIEST), attrs.get(semconv.IMPORT_HEAVIEST_S)),
                packages=_pairs(attrs.get(semconv.IMPORT_PACKAGES), attrs.get(semconv.IMPORT_PACKAGES_S)),
                failed=attrs.get(semconv.IMPORT_FAILED) is True,
                interrupted=attrs.get(semconv.INTERRUPTED) is True,
                parent_id=span.parent_id,
                importer=verdicts.str_value(attrs, semconv.IMPORT_IMPORTER),
                why=causes,
            ))
        elif span.is_aggregate and semconv.IMPORT_MODULES in attrs:
            batched_ns += span.busy_ns
            batched_calls += verdicts.positive_int(attrs, semconv.CALLS)
    if not records and not batched_calls:
        return None
    records.sort(key=lambda r: (-r.ns, r.module))
    return ImportSummary(tuple(records), batched_ns, batched_calls, why)


def import_label(span: Span) -> str | None:
    """What an import span is, for a row that draws it: ``import transformers.models.bert``, a
    batch of fast imports, or the imports before ``instrument()``; None for another phase."""
    if span.phase != semconv.PHASE_IMPORT:
        return None
    module = verdicts.str_value(span.attributes, semconv.IMPORT_MODULE)
    if module is not None:
        return f"import {module}" + (" (interrupted)" if span.attributes.get(semconv.INTERRUPTED) is True else "")
    if span.is_aggregate:
        calls = verdicts.positive_int(span.attributes, semconv.CALLS)
        return f"import: {calls} fast imports" if calls else "import: fast imports"
    return "import (before instrument())"


# --- compilations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileRecord:
    """One torch.compile compilation (a coldstart.compile span)."""

    compile_id: str | None
    frame: str | None  # the graph's key across start-ups ("f (file:line)", " #n" for a recompilation)
    ns: int
    hits: int | None  # None: the trace does not say (an older plugin, a torch without counters)
    misses: int | None
    caches: dict[str, tuple[int, int]] = field(default_factory=dict)  # cache -> (hits, misses)
    stages: dict[str, float] = field(default_factory=dict)  # torch's stage -> seconds
    recompile: bool = False
    reason: str | None = None
    cache_dir: str | None = None
    failure: str | None = None
    trace_id: str = ""
    # Could the cache hit at all (issue 39): per cache, the entries its directory held before the
    # start-up's first compilation; whether autograd was on; per cache, the entries torch wrote.
    entries_at_start: dict[str, int] = field(default_factory=dict)
    grad_enabled: bool | None = None
    saved: dict[str, int] = field(default_factory=dict)
    # Per cache, the lookups torch bypassed and why, in its words ("Cannot cache a graph with
    # freezing enabled"): a bypassed graph is compiled from scratch at every start-up.
    bypasses: dict[str, int] = field(default_factory=dict)
    bypass_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def missed(self) -> bool:
        """Compiled from scratch: a cache missed, or torch bypassed one (and no cache hit)."""
        return bool(self.misses) or (any(self.bypasses.values()) and not self.hits)

    @property
    def hit_only(self) -> bool:
        """Served by a cache: hits and no miss."""
        return bool(self.hits) and self.misses == 0


@dataclass(frozen=True)
class CompileSummary:
    compilations: tuple[CompileRecord, ...]  # in time order

    @property
    def count(self) -> int:
        return len(self.compilations)

    @property
    def ns(self) -> int:
        return sum(c.ns for c in self.compilations)

    @property
    def cache_hits(self) -> int | None:
        known = [c.hits for c in self.compilations if c.hits is not None]
        return sum(known) if known else None

    @property
    def cache_misses(self) -> int | None:
        known = [c.misses for c in self.compilations if c.misses is not None]
        return sum(known) if known else None

    @property
    def unknown(self) -> int:
        """Compilations whose cache outcome the trace does not tell."""
        return sum(1 for c in self.compilations if c.misses is None)

    @property
    def recompilations(self) -> int:
        return sum(1 for c in self.compilations if c.recompile)

    @property
    def stages(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for c in self.compilations:
            for stage, seconds in c.stages.items():
                total[stage] = total.get(stage, 0.0) + seconds
        return {s: total[s] for s in semconv.COMPILE_STAGES if s in total}

    @property
    def cache_dirs(self) -> tuple[str, ...]:
        return tuple(sorted({c.cache_dir for c in self.compilations if c.cache_dir}))

    @property
    def missed(self) -> tuple[CompileRecord, ...]:
        return tuple(c for c in self.compilations if c.missed)


def compile_summary(b: Breakdown) -> CompileSummary | None:
    records = [compile_record(s) for s in sorted(b.spans, key=lambda s: s.start_ns)
               if s.phase == semconv.PHASE_COMPILE]
    return CompileSummary(tuple(records)) if records else None


def compile_record(span: Span) -> CompileRecord:
    attrs = span.attributes
    caches = {}
    for cache in semconv.COMPILE_CACHES:
        hits = verdicts.int_value(attrs, semconv.compile_cache_attribute(cache, "hits"))
        misses = verdicts.int_value(attrs, semconv.compile_cache_attribute(cache, "misses"))
        if hits is not None or misses is not None:
            caches[cache] = (max(0, hits or 0), max(0, misses or 0))
    stages = {}
    for stage in semconv.COMPILE_STAGES:
        seconds = verdicts.number_value(attrs, semconv.compile_stage_attribute(stage))
        if seconds is not None and seconds == seconds and seconds >= 0:
            stages[stage] = seconds
    compile_id = verdicts.str_value(attrs, semconv.COMPILE_ID)
    recompile = attrs.get(semconv.COMPILE_RECOMPILE)
    if not isinstance(recompile, bool):  # a trace from before the attribute: read the id
        recompile = verdicts.frame_compile_index(compile_id) not in (None, 0)
    hits = verdicts.int_value(attrs, semconv.COMPILE_CACHE_HITS)
    misses = verdicts.int_value(attrs, semconv.COMPILE_CACHE_MISSES)
    return CompileRecord(
        compile_id=compile_id,
        frame=verdicts.str_value(attrs, semconv.COMPILE_FRAME),
        ns=span.duration_ns,
        hits=max(0, hits) if hits is not None else None,
        misses=max(0, misses) if misses is not None else None,
        caches=caches, stages=stages, recompile=recompile,
        reason=verdicts.str_value(attrs, semconv.COMPILE_RECOMPILE_REASON),
        cache_dir=verdicts.str_value(attrs, semconv.COMPILE_CACHE_DIR),
        failure=verdicts.str_value(attrs, semconv.COMPILE_FAILURE),
        trace_id=span.trace_id,
        entries_at_start=_per_cache(attrs, "entries_at_start"),
        grad_enabled=grad if isinstance(grad := attrs.get(semconv.COMPILE_GRAD_ENABLED), bool) else None,
        saved=_per_cache(attrs, "saved"),
        bypasses=_per_cache(attrs, "bypasses"),
        bypass_reasons={cache: reason for cache in semconv.COMPILE_CACHES
                        if (reason := verdicts.str_value(attrs, semconv.compile_cache_attribute(cache,
                                                                                                "bypass_reason")))},
    )


def _per_cache(attrs, outcome: str) -> dict[str, int]:
    found = {}
    for cache in semconv.COMPILE_CACHES:
        value = verdicts.int_value(attrs, semconv.compile_cache_attribute(cache, outcome))
        if value is not None and value >= 0:
            found[cache] = value
    return found


@dataclass(frozen=True)
class CacheHit:
    """The fastest compilation of one graph that a cache served: what a hit costs."""

    trace_id: str
    ns: int  # its self time (Breakdown.self_ns)


def fastest_hits(results: Iterable[Breakdown]) -> dict[str, CacheHit]:
    """Per graph (``coldstart.compile.frame``), its fastest compilation a cache served (hits,
    no miss) among the start-ups given: the one figure the compile-cache lever and the
    compile_cache finding both use.

    Measured in self time, not the span's wall time: the lever cuts each missed compilation's
    self time down to this, so both sides of that subtraction leave out the same thing, the
    phased work nested inside a compilation (an import it ran, a nested compile) that its own
    phase counts and a cache hit would not remove. A hit's wall time would count that work as
    the cost of a hit and state a smaller saving than the projection."""
    best: dict[str, CacheHit] = {}
    for b in results:
        for span in b.spans:
            if span.phase != semconv.PHASE_COMPILE:
                continue
            record = compile_record(span)
            if record.frame and record.hit_only:
                ns = b.own_ns(span)
                if record.frame not in best or ns < best[record.frame].ns:
                    best[record.frame] = CacheHit(span.trace_id, ns)
    return best


# --- graph captures ------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureSummary:
    count: int
    ns: int  # the graph_capture phase's time
    sizes: tuple[tuple[int, int], ...]  # (batch size, capture ns), slowest first, where recorded

    def slowest(self, n: int = 5) -> tuple[tuple[int, int], ...]:
        return self.sizes[:n]


def capture_summary(b: Breakdown) -> CaptureSummary | None:
    spans = [s for s in b.spans if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    if not spans:
        return None
    containers = {s.parent_id for s in spans}
    by_size: dict[int, int] = {}
    for span in spans:
        if span.span_id in containers:
            continue  # a make_graphed_callables span around captures: its leaves carry the sizes
        attrs = span.attributes
        sizes = attrs.get(semconv.GRAPH_BATCH_SIZES)
        times = attrs.get(semconv.GRAPH_CAPTURE_TIMES_S)
        if isinstance(sizes, (list, tuple)) and isinstance(times, (list, tuple)) and len(sizes) == len(times):
            for size, seconds in zip(sizes, times):
                if _positive_int(size) and isinstance(seconds, (int, float)) and not isinstance(seconds, bool) \
                        and seconds == seconds and seconds >= 0:
                    by_size[size] = by_size.get(size, 0) + int(seconds * 1e9)
            continue
        single = attrs.get(semconv.GRAPH_BATCH_SIZE)
        if _positive_int(single) and not span.is_aggregate:
            by_size[single] = by_size.get(single, 0) + span.duration_ns
    phase = b.phase(semconv.PHASE_GRAPH_CAPTURE)
    ns = phase.busy_ns if phase is not None else sum(s.busy_ns for s in spans)
    ordered = tuple(sorted(by_size.items(), key=lambda item: (-item[1], item[0])))
    return CaptureSummary(verdicts.capture_count(spans), ns, ordered)


# --- helpers --------------------------------------------------------------------------------


def _ns(seconds: float | None) -> int | None:
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return None
    return int(seconds * 1e9)


def _pairs(names, seconds) -> tuple[tuple[str, int], ...]:
    """Two parallel attribute lists as (name, ns) pairs; whatever does not line up is dropped."""
    if not isinstance(names, (list, tuple)) or not isinstance(seconds, (list, tuple)):
        return ()
    out = []
    for name, value in zip(names, seconds):
        ns = _ns(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if isinstance(name, str) and ns is not None:
            out.append((name, ns))
    return tuple(out)


def _positive_int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
