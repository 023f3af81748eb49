"""Where the start-up time went: per-phase time, unattributed time, the dominant phase.

Pure functions over :class:`~otel_coldstart.analyze.model.Span` records.

The invariant (docs/analysis.md): for a single-threaded start-up, the per-phase times plus
``unattributed`` add up exactly to the root span's duration. Each phased span contributes
its *self time*: its own coverage minus the coverage of its phased children on the same
thread. Spans without a phase (a user's span, vLLM's "Load weights") are transparent: their
phased descendants count as children of the nearest phased ancestor. Work on other threads
adds busy time but never subtracts from the thread that waited for it, so with thread pools
the phases can add up to more than the wall time; the ratio is reported as parallelism.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from .. import semconv, verdicts
from .first_request import FirstRequest, first_request_of
from .model import Attributes, Span
from .units import per_second

TOTAL = "total"  # the whole start-up (the root span), beside the phases and unattributed


# Phases whose calls may only queue device work (non-blocking copies, GPU casts, copies
# between GPUs): a call's busy time is then its launch time, not its transfer time.
DEVICE_WORK_PHASES = frozenset((semconv.PHASE_H2D, semconv.PHASE_D2H, semconv.PHASE_D2D, semconv.PHASE_CAST))
# Phases whose bytes cross the host<->device link, so their bandwidth has the link's bound.
LINK_PHASES = frozenset((semconv.PHASE_H2D, semconv.PHASE_D2H))


@dataclass(frozen=True)
class PhaseTime:
    phase: str
    busy_ns: int
    spans: int
    bytes: int  # of the spans that did not fail
    # Device-work phases: the bytes whose time is known and that time (bandwidth_sample).
    timed_bytes: int = 0
    timed_ns: int = 0
    # h2d/d2h: the bound no real bandwidth passes (the host link's); None where there is none.
    bound_bps: float | None = None
    failed: int = 0  # spans of the phase that failed (status error): a read that raised
    failed_busy_ns: int = 0  # their share of busy_ns

    def share_of(self, total_ns: int) -> float:
        return self.busy_ns / total_ns if total_ns > 0 else 0.0

    @property
    def throughput(self) -> float | None:
        """Bytes per second: for copies and casts, over the device time of queued work and
        the host time of synchronous work (``bandwidth_sample``), None where no byte's time is
        known; for other phases, over the busy time of the spans that did not fail (a read
        that raised moved no bytes it could be judged by)."""
        if self.phase in DEVICE_WORK_PHASES:
            return per_second(self.timed_bytes, self.timed_ns)
        busy = self.busy_ns - self.failed_busy_ns
        if self.bytes <= 0 or busy <= 0:
            return None
        return self.bytes / (busy / 1e9)

    @property
    def above_bound(self) -> bool:
        """The bandwidth is above what the host link carries: a timing error, never a fast copy."""
        rate = self.throughput
        return self.bound_bps is not None and rate is not None and rate > self.bound_bps


def bandwidth_sample(span: Span) -> tuple[int, int] | None:
    """``(bytes, ns)``: a span's bytes and the time they took, for a bandwidth; None when
    that time is not known.

    Copy and cast aggregates (h2d, d2h, d2d, cast): device time where the plugin resolved it
    (``coldstart.copy.async_s``: its ``coldstart.throughput`` then covers host-timed blocking
    calls plus the device time of the rest); host time only for synchronous work. Queued work
    without device time (unresolved, untimed calls, non-blocking copies or device-to-device
    copies with no events) has none: its busy time is launch time. Any other span with bytes:
    its busy time."""
    attrs = span.attributes
    nbytes = _bytes_value(attrs.get(semconv.BYTES))
    return _bandwidth_sample(span, attrs, nbytes) if nbytes > 0 else None


def _bandwidth_sample(span: Span, attrs: Mapping[str, Any], nbytes: int) -> tuple[int, int] | None:
    """bandwidth_sample of a span with ``nbytes`` (> 0) bytes, read already by the caller."""
    if span.phase in DEVICE_WORK_PHASES and attrs.get(semconv.AGGREGATE):
        int_value = verdicts.int_value
        keys = getattr(attrs, "_index", attrs)  # most of these keys are absent: looked for in C (model.Attributes)
        if (semconv.COPY_ASYNC_UNRESOLVED in keys and attrs.get(semconv.COPY_ASYNC_UNRESOLVED) is True) or \
                (semconv.COPY_UNTIMED_CALLS in keys and int_value(attrs, semconv.COPY_UNTIMED_CALLS)):
            return None
        if semconv.COPY_ASYNC_S in keys:
            rate = attrs.get(semconv.THROUGHPUT)
            if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
                return nbytes, max(1, round(nbytes / rate * 1e9))
            return None
        if (semconv.COPY_NON_BLOCKING_CALLS in keys and int_value(attrs, semconv.COPY_NON_BLOCKING_CALLS)) or \
                span.phase == semconv.PHASE_D2D:
            return None
    busy = span.busy_ns
    return (nbytes, busy) if busy > 0 else None


def bandwidth_warnings(breakdown: Breakdown) -> list[str]:
    """One line per phase whose bandwidth is above the host link's bound: a timing error
    (launch time taken for transfer time, say), never a fast copy. Every renderer prints them."""
    from .units import format_rate

    link = breakdown.link or "no link recorded: the documented upper bound"
    return [f"{p.phase} throughput {format_rate(p.throughput)} is above the host link's bound "
            f"({link}: {format_rate(p.bound_bps)}): a timing error, not a real bandwidth"
            for p in breakdown.phases if p.above_bound]


def link_of(spans: Iterable[Span]) -> tuple[str | None, float | None]:
    """(the host link the trace recorded, its bound in bytes/s per direction). No link
    recorded (CUDA was up before instrument(), or no GPU): None and the documented bound of
    an unknown link; an integrated GPU: no bound."""
    for span in spans:
        link = span.attributes.get(semconv.RUNTIME_LINK)
        if isinstance(link, str):
            bound = span.attributes.get(semconv.RUNTIME_LINK_BPS)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound > 0:
                return link, float(bound)
            return link, None if link == semconv.RUNTIME_LINK_INTEGRATED else semconv.LINK_BOUND_UNKNOWN_BPS
    return None, semconv.LINK_BOUND_UNKNOWN_BPS


@dataclass(slots=True)
class ShardRead:
    """One checkpoint file read, with its cold-cache evidence. Treated as immutable; not
    declared frozen for the same reason as model.Span (a fleet has 160,000 of them)."""

    path: str | None
    index: int | None
    count: int | None
    size: int | None
    format: str | None
    duration_ns: int
    read_bytes: int | None
    cache_state: str | None
    resident_ratio: float | None
    thread_id: int | None
    start_ns: int
    # Why read_bytes is unknown (coldstart.cache.storage_read_unknown), e.g. "filesystem:nfs4".
    read_unknown: str | None = None
    span_id: str | None = None  # the file span's id: which span of the start-up this read is
    failed: bool = False  # the read raised (its span's status is error): no cache or speed evidence
    error_type: str | None = None  # what it raised (error.type, the exception event, the status)
    # Small files folded into one record (patches/_folded_files.py): how many files it is (its
    # size, time and storage bytes are theirs summed; duration_ns their summed read time) and
    # their cache verdicts counted, (state, files) each; a file's own span is 1 and ().
    files: int = 1
    file_states: tuple[tuple[str, int], ...] = ()

    @property
    def folded(self) -> bool:
        return self.files != 1 or bool(self.file_states)

    @property
    def state(self) -> str | None:
        """cold | partial | warm | None: the one verdict (verdicts.shard_cache_state); None
        for a read that failed: it says nothing about the page cache. Folded files: cold when
        every one was, partial when some were cold or partial, warm when every one was warm."""
        if self.failed:
            return None
        if self.file_states:
            return _folded_state(dict(self.file_states), self.files)
        return verdicts.shard_cache_state(self.cache_state, self.read_bytes, self.size)

    @property
    def cold(self) -> bool:
        return verdicts.is_cold(self.state)

    @property
    def name(self) -> str:
        if self.folded:
            return f"<{self.files:,} small files, folded>"
        return os.path.basename(self.path) if self.path else "<bytes>"


def _folded_state(counts: dict[str, int], files: int) -> str | None:
    cold = counts.get(semconv.CACHE_COLD, 0)
    if files and cold == files:
        return semconv.CACHE_COLD
    if cold or counts.get(semconv.CACHE_PARTIAL, 0):
        return semconv.CACHE_PARTIAL
    if files and counts.get(semconv.CACHE_WARM, 0) == files:
        return semconv.CACHE_WARM
    return semconv.CACHE_WARM if counts.get(semconv.CACHE_WARM, 0) else None


_FOLDED_STATES = ((semconv.CACHE_COLD, semconv.FILES_COLD), (semconv.CACHE_PARTIAL, semconv.FILES_PARTIAL),
                  (semconv.CACHE_WARM, semconv.FILES_WARM), ("unknown", semconv.FILES_CACHE_UNKNOWN),
                  ("failed", semconv.FILES_FAILED))


def cache_verdict(states: Iterable[str | None]) -> str | None:
    """A start-up's cache verdict from its checkpoint reads' (ShardRead.state): ``cold`` when
    one was cold or partial, ``warm`` when some had a state and all were warm, else None."""
    states = list(states)
    if any(verdicts.is_cold(state) for state in states):
        return semconv.CACHE_COLD
    return semconv.CACHE_WARM if any(states) else None


@dataclass(frozen=True)
class Gap:
    """Time on the root's thread that no phased span covers (part of ``unattributed``)."""

    start_ns: int
    end_ns: int
    after: str | None  # name of the phased span that ended just before, None at the start
    before: str | None  # name of the phased span that starts just after, None at the end

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class ContextSpan:
    """A span that is not ours (vLLM's "Load weights", a user's span) overlapping the
    start-up, with the phases recorded inside it, so our phases read inside its steps."""

    name: str
    start_ns: int
    end_ns: int
    service: str | None
    phases_inside: tuple[str, ...]
    encloses_root: bool  # an ancestor of model.startup (the caller's span)

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass(frozen=True)
class Breakdown:
    root: Span
    phases: tuple[PhaseTime, ...]  # largest first
    unattributed_ns: int
    total_busy_ns: int
    shards: tuple[ShardRead, ...]  # in the order they were read
    after_ready: int  # spans of this start-up recorded after ready()
    spans: tuple[Span, ...] = ()  # the phased spans inside the root's window (for findings)
    gaps: tuple[Gap, ...] = ()  # unattributed stretches on the root thread, in time order
    context: tuple[ContextSpan, ...] = ()  # foreign spans, longest first
    link: str | None = None  # the host<->device link the start-up recorded (runtime_init)
    slim_cache: str | None = None  # set by slim(), which drops the shards: what `cache` said of them
    # A server's own start-up spans (vLLM's "Overall Loading", "Load model", ...) as the
    # start-up's outline, with our phases inside each (analyze/outline.py); empty otherwise.
    outline: tuple = ()
    # The first request after ready() (analyze/first_request.py), None when the trace has none.
    first_request: FirstRequest | None = None
    # Each phased span's self time (span id -> ns), as the phases add it up: the one figure the
    # what-if levers cap their cuts at and the compile-cache hit is measured in. Empty when slim.
    self_ns: Mapping[str, int] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def own_ns(self, span: Span) -> int:
        """The span's self time (its busy time where the breakdown has none for it)."""
        return self.self_ns.get(span.span_id, span.busy_ns)

    @property
    def trace_id(self) -> str:
        return self.root.trace_id

    @property
    def rank(self) -> int | None:
        return verdicts.int_value(self.root.attributes, semconv.RANK)

    @property
    def world_size(self) -> int | None:
        return verdicts.int_value(self.root.attributes, semconv.WORLD_SIZE)

    @property
    def duration_ns(self) -> int:
        return self.root.duration_ns

    @property
    def ready(self) -> bool:
        return self.root.attributes.get(semconv.READY) is True

    @property
    def end_reason(self) -> str | None:
        """How the start-up ended: semconv.END_* (ready, exit, exception, sigterm, ...)."""
        return verdicts.str_value(self.root.attributes, semconv.END_REASON)

    @property
    def end_phase(self) -> str | None:
        """The phase that was running when the start-up was cut short, if it was."""
        return verdicts.str_value(self.root.attributes, semconv.END_PHASE)

    @property
    def killed(self) -> bool:
        return self.end_reason == semconv.END_KILLED

    @property
    def end_description(self) -> str:
        """One line on how the start-up ended, for every renderer and command: "ready", or what
        cut it short and during which phase (analyze/end_reasons.py, the one rule)."""
        from .end_reasons import end_sentence

        return end_sentence(self)

    @property
    def attributed_wall_ns(self) -> int:
        return self.duration_ns - self.unattributed_ns

    @property
    def parallelism(self) -> float:
        """Busy time per second of attributed wall time: 1.0 for a single thread."""
        wall = self.attributed_wall_ns
        return self.total_busy_ns / wall if wall > 0 else 1.0

    @property
    def candidates(self) -> Sequence[PhaseTime]:
        """The phases the dominant one, the largest and the runner-up are chosen among, largest
        first: ours; with an outline, the finest phases: ours, and each server span's own time
        that none of its children or our phases cover (a "phase" named after that span)."""
        if self.outline:
            from .outline import finest_phases  # only for start-ups that have an outline

            return finest_phases(self)
        return self.phases

    @property
    def dominant(self) -> PhaseTime | None:
        """The phase that dominates (verdicts.dominant_phase), None when none does."""
        return verdicts.dominant_phase(self.candidates, self.duration_ns)

    @property
    def largest(self) -> PhaseTime | None:
        ranked = self._ranked()
        return ranked[0] if ranked else None

    @property
    def runner_up(self) -> PhaseTime | None:
        """The next phase after the largest (the dominant one, when one dominates), from the
        same candidates: with an outline, a server step's own time can be it."""
        ranked = self._ranked()
        return ranked[1] if len(ranked) > 1 else None

    def _ranked(self) -> list[PhaseTime]:
        return [p for p in self.candidates if p.phase != semconv.UNATTRIBUTED]  # never a phase (verdicts)

    @property
    def cold_shards(self) -> tuple[ShardRead, ...]:
        return tuple(s for s in self.shards if s.cold)

    @property
    def read_shards(self) -> tuple[ShardRead, ...]:
        """The checkpoint reads that did not fail: the evidence for cold rates, speeds and
        savings (a failed read is listed, marked, and counted nowhere else)."""
        return tuple(s for s in self.shards if not s.failed)

    @property
    def graph_captures(self) -> int:
        return verdicts.capture_count(self.spans)

    @property
    def cache(self) -> str | None:
        """The start-up's cache verdict: ``cold`` when a checkpoint read was cold or partial,
        ``warm`` when it had reads with a cache state and all were warm, None without any."""
        if not self.shards:
            return self.slim_cache
        return cache_verdict(s.state for s in self.shards)

    def slim(self) -> Breakdown:
        """This start-up as compare and capacity read it (phases, root, cache verdict),
        without its spans, gaps, context, shards and outline: a fleet of 10,000 is then held,
        and handed between processes, at a fraction of the size. What needs those reads
        nothing on a slim record (its cold shards, graph captures; ``dominant`` picks among our
        phases only, without a server's own steps): compare and capacity read none of it.
        ``breakdowns(spans, slim=True)`` gives the same records without building the rest."""
        return dataclasses.replace(self, spans=(), gaps=(), context=(), shards=(), outline=(), slim_cache=self.cache,
                                   self_ns={})

    def phase(self, name: str) -> PhaseTime | None:
        for item in self.phases:
            if item.phase == name:
                return item
        return None

    def time_of(self, key: str) -> int:
        """The start-up's time under one name, as compare rows and budget keys say it:
        ``total`` (the root), ``unattributed``, or a phase's busy time (0 where it is absent)."""
        if key == TOTAL:
            return self.duration_ns
        if key == semconv.UNATTRIBUTED:
            return self.unattributed_ns
        phase = self.phase(key)
        return phase.busy_ns if phase else 0


