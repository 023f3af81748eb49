"""What if a lever were pulled: the projected p50/p95 start-up, total and per phase, for each
lever, computed from the trace's own evidence and said in words.

Pure functions over :class:`~.breakdown.Breakdown` records. A lever takes time out of spans
("cuts"), never more than a span's own time (its busy time less that of its phased children
on the same thread); a start-up's projected total is its measured total less its cuts, each
divided by the number of threads that had work while its span ran (1 for a single-threaded
start-up: one for one). Every other second stays as measured.

The levers (docs/analysis.md, "What if"):

- ``prewarm``: every checkpoint file read from storage, for its whole time open (copies made
  while it was open wait for storage too), costs what a resident file of the same format
  cost in this start-up, else in the other start-ups given (the same loader), else its
  storage bytes at the storage floor's warm read(2) rate; storage reads hidden in other
  copies and casts (mmap page faults) come off at the cold rate the start-up's own file reads
  ran at (else the floor's cold rate), the copying itself stays.
- ``serving-dtype``: cast spans removed (the checkpoint saved in the dtype it is served in);
  a device copy that also casts stays (the copy is needed anyway); storage reads inside a
  cast stay (the bytes still have to come from storage on their first touch).
- ``pinned``: pageable host-to-device bytes at the pinned rate measured in the input
  (device time where the copies were asynchronous); not estimated without pinned copies.
- ``compile-cache``: each compilation that missed the cache at the cost of the fastest
  compilation of the same frame that only hit it, in the input; not estimated for a frame
  that never hit.
- ``fewer-captures``: graph captures of the batch sizes not kept removed (their recorded
  per-capture times; the span's mean per size where those are not recorded).
- ``all``: every lever together; on each span their cuts add up to at most its own time, so
  no second is claimed twice (a cast that is also a cold read is saved once).

Start-ups that did not reach ready() have no total to project: they are left out (and say
so), though their spans still count as evidence (a pinned rate, a cache hit).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .. import semconv, verdicts
from .breakdown import Breakdown, ShardRead
from .capacity import MIN_FOR_P95
from .model import Span
from .stats import percentile
from .storage_floor import StorageFloor
from .units import format_rate, format_seconds

PREWARM = "prewarm"
SERVING_DTYPE = "serving-dtype"
PINNED = "pinned"
COMPILE_CACHE = "compile-cache"
FEWER_CAPTURES = "fewer-captures"
ALL = "all"
LEVERS = (PREWARM, SERVING_DTYPE, PINNED, COMPILE_CACHE, FEWER_CAPTURES)
UNATTRIBUTED = "unattributed"

_NOT_FILE_READS = (semconv.PHASE_DESERIALIZE, semconv.PHASE_DOWNLOAD)
_COPY_PHASES = (semconv.PHASE_H2D, semconv.PHASE_D2H, semconv.PHASE_D2D, semconv.PHASE_H2H)


@dataclass(frozen=True)
class Options:
    floor: StorageFloor | None = None
    keep_capture_sizes: frozenset[int] | None = None  # None: powers of two up to the largest
    reference: Sequence[Breakdown] = ()  # start-ups to learn from, not projected


@dataclass(frozen=True)
class Quantiles:
    p50_ns: int
    p95_ns: int


@dataclass(frozen=True)
class Summary:
    """p50/p95 of the start-up and of each phase (``unattributed`` included) over a set."""

    n: int
    total: Quantiles
    phases: dict[str, Quantiles]


@dataclass(frozen=True)
class Projection:
    lever: str
    summary: Summary | None  # None: not estimated
    saving_p50_ns: int | None
    assumptions: tuple[str, ...]
    not_estimated: str | None = None  # why, when summary is None
    changed: int = 0  # start-ups the lever changed


@dataclass(frozen=True)
class WhatIf:
    baseline: Summary
    levers: tuple[Projection, ...]
    left_out: tuple[str, ...] = ()  # start-ups that did not reach ready()
    notes: tuple[str, ...] = ()


# --- what each lever learns from all the start-ups it is given --------------------------


@dataclass
class _Cut:
    """Time one lever takes out of one span."""

    span_id: str
    phase: str
    ns: int
    cap_ns: int  # the span's own time: no lever, alone or together, takes more
    concurrency: float  # threads busy while the span ran, itself included (1: it alone)


@dataclass
class _Basis:
    """One sentence of a lever's assumptions, with the figures of every start-up it covers."""

    text: str  # "{rates}": the range of rates, "{n}": how many start-ups, "{s}": their plural
    rates: list[float] = field(default_factory=list)
    startups: set = field(default_factory=set)


