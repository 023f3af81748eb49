"""What every what-if lever reads: the options, the evidence gathered from all the start-ups
given (resident and cold read rates, the pinned copy rate, the cost of a compile-cache hit),
how many threads ran beside a span, and the cut and assumption records a lever returns. A
span's own time is the breakdown's (``Breakdown.self_ns``)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ... import semconv, verdicts
from ..breakdown import Breakdown, ShardRead, bandwidth_sample
from ..explain import CacheHit, fastest_hits
from ..model import Span
from ..storage_floor import StorageFloor
from ..units import format_rate, per_second

_NOT_FILE_READS = (semconv.PHASE_DESERIALIZE, semconv.PHASE_DOWNLOAD)
COPY_PHASES = (semconv.PHASE_H2D, semconv.PHASE_D2H, semconv.PHASE_D2D, semconv.PHASE_H2H)


@dataclass(frozen=True)
class Options:
    floor: StorageFloor | None = None
    keep_capture_sizes: frozenset[int] | None = None  # None: powers of two up to the largest
    reference: Sequence[Breakdown] = ()  # start-ups to learn from, not projected


@dataclass
class Cut:
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


class Assumptions:
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
class Evidence:
    floor: StorageFloor | None
    keep: frozenset[int] | None
    warm_rate_by_format: dict[str | None, float]  # resident files, all start-ups pooled
    cold_rate: float | None  # in-span storage bytes over time of cold files, all pooled
    pinned_rate: float | None
    pinned_basis: str
    compile_hits: dict[str, CacheHit]  # per frame, the fastest compilation a cache served
    # whole safetensors file reads, by cache state (True: cold or partial), all pooled (to-safetensors)
    safetensors_rates: dict[bool, float] = field(default_factory=dict)
    # per top-level module, its import's time with its files resident, all pooled (prewarm-imports)
    resident_imports: dict[str, int] = field(default_factory=dict)


def children_by_parent(b: Breakdown) -> dict[str, list[Span]]:
    """Each span's children (any thread), by the parent's span id."""
    children: dict[str, list[Span]] = defaultdict(list)
    for span in b.spans:
        children[span.parent_id or ""].append(span)
    return children


class Concurrency:
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


def file_reads(b: Breakdown) -> list[tuple[Span, ShardRead]]:
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


def in_span_storage_bytes(span: Span, shard: ShardRead) -> int:
    """The bytes of the file read from storage while its own span ran (the rest was read by
    later work: a copy or cast touching mapped pages, counted there)."""
    if shard.read_bytes is None:
        return (shard.size or 0) if shard.state == semconv.CACHE_COLD else 0
    after = verdicts.int_value(span.attributes, semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES) or 0
    return max(0, min(shard.read_bytes - after, shard.size or shard.read_bytes))


def hidden_reads(b: Breakdown) -> list[tuple[Span, int]]:
    """Spans that are not file reads but read from storage (mmap page faults in a copy or
    cast), with those bytes."""
    found = []
    parents = {s.parent_id for s in b.spans}
    for span in b.spans:
        if span.phase in _NOT_FILE_READS or span.span_id in parents:
            continue  # a container's reads are its children's
        read = verdicts.int_value(span.attributes, semconv.IO_READ_BYTES)
        if read and read > 0:
            found.append((span, read))
    return found


def warm_rates_by_format(results: Iterable[Breakdown]) -> dict[str | None, float]:
    """Bytes per second of resident file reads, per file format."""
    size: dict[str | None, int] = defaultdict(int)
    time: dict[str | None, int] = defaultdict(int)
    for b in results:
        for span, shard in file_reads(b):
            if shard.state == semconv.CACHE_WARM:
                size[shard.format] += shard.size or 0
                time[shard.format] += span.duration_ns
    return {fmt: rate for fmt in size if (rate := per_second(size[fmt], time[fmt]))}


def storage_read_rate(results: Iterable[Breakdown]) -> float | None:
    """Bytes from storage per second of the cold files' reads (their whole time: an upper
    bound on the storage time per byte)."""
    nbytes = ns = 0
    for b in results:
        for span, shard in file_reads(b):
            if shard.cold:
                read = in_span_storage_bytes(span, shard)
                if read > 0:
                    nbytes += read
                    ns += span.duration_ns
    return per_second(nbytes, ns)


def _pinned_rate(results: Iterable[Breakdown]) -> tuple[float | None, str]:
    """Bytes per second of the host-to-device copies that moved only pinned bytes: over their
    device time where the plugin resolved it, their host time where they were synchronous
    (``bandwidth_sample``: queued copies without device time say nothing of a rate)."""
    nbytes = ns = 0
    device = False
    for b in results:
        for span in b.spans:
            if span.phase != semconv.PHASE_H2D:
                continue
            pinned = verdicts.positive_int(span.attributes, semconv.COPY_PINNED_BYTES)
            pageable = verdicts.positive_int(span.attributes, semconv.COPY_PAGEABLE_BYTES)
            sample = bandwidth_sample(span) if pinned and not pageable else None
            if sample is not None:
                nbytes += sample[0]
                ns += sample[1]
                device = device or semconv.COPY_ASYNC_S in span.attributes
    basis = "device time of the pinned copies" if device else "host time of the pinned copies"
    return per_second(nbytes, ns), basis


def gather(results: Sequence[Breakdown], options: Options) -> Evidence:
    everything = list(results) + list(options.reference)
    pinned_rate, pinned_basis = _pinned_rate(everything)
    from ..import_causes import resident_import_ns
    from .to_safetensors import safetensors_rates  # the lever's own reading of its evidence

    return Evidence(options.floor, options.keep_capture_sizes, warm_rates_by_format(everything), storage_read_rate(everything),
                     pinned_rate, pinned_basis, fastest_hits(everything), safetensors_rates(everything),
                     resident_import_ns(everything))


# --- the levers: one start-up in, cuts out ------------------------------------------------


@dataclass
class LeverOutcome:
    cuts: list[Cut] = field(default_factory=list)
    applies: bool = False  # the start-up has what the lever acts on
    unknown: str | None = None  # why (part of) it could not be estimated for this start-up


def hidden_read_rate(b: Breakdown, ev: Evidence, said: Assumptions) -> float | None:
    own = storage_read_rate([b])
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