def _process_key(span: Span) -> tuple:
    res = span.resource
    return (res.get("service.instance.id"), res.get("host.name"), res.get("process.pid"))


def group_startups(spans: Iterable[Span]) -> list[tuple[Span, list[Span]]]:
    """Pair every ``model.startup`` root with the spans that belong to its start-up.

    A span belongs to the root among its ancestors; failing that (its parent chain passes
    through a span that is missing, or ends at a foreign root such as vLLM's), to the root of
    the same trace and process, or to the trace's only root. Parent cycles are cut.

    Span ids are unique only within a trace (Zipkin's and Jaeger's 64-bit ids repeat across
    services, a replayed trace set repeats them all): every lookup is by (trace id, span id),
    done trace by trace, so the cost stays linear whatever the ids.
    """
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span.trace_id].append(span)
    grouped: list[tuple[Span, list[Span]]] = []
    for trace_spans in traces.values():
        roots = [s for s in trace_spans if s.is_root]
        if roots:
            grouped.extend(_group_trace(trace_spans, roots))
    grouped.sort(key=lambda pair: (pair[0].start_ns, pair[0].trace_id, pair[0].span_id))
    return grouped


def _group_trace(spans: list[Span], roots: list[Span]) -> list[tuple[Span, list[Span]]]:
    """group_startups for the spans of one trace."""
    by_id = {s.span_id: s for s in spans}
    members: dict[int, list[Span]] = {id(r): [] for r in roots}
    owners: dict[str, Span | None] = {}
    owner: Span | None
    for span in spans:
        if span.is_root:
            continue
        parent = by_id.get(span.parent_id) if span.parent_id is not None else None
        if parent is not None and parent.is_root and span.parent_id != span.span_id \
                and span.parent_id not in owners:  # right under a root: _root_ancestor's answer, without a walk
            owners[span.span_id] = owner = parent
        else:
            owner = _root_ancestor(span, by_id, owners)
        if owner is None:
            same_process = [r for r in roots if _process_key(r) == _process_key(span)]
            if len(same_process) == 1:
                owner = same_process[0]
            elif len(roots) == 1:
                owner = roots[0]
        if owner is not None:
            members[id(owner)].append(span)
    return [(r, members[id(r)]) for r in roots]