class _Assumptions:
    """A lever's assumptions, each sentence once, with the range of the figures it used."""

    def __init__(self) -> None:
        self._bases: dict[str, _Basis] = {}
        self.startup = 0  # the start-up being projected (the count of "{n}" is of start-ups)

    def add(self, key: str, text: str, rate: float | None = None) -> None:
        basis = self._bases.setdefault(key, _Basis(text))
        basis.startups.add(self.startup)
        if rate is not None:
            basis.rates.append(rate)

    def sentences(self) -> list[str]:
        out = []
        for basis in self._bases.values():
            rates = sorted(basis.rates)
            if not rates:
                shown = ""
            elif rates[0] == rates[-1] or format_rate(rates[0]) == format_rate(rates[-1]):
                shown = format_rate(rates[0])
            else:
                shown = f"{format_rate(rates[0])} to {format_rate(rates[-1])}"
            # str.replace, not str.format: a sentence may quote a path from the input
            n = len(basis.startups)
            out.append(basis.text.replace("{rates}", shown).replace("{n}", str(n)).replace("{s}", "" if n == 1 else "s"))
        return out


@dataclass
class _Evidence:
    floor: StorageFloor | None
    keep: frozenset[int] | None
    warm_rate_by_format: dict[str | None, float]  # resident files, all start-ups pooled
    cold_rate: float | None  # in-span storage bytes over time of cold files, all pooled
    pinned_rate: float | None
    pinned_basis: str
    hit_ns_by_frame: dict[str, int]


def _self_times(b: Breakdown) -> dict[str, int]:
    """Each phased span's own time: its busy time less that of its phased children on the
    same thread (as the breakdown counts it; a child under an unphased span between them
    is not seen here, so the parent's own time may be over-counted, never a child's)."""
    children: dict[str, int] = defaultdict(int)
    by_id = {s.span_id: s for s in b.spans}
    for span in b.spans:
        parent = by_id.get(span.parent_id) if span.parent_id else None
        if parent is not None and _same_thread(parent, span):
            children[parent.span_id] += span.busy_ns
    return {s.span_id: max(0, s.busy_ns - children.get(s.span_id, 0)) for s in b.spans}


def _same_thread(a: Span, b: Span) -> bool:
    return a.thread_id is None or b.thread_id is None or a.thread_id == b.thread_id


class _Concurrency:
    """How many threads had phased work while a span ran: the span's own thread, plus each
    other thread's share of the span's window its phased spans covered. A second saved in a
    span that ran beside two other threads' work shortens the start-up by a third of it (the
    others shrink alike, or still hold the start-up up)."""

    def __init__(self, b: Breakdown) -> None:
        by_thread: dict[int | None, list[tuple[int, int]]] = defaultdict(list)
        for span in b.spans:
            by_thread[span.thread_id].append((span.start_ns, span.end_ns))
        self._threads = {thread: _merged(intervals) for thread, intervals in by_thread.items()}

    def of(self, span: Span) -> float:
        if len(self._threads) <= 1 or span.thread_id is None:
            return 1.0
        window = span.end_ns - span.start_ns
        if window <= 0:
            return 1.0
        others = sum(_covered(intervals, span.start_ns, span.end_ns)
                     for thread, intervals in self._threads.items() if thread not in (span.thread_id, None))
        return 1.0 + others / window


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _covered(intervals: list[tuple[int, int]], start: int, end: int) -> int:
    first = bisect.bisect_right(intervals, (start, start)) - 1
    covered = 0
    for a, b in intervals[max(0, first):]:
        if a >= end:
            break
        covered += max(0, min(b, end) - max(a, start))
    return covered


def _int(span: Span, key: str) -> int | None:
    return verdicts.int_value(span.attributes.get(key))


def _file_reads(b: Breakdown) -> list[tuple[Span, ShardRead]]:
    """The checkpoint file reads: each deserialize span with its shard record (size, format,
    storage bytes and cache verdict, as the breakdown read them)."""
    shards = {(s.start_ns, s.path): s for s in b.shards}
    found = []
    for span in b.spans:
        if span.phase == semconv.PHASE_DESERIALIZE:
            shard = shards.get((span.start_ns, verdicts.str_value(span.attributes, semconv.FILE_PATH)))
            if shard is not None and shard.size:
                found.append((span, shard))
    return found


def _in_span_storage_bytes(span: Span, shard: ShardRead) -> int:
    """The bytes of the file read from storage while its own span ran (the rest was read by
    later work: a copy or cast touching mapped pages, counted there)."""
    if shard.read_bytes is None:
        return (shard.size or 0) if shard.state == semconv.CACHE_COLD else 0
    after = _int(span, semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES) or 0
    return max(0, min(shard.read_bytes - after, shard.size or shard.read_bytes))


def _hidden_reads(b: Breakdown) -> list[tuple[Span, int]]:
    """Spans that are not file reads but read from storage (mmap page faults in a copy or
    cast), with those bytes."""
    found = []
    parents = {s.parent_id for s in b.spans}
    for span in b.spans:
        if span.phase in _NOT_FILE_READS or span.span_id in parents:
            continue  # a container's reads are its children's
        read = _int(span, semconv.IO_READ_BYTES)
        if read and read > 0:
            found.append((span, read))
    return found


def _rate(nbytes: int, ns: int) -> float | None:
    return nbytes / (ns / 1e9) if nbytes > 0 and ns > 0 else None


def _warm_rates(results: Iterable[Breakdown]) -> dict[str | None, float]:
    """Bytes per second of resident file reads, per file format."""
    size: dict[str | None, int] = defaultdict(int)
    time: dict[str | None, int] = defaultdict(int)
    for b in results:
        for span, shard in _file_reads(b):
            if shard.state == semconv.CACHE_WARM:
                size[shard.format] += shard.size or 0
                time[shard.format] += span.duration_ns
    return {fmt: rate for fmt in size if (rate := _rate(size[fmt], time[fmt]))}


def _cold_rate(results: Iterable[Breakdown]) -> float | None:
    """Bytes from storage per second of the cold files' reads (their whole time: an upper
    bound on the storage time per byte)."""
    nbytes = ns = 0
    for b in results:
        for span, shard in _file_reads(b):
            if shard.cold:
                read = _in_span_storage_bytes(span, shard)
                if read > 0:
                    nbytes += read
                    ns += span.duration_ns
    return _rate(nbytes, ns)


def _copy_time_ns(span: Span) -> int:
    """Time the bytes of a copy took: the device's time where the work was asynchronous."""
    device = verdicts.number_value(span.attributes, semconv.COPY_ASYNC_S)
    return int(device * 1e9) if device and device > 0 else span.busy_ns


def _pinned_rate(results: Iterable[Breakdown]) -> tuple[float | None, str]:
    nbytes = ns = 0
    device = False
    for b in results:
        for span in b.spans:
            if span.phase != semconv.PHASE_H2D:
                continue
            pinned = verdicts.positive_int(span.attributes, semconv.COPY_PINNED_BYTES)
            pageable = verdicts.positive_int(span.attributes, semconv.COPY_PAGEABLE_BYTES)
            if pinned and not pageable:
                nbytes += pinned
                ns += _copy_time_ns(span)
                device = device or bool(verdicts.number_value(span.attributes, semconv.COPY_ASYNC_S))
    basis = "device time of the pinned copies" if device else "host time of the pinned copies"
    return _rate(nbytes, ns), basis


def _compile_hits(results: Iterable[Breakdown]) -> dict[str, int]:
    """Per compiled frame, the own time of its fastest compilation that only hit the cache."""
    best: dict[str, int] = {}
    for b in results:
        own = None
        for span in b.spans:
            if span.phase != semconv.PHASE_COMPILE:
                continue
            frame = verdicts.str_value(span.attributes, semconv.COMPILE_FRAME)
            hits, misses = _int(span, semconv.COMPILE_CACHE_HITS), _int(span, semconv.COMPILE_CACHE_MISSES)
            if frame is None or not hits or misses != 0:
                continue
            own = own if own is not None else _self_times(b)
            ns = own.get(span.span_id, span.busy_ns)
            best[frame] = min(ns, best.get(frame, ns))
    return best


def gather(results: Sequence[Breakdown], options: Options) -> _Evidence:
    everything = list(results) + list(options.reference)
    pinned_rate, pinned_basis = _pinned_rate(everything)
    return _Evidence(options.floor, options.keep_capture_sizes, _warm_rates(everything), _cold_rate(everything),
                     pinned_rate, pinned_basis, _compile_hits(everything))


# --- the levers: one start-up in, cuts out ------------------------------------------------


@dataclass
class _LeverOutcome:
    cuts: list[_Cut] = field(default_factory=list)
    applies: bool = False  # the start-up has what the lever acts on
    unknown: str | None = None  # why (part of) it could not be estimated for this start-up