def _root_ancestor(span: Span, by_id: dict[str, Span], memo: dict[str, Span | None]) -> Span | None:
    """The ``model.startup`` above ``span``. ``memo`` remembers the answer for every span on
    the walked path, so a whole trace costs time linear in its spans, however deep."""
    path = [span.span_id]
    on_path = {span.span_id}  # a set beside the list: membership stays O(1) on deep chains
    parent_id = span.parent_id
    owner: Span | None = None
    while parent_id is not None and parent_id not in on_path:
        if parent_id in memo:
            owner = memo[parent_id]
            break
        parent = by_id.get(parent_id)
        if parent is None:
            break
        if parent.is_root:
            owner = parent
            break
        path.append(parent_id)
        on_path.add(parent_id)
        parent_id = parent.parent_id
    for span_id in path:
        memo[span_id] = owner
    return owner


def _nearest_phased_ancestor(span: Span, by_id: dict[str, Span], root_id: str,
                             memo: dict[str, str | None]) -> str | None:
    """The id of the closest ancestor that is phased or the root; None if the chain breaks.
    ``memo`` holds the answer for unphased spans already walked through (linear time)."""
    path: list[str] = []
    on_path = {span.span_id}
    parent_id = span.parent_id
    result: str | None = None
    while parent_id is not None and parent_id not in on_path:
        if parent_id == root_id:
            result = root_id
            break
        if parent_id in memo:
            result = memo[parent_id]
            break
        parent = by_id.get(parent_id)
        if parent is None:
            break
        if parent.phase is not None:
            result = parent_id
            break
        path.append(parent_id)
        on_path.add(parent_id)
        parent_id = parent.parent_id
    for unphased_id in path:
        memo[unphased_id] = result
    return result