LeverFn = Callable[[Breakdown, dict, "_Concurrency", _Evidence, _Assumptions], _LeverOutcome]


def _storage_cold_rate(b: Breakdown, ev: _Evidence, said: _Assumptions) -> float | None:
    own = _cold_rate([b])
    if own:
        said.add("cold-own", "storage reads inside copies and casts (mmap page faults) come off at the cold "
                             "rate of the start-up's own file reads ({rates}); the copy or cast itself stays", own)
        return own
    if ev.floor and ev.floor.cold_bytes_per_s:
        said.add("cold-floor", "storage reads inside copies and casts (mmap page faults) come off at the "
                               "storage floor's cold read(2) rate ({rates}); the copy or cast itself stays",
                 ev.floor.cold_bytes_per_s)
        return ev.floor.cold_bytes_per_s
    if ev.cold_rate:
        said.add("cold-pooled", "storage reads inside copies and casts (mmap page faults) come off at the cold "
                                "rate of the other start-ups' file reads ({rates}); the copy or cast itself stays", ev.cold_rate)
        return ev.cold_rate
    return None


def _prewarm(b: Breakdown, own: dict, ctx: _Concurrency, ev: _Evidence, said: _Assumptions) -> _LeverOutcome:
    out = _LeverOutcome()
    cold = [(span, shard) for span, shard in _file_reads(b) if shard.cold]
    hidden = _hidden_reads(b)
    if not cold and not hidden:
        return out
    out.applies = True
    own_warm = _warm_rates([b])
    children: dict[str, list[Span]] = defaultdict(list)
    for span in b.spans:
        children[span.parent_id or ""].append(span)
    inside_files: set[str] = set()
    missing: set[str] = set()
    for span, shard in cold:
        fmt = shard.format
        # The file's whole window: a loader that copies each tensor while the file is open
        # (vLLM: param.copy_(f.get_tensor(name)) inside safe_open) waits for storage in those
        # copies, so the copies are part of reading the file.
        nested = [c for c in children.get(span.span_id, ()) if _same_thread(c, span)]
        inside_files.update(c.span_id for c in nested)
        rate, reads_only = _warm_file_rate(fmt, own_warm, ev, said)
        if not rate:
            missing.add(fmt or "checkpoint")
            continue
        if not reads_only:  # a loader's rate over whole files: the same loader, the same work
            ideal = int((shard.size or 0) / rate * 1e9)
        else:
            # read(2)'s rate is per byte read: the bytes this read took from storage, now
            # from the page cache (a loader that maps the file reads only what it touches).
            ideal = int(_in_span_storage_bytes(span, shard) / rate * 1e9)
            read_s = verdicts.number_value(span.attributes, semconv.TORCH_LOAD_STORAGE_READ_S)
            if read_s is not None:  # a pickle: the unpickling stays, only the reading is storage's
                ideal += max(0, span.duration_ns - int(read_s * 1e9))
            if nested:
                said.add("floor-nested", "files whose copies ran while they were open (the copies are part of the "
                                         "read): at read(2)'s rate their copying is taken as free, an optimistic "
                                         "projection (give a start-up with resident files, e.g. with --reference, "
                                         "for this loader's own rate)")
        _share_cut(out, [span, *nested], span.busy_ns - ideal, own, ctx)
    outside = [(span, read) for span, read in hidden if span.span_id not in inside_files]
    if outside:
        cold_rate = _storage_cold_rate(b, ev, said)
        if cold_rate is None:
            missing.add("storage reads inside copies")
        else:
            for span, read in outside:
                cap = own.get(span.span_id, span.busy_ns)
                out.cuts.append(_Cut(span.span_id, span.phase or "", min(cap, int(read / cold_rate * 1e9)), cap,
                                     ctx.of(span)))
    if missing:
        out.unknown = (f"no rate to read {', '.join(sorted(missing))} at: no resident file of that format in the "
                       "start-ups given and no storage floor (otel-coldstart floor --json FILES > floor.json, "
                       "given among the inputs)")
    return out


def _warm_file_rate(fmt: str | None, own_warm: dict, ev: _Evidence, said: _Assumptions) -> tuple[float | None, bool]:
    """The rate a resident file of this format reads at, and whether it is read(2)'s alone:
    this start-up's own resident files, else those of the other start-ups given (the same
    loader), else the storage floor's warm read(2) rate."""
    rate = own_warm.get(fmt)
    if rate:
        said.add(f"warm-own-{fmt}", f"cold and partial {fmt or 'checkpoint'} files (their whole time open) at the "
                                    "rate of the start-up's own resident files of that format ({rates})", rate)
        return rate, False
    rate = ev.warm_rate_by_format.get(fmt)
    if rate:
        said.add(f"warm-pooled-{fmt}", f"cold and partial {fmt or 'checkpoint'} files (their whole time open) at the "
                                       "rate of the resident files of that format in the other start-ups given "
                                       "({rates}): {n} start-up{s} had none of its own", rate)
        return rate, False
    if ev.floor and ev.floor.warm_bytes_per_s:
        said.add("warm-floor", "the bytes cold and partial checkpoint files read from storage, read from the page "
                               f"cache at the storage floor's warm read(2) rate ({{rates}}, {ev.floor.source}) "
                               "instead: {n} start-up{s} had no resident file of the same format to learn from, "
                               "nor had the other start-ups given", ev.floor.warm_bytes_per_s)
        return ev.floor.warm_bytes_per_s, True
    return None, False


def _share_cut(out: _LeverOutcome, spans: list[Span], cut_ns: int, own: dict, ctx: _Concurrency) -> None:
    """``cut_ns`` taken from ``spans`` (a file and the copies made while it was open) in
    proportion to their own times."""
    owns = [own.get(s.span_id, s.busy_ns) for s in spans]
    total = sum(owns)
    cut_ns = max(0, min(cut_ns, total))
    for span, own_ns in zip(spans, owns):
        share = cut_ns * own_ns // total if total else 0
        out.cuts.append(_Cut(span.span_id, span.phase or "", share, own_ns, ctx.of(span)))


def _serving_dtype(b: Breakdown, own: dict, ctx: _Concurrency, ev: _Evidence, said: _Assumptions) -> _LeverOutcome:
    out = _LeverOutcome()
    casts = [s for s in b.spans if s.phase == semconv.PHASE_CAST]
    device_casts = [s for s in b.spans if s.phase in _COPY_PHASES and semconv.CAST_TO in s.attributes]
    if device_casts:
        said.add("device-casts", "copies that also convert the dtype stay (the copy is needed anyway; "
                                 "the conversion is taken as free)")
    if not casts:
        return out
    out.applies = True
    pairs = sorted({f"{s.attributes.get(semconv.CAST_FROM)} -> {s.attributes.get(semconv.CAST_TO)}"
                    for s in casts if semconv.CAST_FROM in s.attributes})
    said.add("casts", "the checkpoint saved in the dtype it is served in: every cast removed"
             + (f" ({', '.join(pairs)})" if pairs else ""))
    cold_rate = None
    for span in casts:
        cap = own.get(span.span_id, span.busy_ns)
        keep = 0
        read = _int(span, semconv.IO_READ_BYTES) or 0
        if read > 0:
            cold_rate = cold_rate or _cold_rate([b]) or (ev.floor.cold_bytes_per_s if ev.floor else None) \
                or ev.cold_rate
            if cold_rate:
                keep = min(cap, int(read / cold_rate * 1e9))
                said.add("cast-reads", "storage reads inside the casts stay (the bytes are still read on their "
                                       "first touch), at the cold read rate ({rates})", cold_rate)
            else:
                said.add("cast-reads-gone", "storage reads inside the casts go with them (no cold read rate to "
                                            "tell them apart)")
        out.cuts.append(_Cut(span.span_id, semconv.PHASE_CAST, cap - keep, cap, ctx.of(span)))
    return out


def _pinned(b: Breakdown, own: dict, ctx: _Concurrency, ev: _Evidence, said: _Assumptions) -> _LeverOutcome:
    out = _LeverOutcome()
    copies = [s for s in b.spans if s.phase == semconv.PHASE_H2D
              and verdicts.positive_int(s.attributes, semconv.COPY_PAGEABLE_BYTES)]
    if not copies:
        return out
    out.applies = True
    if not ev.pinned_rate:
        out.unknown = ("no pinned host-to-device copy in the input to learn the pinned rate from (the storage "
                       "floor measures reads, not copies)")
        return out
    said.add("pinned", "pageable host-to-device bytes copied at the pinned rate measured in the input "
                       f"({{rates}}, {ev.pinned_basis}), one after another (no overlap assumed)", ev.pinned_rate)
    cold_rate = None
    for span in copies:
        cap = own.get(span.span_id, span.busy_ns)
        pageable = verdicts.positive_int(span.attributes, semconv.COPY_PAGEABLE_BYTES)
        pinned = verdicts.positive_int(span.attributes, semconv.COPY_PINNED_BYTES)
        storage = 0
        read = _int(span, semconv.IO_READ_BYTES) or 0
        if read > 0:  # storage reads inside the copy are not the copy (prewarm's time)
            cold_rate = cold_rate or _cold_rate([b]) or (ev.floor.cold_bytes_per_s if ev.floor else None) \
                or ev.cold_rate
            storage = min(cap, int(read / cold_rate * 1e9)) if cold_rate else 0
        pageable_ns = (cap - storage) * pageable // (pageable + pinned)
        if pinned:
            said.add("pinned-mixed", "in copies that moved pinned and pageable bytes, the pageable share of the "
                                     "time in proportion to the bytes")
        ideal = int(pageable / ev.pinned_rate * 1e9)
        out.cuts.append(_Cut(span.span_id, semconv.PHASE_H2D, max(0, pageable_ns - ideal), cap,
                             ctx.of(span)))
    return out