def same_thread(a: Span, b: Span) -> bool:
    ta, tb = a.thread_id, b.thread_id
    return ta is None or tb is None or ta == tb


def phased_tree(root: Span, window: Sequence[Span],
                by_id: dict[str, Span]) -> tuple[dict[str, list[Span]], list[Span]]:
    """Each phased span under its nearest phased ancestor (or the root): the children of each
    span id, and the spans whose parent chain breaks, or whose phased parent outlives the
    start-up (treated as top level)."""
    children: dict[str, list[Span]] = {}
    orphans: list[Span] = []
    memo: dict[str, str | None] = {}
    root_id = root.span_id
    in_window = {s.span_id for s in window}
    for span in window:
        # Most spans hang right under the root, a phased span, or an unphased span already
        # walked through: answered without a walk, as _nearest_phased_ancestor would (a phased
        # parent is never in memo).
        parent_id = span.parent_id
        if parent_id is None or parent_id == span.span_id:
            owner: str | None = None
        elif parent_id == root_id:
            owner = root_id
        elif parent_id in memo:
            owner = memo[parent_id]
        else:
            parent = by_id.get(parent_id)
            if parent is not None and parent.phase is not None:
                owner = parent_id
            else:
                owner = _nearest_phased_ancestor(span, by_id, root_id, memo)
        if owner is None or (owner != root_id and owner not in in_window):
            # Parent missing from the file, or a phase that outlives the start-up (ready() came
            # while it ran, from another thread): its finished children count as top level.
            orphans.append(span)
        else:
            kids = children.get(owner)
            if kids is None:
                children[owner] = [span]
            else:
                kids.append(span)
    return children, orphans