def _compile_cache(b: Breakdown, own: dict, ctx: _Concurrency, ev: _Evidence, said: _Assumptions) -> _LeverOutcome:
    out = _LeverOutcome()
    compiles = [s for s in b.spans if s.phase == semconv.PHASE_COMPILE]
    missed = []
    no_provenance = 0
    for span in compiles:
        hits, misses = _int(span, semconv.COMPILE_CACHE_HITS), _int(span, semconv.COMPILE_CACHE_MISSES)
        if hits is None and misses is None:
            no_provenance += 1
        elif misses:
            missed.append(span)
    if not compiles:
        return out
    out.applies = bool(missed) or bool(no_provenance)
    reasons = []
    if no_provenance:
        reasons.append(f"{no_provenance} compilation(s) without cache provenance "
                       f"({semconv.COMPILE_CACHE_HITS}/{semconv.COMPILE_CACHE_MISSES}, recorded by the compile "
                       "patch of otel-coldstart with issue 26): whether they hit the cache is unknown")
    never_hit = []
    for span in missed:
        frame = verdicts.str_value(span.attributes, semconv.COMPILE_FRAME)
        hit = ev.hit_ns_by_frame.get(frame) if frame is not None else None
        if hit is None:
            never_hit.append(frame or "(frame not recorded)")
            continue
        said.add("compile", "each compilation that missed the cache at the own time of the fastest compilation "
                            "of the same frame that only hit it in the input")
        cap = own.get(span.span_id, span.busy_ns)
        out.cuts.append(_Cut(span.span_id, semconv.PHASE_COMPILE, max(0, cap - hit), cap, ctx.of(span)))
    if never_hit:
        shown = ", ".join(sorted(set(never_hit))[:3]) + (" ..." if len(set(never_hit)) > 3 else "")
        reasons.append(f"no cache hit in the input for {shown}: the cost of a hit is unknown (give start-ups "
                       "that compiled with a warm cache, e.g. with --reference)")
    if reasons:
        out.unknown = "; ".join(reasons)
    return out


def _capture_leaves(b: Breakdown) -> list[Span]:
    captures = [s for s in b.spans if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    containers = {s.parent_id for s in captures}
    return [s for s in captures if s.span_id not in containers]


def _capture_sizes(span: Span) -> list[int]:
    many = span.attributes.get(semconv.GRAPH_BATCH_SIZES)
    values = list(many) if isinstance(many, (tuple, list)) else [span.attributes.get(semconv.GRAPH_BATCH_SIZE)]
    return [v for v in values if verdicts.int_value(v) is not None and v > 0]


def _capture_times(span: Span, count: int) -> list[float] | None:
    times = span.attributes.get(semconv.GRAPH_CAPTURE_TIMES_S)
    if not isinstance(times, (tuple, list)) or len(times) != count:
        return None
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in times):
        return None
    return [float(t) for t in times]


def default_keep(sizes: Iterable[int]) -> frozenset[int]:
    """One size per power of two up to the largest captured (pad requests up to the next)."""
    largest = max(sizes, default=0)
    keep, size = set(), 1
    while largest and size < largest * 2:
        keep.add(size)
        size *= 2
    return frozenset(keep)