def self_times(window: Iterable[Span], children: dict[str, list[Span]]) -> list[int]:
    """The self time of each span of ``window``, in its order: its busy time minus that of its
    phased children on its thread."""
    own = []
    for span in window:
        busy = span.aggregate_busy_ns  # Span.busy_ns, inlined: it runs for every span of a fleet
        if busy is None:
            busy = max(0, span.end_ns - span.start_ns)
        kids = children.get(span.span_id)
        if kids:
            thread = span.thread_id
            busy -= sum(c.busy_ns for c in kids  # same_thread(span, c), inlined
                        if thread is None or c.thread_id is None or c.thread_id == thread)
        own.append(max(0, busy))
    return own


class PhasedSpans(NamedTuple):
    """A start-up's phased spans as :func:`compute_breakdown` found them, for the outline
    (analyze/outline.py) to read without finding them again."""

    window: list[Span]  # the phased spans inside the root's window
    by_id: dict[str, Span]  # the members and the root, by span id
    children: dict[str, list[Span]]  # phased_tree
    orphans: list[Span]
    own: list[int]  # self time of each span of window, in its order


def compute_breakdown(root: Span, members: Sequence[Span], foreign: Sequence[Span] = (),
                      context: bool = True, *, across_processes: bool = False, slim: bool = False) -> Breakdown:
    """The breakdown of one start-up: ``root`` and the spans :func:`group_startups` gave it.
    ``foreign`` are other spans of the trace (not members) that may enclose the root;
    ``context=False`` leaves out the spans that are not ours. ``slim``: only what compare and
    capacity read (:meth:`Breakdown.slim`: no context, spans, gaps or shards, the shards'
    cache verdict kept), without building what would be thrown away. ``across_processes``: the
    members come from several processes (a server's start-up, analyze/outline.py), so no
    thread is the root's: unattributed is the root's time that no top-level phased span of
    any process covers."""
    return breakdown_and_tree(root, members, foreign, context, across_processes=across_processes, slim=slim)[0]


def breakdown_and_tree(root: Span, members: Sequence[Span], foreign: Sequence[Span] = (), context: bool = True, *,
                       across_processes: bool = False, slim: bool = False) -> tuple[Breakdown, PhasedSpans]:
    """:func:`compute_breakdown`, and the phased spans as it found them (for the outline)."""
    context = context and not slim
    start, end = root.start_ns, root.end_ns  # verdicts.in_startup_window, inlined: it runs for every span
    window = [s for s in members if s.phase is not None and s.start_ns >= start and s.end_ns <= end]
    after_ready = sum(1 for s in members if s.start_ns >= end or (
        semconv.AFTER_READY in getattr(s.attributes, "_index", s.attributes)
        and s.attributes.get(semconv.AFTER_READY)))
    by_id = {s.span_id: s for s in members}
    by_id[root.span_id] = root

    children, orphans = phased_tree(root, window, by_id)
    top_level = children.get(root.span_id, []) + orphans
    own_times = self_times(window, children)

    totals: dict[str, list] = {}  # phase -> [busy, spans, bytes, timed bytes, timed ns, failed, failed busy]
    cache_states: list[str | None] = []
    for span, own in zip(window, own_times):
        phase = cast(str, span.phase)  # the window holds phased spans only
        item = totals.get(phase)
        if item is None:
            item = totals[phase] = [0, 0, 0, 0, 0, 0, 0]
        item[0] += own
        item[1] += 1
        attrs = span.attributes
        nbytes = _bytes_value(attrs.get(semconv.BYTES))
        if span.status == "error":  # its time counts; its bytes say nothing about a speed
            item[5] += 1
            item[6] += own
        else:
            item[2] += nbytes
            if slim and phase == semconv.PHASE_DESERIALIZE:
                cache_states.append(_read_state(attrs))
        if phase in DEVICE_WORK_PHASES and nbytes and (sample := _bandwidth_sample(span, attrs, nbytes)) is not None:
            item[3] += sample[0]
            item[4] += sample[1]

    on_root_thread = top_level if across_processes else [s for s in top_level if same_thread(root, s)]
    gaps = _gaps(root, on_root_thread) if across_processes or not slim else ()
    if across_processes:
        unattributed = sum(g.duration_ns for g in gaps)
    else:
        unattributed = max(0, root.duration_ns - sum(s.busy_ns for s in on_root_thread))
    link, bound = link_of(s for s in members if s.phase == semconv.PHASE_RUNTIME_INIT)
    phases = tuple(sorted(
        (PhaseTime(p, busy, count, nbytes, timed_bytes, timed_ns, bound if p in LINK_PHASES else None, failed,
                   failed_busy) for p, (busy, count, nbytes, timed_bytes, timed_ns, failed, failed_busy) in totals.items()),
        key=lambda p: (-p.busy_ns, p.phase)))
    if slim:
        shards: tuple[ShardRead, ...] = ()
    else:
        shards = tuple(sorted((_shard_read(s) for s in window if s.phase == semconv.PHASE_DESERIALIZE),
                              key=lambda r: (r.start_ns, r.path or "")))
    breakdown = Breakdown(
        root=root,
        phases=phases,
        unattributed_ns=unattributed,
        total_busy_ns=sum(item[0] for item in totals.values()),
        shards=shards,
        after_ready=after_ready,
        spans=() if slim else tuple(window),
        gaps=() if slim else gaps,
        context=_context(root, members, foreign, by_id) if context else (),
        link=link,
        slim_cache=cache_verdict(cache_states) if slim else None,
        first_request=first_request_of(root, members),
        self_ns={} if slim else {s.span_id: own for s, own in zip(window, own_times)},
    )
    return breakdown, PhasedSpans(window, by_id, children, orphans, own_times)