def _fewer_captures(b: Breakdown, own: dict, ctx: _Concurrency, ev: _Evidence, said: _Assumptions) -> _LeverOutcome:
    out = _LeverOutcome()
    leaves = _capture_leaves(b)
    if not leaves:
        return out
    out.applies = True
    keep = ev.keep
    if keep is None:
        keep = default_keep(size for span in leaves for size in _capture_sizes(span))
        said.add("keep-default", "the batch sizes kept: powers of two up to the largest captured (requests padded "
                                 "up; --keep-capture-sizes to choose)")
    else:
        said.add("keep", "the batch sizes kept: " + ", ".join(map(str, sorted(keep))))
    unsized = 0
    for span in leaves:
        sizes = _capture_sizes(span)
        if not sizes:
            unsized += 1
            continue
        cap = own.get(span.span_id, span.busy_ns)
        times = _capture_times(span, len(sizes))
        if times is not None and len(sizes) == 1 and not span.attributes.get(semconv.AGGREGATE):
            times = None  # one capture: its span is its time
        if times is not None:
            said.add("times", "each capture removed at its recorded time (" + semconv.GRAPH_CAPTURE_TIMES_S + ")")
            cut = int(sum(t for size, t in zip(sizes, times) if size not in keep) * 1e9)
        else:
            if len(sizes) > 1:
                said.add("mean", "captures without per-size times: each size at the mean of its span")
            cut = cap * sum(1 for size in sizes if size not in keep) // len(sizes)
        out.cuts.append(_Cut(span.span_id, semconv.PHASE_GRAPH_CAPTURE, min(cap, cut), cap, ctx.of(span)))
    if unsized:
        out.unknown = (f"{unsized} capture span(s) without batch sizes ({semconv.GRAPH_BATCH_SIZES}): which of "
                       "them a keep-list removes is unknown")
    return out


_LEVER_FUNCTIONS: dict[str, LeverFn] = {PREWARM: _prewarm, SERVING_DTYPE: _serving_dtype, PINNED: _pinned,
                                         COMPILE_CACHE: _compile_cache, FEWER_CAPTURES: _fewer_captures}


# --- projections ---------------------------------------------------------------------------


def _quantiles(values: Sequence[int]) -> Quantiles:
    return Quantiles(int(percentile(values, 0.5)), int(percentile(values, 0.95)))


def _phase_values(b: Breakdown) -> dict[str, int]:
    values = {p.phase: p.busy_ns for p in b.phases}
    values[UNATTRIBUTED] = b.unattributed_ns
    return values


def summarize(per_startup: Sequence[tuple[int, dict[str, int]]]) -> Summary:
    """p50/p95 of (total, {phase: ns}) pairs; a phase a start-up lacks counts as 0 there."""
    names = sorted({name for _, phases in per_startup for name in phases})
    return Summary(len(per_startup), _quantiles([total for total, _ in per_startup]),
                   {name: _quantiles([phases.get(name, 0) for _, phases in per_startup]) for name in names})


def _apply(b: Breakdown, cuts: Sequence[_Cut]) -> tuple[int, dict[str, int]]:
    """The start-up's projected (total, phases): cuts merged per span (at most its own
    time), each shortening the start-up by its time over the threads busy beside it."""
    per_span: dict[str, _Cut] = {}
    for cut in cuts:
        held = per_span.get(cut.span_id)
        if held is None:
            per_span[cut.span_id] = _Cut(cut.span_id, cut.phase, min(cut.ns, cut.cap_ns), cut.cap_ns, cut.concurrency)
        else:
            held.ns = min(held.cap_ns, held.ns + cut.ns)
    phases = _phase_values(b)
    wall = 0.0
    for cut in per_span.values():
        taken = cut.ns
        if cut.phase in phases:
            taken = min(cut.ns, phases[cut.phase])
            phases[cut.phase] -= taken
        wall += taken / cut.concurrency
    return max(0, b.duration_ns - int(wall)), phases


def _threads_note(results: Sequence[Breakdown], cuts: dict[int, list[_Cut]], said: _Assumptions) -> None:
    for index, b in enumerate(results):
        said.startup = index
        if any(c.concurrency > 1.0 and c.ns for c in cuts.get(index, ())):
            said.add("threads", "time saved in work that ran beside other threads' work shortens the start-up by "
                                "that time over the number of threads busy then (they shrink alike, or still hold "
                                "it up)")