def breakdowns(spans: Iterable[Span], context: bool = True, *, slim: bool = False) -> list[Breakdown]:
    """Every start-up in ``spans``. ``context=False``: without the spans that are not ours;
    ``slim``: only what compare and capacity read (:meth:`Breakdown.slim`)."""
    from .user_phases import keep_user_phases_apart

    spans = keep_user_phases_apart(list(spans))  # an older trace's phase("import"): its own row
    groups = group_startups(spans)
    from .outline import server_startups  # vLLM's own start-up spans make the processes one start-up

    if slim or not context:
        combined, groups = server_startups(spans, groups, {}, context=False, slim=slim)
        return _in_time_order([compute_breakdown(root, members, context=False, slim=slim) for root, members in groups],
                              combined)
    # Foreign spans: unphased ones no start-up claimed. Only unphased spans can be foreign,
    # so only their ids are looked up (no set of every claimed id: 60 MB at 1M spans).
    unphased = {(s.trace_id, s.span_id): s for s in spans if s.phase is None}
    for root, members in groups:
        unphased.pop((root.trace_id, root.span_id), None)
        for member in members:
            if member.phase is None:
                unphased.pop((member.trace_id, member.span_id), None)
    foreign_by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in unphased.values():
        foreign_by_trace[span.trace_id].append(span)
    combined, groups = server_startups(spans, groups, foreign_by_trace)
    return _in_time_order([compute_breakdown(root, members, foreign_by_trace.get(root.trace_id, ()))
                           for root, members in groups], combined)


def _in_time_order(results: list[Breakdown], combined: list[Breakdown]) -> list[Breakdown]:
    """The start-ups one root each, and the servers' start-ups made of several (outline.py),
    in the order of their start."""
    if not combined:
        return results
    return sorted(results + combined, key=lambda b: (b.root.start_ns, b.root.span_id))


def by_trace(results: Sequence[Breakdown]) -> dict[str, list[Breakdown]]:
    """Start-ups grouped by trace, ranks in order: several processes (tensor-parallel ranks)
    that shared a TRACEPARENT show up as several roots in one trace."""
    grouped: dict[str, list[Breakdown]] = defaultdict(list)
    for result in results:
        grouped[result.trace_id].append(result)
    for group in grouped.values():
        group.sort(key=lambda b: (b.rank is None, b.rank if b.rank is not None else 0, b.root.start_ns))
    return dict(grouped)


def _gaps(root: Span, top_level: Sequence[Span]) -> tuple[Gap, ...]:
    """Stretches of the root's window that no top-level phased span on its thread covers."""
    gaps = []
    cursor, after = root.start_ns, None
    for span in sorted(top_level, key=lambda s: (s.start_ns, s.end_ns)):
        if span.start_ns > cursor:
            gaps.append(Gap(cursor, span.start_ns, after, span.name))
        if span.end_ns >= cursor:
            cursor, after = span.end_ns, span.name
    if root.end_ns > cursor:
        gaps.append(Gap(cursor, root.end_ns, after, None))
    return tuple(gaps)


_CONTEXT_LIMIT = 50  # the longest foreign spans are enough to read the phases in context


def _context(root: Span, members: Sequence[Span], foreign: Sequence[Span],
             by_id: dict[str, Span]) -> tuple[ContextSpan, ...]:
    foreign_by_id = {s.span_id: s for s in foreign}
    enclosing: dict[str, Span] = {}
    parent_id = root.parent_id
    while parent_id is not None and parent_id not in enclosing:
        parent = foreign_by_id.get(parent_id) or by_id.get(parent_id)
        if parent is None or parent.phase is not None or parent.is_root:
            break
        enclosing[parent_id] = parent
        parent_id = parent.parent_id
    candidates = [s for s in members if s.phase is None and not s.is_root and s.span_id not in enclosing
                  and not s.name.startswith(semconv.SPAN_PREFIX)
                  and s.end_ns > root.start_ns and s.start_ns < root.end_ns]
    candidates += list(enclosing.values())
    candidates.sort(key=lambda s: (-s.duration_ns, s.start_ns))
    candidates = candidates[:_CONTEXT_LIMIT]
    wanted = {s.span_id for s in candidates}
    inside: dict[str, set] = defaultdict(set)
    for span in members:
        if span.phase is None:
            continue
        parent_id, steps = span.parent_id, 0
        while parent_id is not None and steps < 64:  # bounded: context is a summary
            if parent_id in wanted:
                inside[parent_id].add(span.phase)
            parent = by_id.get(parent_id) or foreign_by_id.get(parent_id)
            if parent is None:
                break
            parent_id, steps = parent.parent_id, steps + 1
    return tuple(
        ContextSpan(
            name=s.name, start_ns=s.start_ns, end_ns=s.end_ns,
            service=service if isinstance(service := s.resource.get("service.name"), str) else None,
            phases_inside=tuple(sorted(inside.get(s.span_id, ()))),
            encloses_root=s.span_id in enclosing,
        )
        for s in candidates
    )