def project(results: Sequence[Breakdown], levers: Sequence[str] | None = None,
            options: Options = Options()) -> WhatIf:
    """The baseline and one projection per lever (``levers`` None: every lever that applies,
    and ``all`` when more than one does). ``results`` not ready are left out."""
    ready = [b for b in results if b.ready]
    left_out = tuple(_left_out_line(b) for b in results if not b.ready)
    if not ready:
        raise ValueError("no start-up reached ready(): there is no start-up time to project")
    ev = gather(results, options)
    own = [_self_times(b) for b in ready]
    concurrency = [_Concurrency(b) for b in ready]
    baseline = summarize([(b.duration_ns, _phase_values(b)) for b in ready])
    notes = []
    if len(ready) < MIN_FOR_P95:
        notes.append(f"p95 of {len(ready)} start-up(s): fewer than {MIN_FOR_P95}, so it is close to the slowest "
                     "seen, not a percentile")
    if left_out:
        notes.append(f"{len(left_out)} start-up(s) left out: they did not reach ready(), so they have no start-up "
                     "time to project (their spans still count as evidence)")
    asked = list(LEVERS) if levers is None else [lever for lever in levers if lever != ALL]
    want_all = levers is None or ALL in levers
    outcomes: dict[str, tuple[dict[int, _LeverOutcome], _Assumptions]] = {}
    for lever in (LEVERS if want_all else asked):
        said = _Assumptions()
        per = {}
        for i, b in enumerate(ready):
            said.startup = i
            per[i] = _LEVER_FUNCTIONS[lever](b, own[i], concurrency[i], ev, said)
        outcomes[lever] = (per, said)
    projections = []
    for lever in asked:
        per, said = outcomes[lever]
        if levers is None and not any(o.applies for o in per.values()):
            continue  # without --lever: only the levers that apply
        projections.append(_projection(lever, ready, baseline, {i: (o,) for i, o in per.items()}, said))
    if want_all:
        applying = [lever for lever in LEVERS if any(o.applies for o in outcomes[lever][0].values())]
        if levers is not None or len(applying) > 1:
            said = _Assumptions()
            for lever in applying:
                for sentence in outcomes[lever][1].sentences():
                    said.add(f"{lever}:{sentence}", f"{lever}: {sentence}")
            said.add("all", "levers that act on the same span add up to at most its own time: no second is "
                            "claimed twice")
            combined = {i: tuple(outcomes[lever][0][i] for lever in applying) for i in range(len(ready))}
            projections.append(_projection(ALL, ready, baseline, combined, said, applying))
    return WhatIf(baseline, tuple(projections), left_out, tuple(notes))


def _projection(lever: str, ready: Sequence[Breakdown], baseline: Summary,
                per: dict[int, tuple[_LeverOutcome, ...]], said: _Assumptions,
                members: Sequence[str] = ()) -> Projection:
    applies = [i for i, outcomes in per.items() if any(o.applies for o in outcomes)]
    if lever == ALL and not members:
        return Projection(lever, baseline, 0, ("no lever applies to these start-ups: nothing to change",))
    if not applies:
        return Projection(lever, baseline, 0, (_NOTHING[lever],))
    unknown = {i: "; ".join(o.unknown for o in outcomes if o.unknown) for i, outcomes in per.items()}
    estimated = [i for i in applies if not unknown[i] or any(o.cuts for o in per[i])]
    if not estimated:
        reasons = sorted({unknown[i] for i in applies if unknown[i]})
        return Projection(lever, None, None, tuple(said.sentences()), "; ".join(reasons))
    cuts = {i: [c for o in outcomes for c in o.cuts] for i, outcomes in per.items()}
    _threads_note(ready, cuts, said)
    sentences = said.sentences()
    partial = sorted({unknown[i] for i in applies if unknown[i]})
    if partial:
        sentences.append("left as measured where it could not be estimated: " + "; ".join(partial))
    if lever == ALL:
        sentences.insert(0, "together: " + ", ".join(members))
    projected = summarize([_apply(b, cuts.get(i, ())) for i, b in enumerate(ready)])
    changed = sum(1 for i in range(len(ready)) if any(c.ns for c in cuts.get(i, ())))
    return Projection(lever, projected, baseline.total.p50_ns - projected.total.p50_ns, tuple(sentences),
                      changed=changed)


_NOTHING = {
    PREWARM: "every checkpoint file was already resident and no copy read from storage: nothing to pre-warm",
    SERVING_DTYPE: "no cast in these start-ups: the checkpoint is already in the serving dtype",
    PINNED: "no pageable host-to-device copy in these start-ups",
    COMPILE_CACHE: "no compilation missed the cache in these start-ups",
    FEWER_CAPTURES: "no graph capture in these start-ups",
}


def _left_out_line(b: Breakdown) -> str:
    rank = f" rank {b.rank}" if b.rank is not None else ""
    return f"trace {b.trace_id}{rank}: {b.end_description} ({format_seconds(b.duration_ns)})"