def _bytes_value(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _storage_read_bytes(attrs: Mapping[str, Any]) -> int | None:
    """Bytes of the file that came from storage during the start-up: the per-file figure
    (every thread, reads after the span included), else, in traces written before it existed,
    the span's own per-thread counter; None where the trace says no honest figure exists."""
    figure = verdicts.int_value(attrs, semconv.CACHE_STORAGE_READ_BYTES)
    if figure is not None or semconv.CACHE_STORAGE_READ_UNKNOWN in attrs:
        return figure
    return verdicts.int_value(attrs, semconv.IO_READ_BYTES)


def _read_state(attrs: Mapping[str, Any]) -> str | None:
    """The cache verdict of a file read that did not fail, straight from its span's
    attributes: ShardRead.state without building the ShardRead (compare and capacity keep
    only the start-up's verdict, :func:`cache_verdict`)."""
    if attrs.get(semconv.FILES_FOLDED) is True:
        counts, files = _folded_counts(attrs)
        return _folded_state(dict(counts), files)
    state = attrs.get(semconv.CACHE_STATE)
    return verdicts.shard_cache_state(state if isinstance(state, str) else None, _storage_read_bytes(attrs),
                                      verdicts.int_value(attrs, semconv.FILE_SIZE))


def _shard_read(span: Span) -> ShardRead:
    attrs = span.attributes
    if attrs.__class__ is Attributes:  # a dict's own get, sixteen times (a fleet has 160,000 shards)
        attrs = attrs.to_dict()
    path = attrs.get(semconv.FILE_PATH)
    fmt = attrs.get(semconv.FILE_FORMAT)
    state = attrs.get(semconv.CACHE_STATE)
    ratio = attrs.get(semconv.CACHE_RESIDENT_RATIO)
    int_value = verdicts.int_value
    if attrs.get(semconv.FILES_FOLDED) is True:
        return _folded_read(span, attrs)
    return ShardRead(
        path=path if isinstance(path, str) else None,
        index=int_value(attrs, semconv.SHARD_INDEX),
        count=int_value(attrs, semconv.SHARD_COUNT),
        size=int_value(attrs, semconv.FILE_SIZE),
        format=fmt if isinstance(fmt, str) else None,
        duration_ns=span.duration_ns,
        read_bytes=_storage_read_bytes(attrs),
        read_unknown=unknown if isinstance(unknown := attrs.get(semconv.CACHE_STORAGE_READ_UNKNOWN), str) else None,
        cache_state=state if isinstance(state, str) else None,
        resident_ratio=float(ratio) if isinstance(ratio, (int, float)) else None,
        thread_id=span.thread_id,
        start_ns=span.start_ns,
        span_id=span.span_id,
        failed=span.status == "error",
        error_type=kind if isinstance(kind := attrs.get(semconv.ERROR_TYPE), str) else None,
    )


def _folded_counts(attrs: Mapping[str, Any]) -> tuple[tuple[tuple[str, int], ...], int]:
    """((state, files), ...) of a folded record, and its files (coldstart.calls)."""
    counts = []
    for state, key in _FOLDED_STATES:
        value = verdicts.int_value(attrs, key)
        if value:
            counts.append((state, value))
    return tuple(counts), verdicts.int_value(attrs, semconv.CALLS) or 0


def _folded_read(span: Span, attrs: Mapping[str, Any]) -> ShardRead:
    """Small files folded into one aggregate: one row for all of them, their figures summed."""
    fmt = attrs.get(semconv.FILE_FORMAT)
    counts, files = _folded_counts(attrs)
    failed = dict(counts).get("failed", 0)
    return ShardRead(
        path=None, index=None, count=None,
        size=verdicts.int_value(attrs, semconv.FILE_SIZE),
        format=fmt if isinstance(fmt, str) else None,
        duration_ns=span.busy_ns,  # the files' read time summed, not the record's extent
        read_bytes=_storage_read_bytes(attrs),
        read_unknown=unknown if isinstance(unknown := attrs.get(semconv.CACHE_STORAGE_READ_UNKNOWN), str) else None,
        cache_state=None, resident_ratio=None, thread_id=span.thread_id, start_ns=span.start_ns,
        span_id=span.span_id, failed=bool(files) and failed == files,
        files=files,
        file_states=counts or (("unknown", files),),
    )
