"""Repairs for traces that cannot be trusted as they are: spans that cannot be true,
duplicate span ids, parent loops.

Spans that cannot be true (:func:`validate`): an end before the start, a time after 2100 or
a span longer than a year (an end of 2**63-1 ns made a 7.4-billion-second start-up), an
all-zero trace or span id (W3C: invalid, never exported by an SDK), a negative size, byte
count, call count or busy time, a resident ratio outside 0..1. Such a span is left out (its
time would be counted as true), a value that cannot be true is dropped from its span, and a
``model.startup`` root whose own times cannot be true is timed from the spans of its trace
and marked not ready (``coldstart.end_reason`` ``untimed``): it never reads as a ready
start-up. One warning line per kind names the spans; the CLI reports them as input left out
(exit 12).

Parent links (:func:`repair`): real exports contain both duplicates and loops (Jaeger
returns the same span twice; its converter's golden file gives two different spans one id;
a buggy exporter can write a parent loop). The analysis needs a forest, so: exact copies are
dropped, a different span reusing an id is renamed ``<id>#2`` (its children stay with the
first), and a parent loop is cut at the span where it was found. Missing parents are left as
they are (the breakdown treats such spans as top level) and counted. Each repair is reported
as a one-line warning.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from .. import semconv
from .model import Attributes, Span

LATEST_NS = 4_102_444_800 * 10**9  # 2100-01-01: no trace of ours is written after it
LONGEST_NS = 366 * 24 * 3600 * 10**9  # a span longer than a year is no part of a start-up
# Values that are sizes, byte or call counts, or durations: never negative.
NON_NEGATIVE = (semconv.FILE_SIZE, semconv.BYTES, semconv.IO_READ_BYTES, semconv.CACHE_STORAGE_READ_BYTES,
                semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES, semconv.COPY_PINNED_BYTES, semconv.COPY_PAGEABLE_BYTES,
                semconv.CALLS, semconv.BUSY_S, semconv.THROUGHPUT, semconv.PROGRESS_BYTES_LOADED,
                semconv.PROGRESS_BYTES_EXPECTED)
RATIOS = (semconv.CACHE_RESIDENT_RATIO, semconv.CACHE_SETTLED_RESIDENT_RATIO)
NAMED = 3  # spans named per warning line; the rest are counted


def _untrue_times(span: Span) -> str | None:
    if span.end_ns < span.start_ns:
        return "end before start"
    if span.end_ns > LATEST_NS:
        return "a time after 2100"
    if span.end_ns - span.start_ns > LONGEST_NS:
        return "longer than a year"
    return None


_ZERO_IDS = frozenset(("0" * 16, "0" * 32))  # the readers pad ids to their width


def _zero(identifier: str) -> bool:
    return identifier in _ZERO_IDS or (len(identifier) not in (16, 32) and not identifier.strip("0"))


def _untrue(value: object, ratio: bool) -> bool:
    if value.__class__ is bool or not isinstance(value, (int, float)):
        return False
    return not 0 <= value <= 1 if ratio else value < 0


def _getter(positions: list[int]) -> Callable[[tuple], tuple] | None:
    if not positions:
        return None
    if len(positions) == 1:
        position = positions[0]
        return lambda values: (values[position],)
    return operator.itemgetter(*positions)


# A reader's compact attributes share one key layout per kind of span (model.Attributes):
# which checked keys a layout has, and where, is worked out once per layout, and the values
# of a span are then checked in C (min/max over a tuple), not key by key: the check runs on
# every span of a fleet (0.3 us a span instead of 9).
_PLANS: dict[int, tuple] = {}


def _plan(index: dict) -> tuple:
    plan = _PLANS.get(id(index))
    if plan is None:
        plan = _PLANS[id(index)] = (_getter([index[k] for k in NON_NEGATIVE if k in index]),
                                    _getter([index[k] for k in RATIOS if k in index]))
    return plan


def _untrue_values(span: Span) -> list[str]:
    attributes = span.attributes
    if attributes.__class__ is Attributes:
        non_negative, ratios = _plan(attributes._index)
        if non_negative is None and ratios is None:
            return []
        values = attributes._values
        try:
            if (non_negative is None or min(non_negative(values)) >= 0) and \
                    (ratios is None or (0 <= min(ratios(values)) and max(ratios(values)) <= 1)):
                return []
        except TypeError:  # a None, a string or a tuple among them: look one by one
            pass
    elif not attributes:
        return []
    return [key for key in NON_NEGATIVE + RATIOS
            if key in attributes and _untrue(attributes[key], key in RATIOS)]


class Notes:
    """What the checks and repairs did, by kind: how many spans, and the first few named.
    Mergeable, so that a fleet read trace by trace says each kind once, not once a trace."""

    def __init__(self) -> None:
        self._kinds: dict[str, list] = {}  # template -> [count, spans named]

    def add(self, template: str, spans: Sequence[Span] = (), count: int | None = None) -> None:
        """``template`` with ``{n}`` (the count) and ``{names}`` (the spans named)."""
        entry = self._kinds.setdefault(template, [0, []])
        entry[0] += len(spans) if count is None else count
        entry[1].extend(spans[:NAMED - len(entry[1])])

    def merge(self, other: Notes) -> None:
        for template, (count, spans) in other._kinds.items():
            self.add(template, spans, count)

    def __bool__(self) -> bool:
        return bool(self._kinds)

    def lines(self) -> list[str]:
        return [template.format(n=count, names=_names(spans, count)) for template, (count, spans) in self._kinds.items()]


def validate(spans: Iterable[Span]) -> tuple[list[Span], list[str]]:
    """``spans`` without what cannot be true, and one line per kind of problem naming the
    spans it concerns (empty when every span can be true)."""
    kept, notes = check(spans)
    return kept, notes.lines()


def check(spans: Iterable[Span]) -> tuple[list[Span], Notes]:
    """validate, with its findings as :class:`Notes` (to be merged over many traces)."""
    kept: list[Span] = []
    notes = Notes()
    untimed_roots: list[tuple[Span, str | None]] = []  # (never None here: the times failed a check)
    good_trace = None  # the trace id last found not all-zero: a trace's spans come together
    for span in spans:
        trace_id = span.trace_id
        if (trace_id != good_trace and _zero(trace_id)) or _zero(span.span_id):
            notes.add("{n} span(s) left out, an all-zero trace or span id: {names}", [span])
            continue
        good_trace = trace_id
        start, end = span.start_ns, span.end_ns
        if end < start or end > LATEST_NS or end - start > LONGEST_NS:  # _untrue_times, inlined: every span passes
            why = _untrue_times(span)
            if span.is_root:
                untimed_roots.append((span, why))
            else:
                notes.add(f"{{n}} span(s) left out, {why}: {{names}}", [span])
            continue
        bad = _untrue_values(span)
        if bad:
            for key in bad:
                notes.add(f"{key} dropped from {{n}} span(s) where it was "
                          f"{'outside 0..1' if key in RATIOS else 'negative'}: {{names}}", [span])
            span = dataclasses.replace(span, attributes={k: v for k, v in span.attributes.items() if k not in bad})
        kept.append(span)
    if untimed_roots:
        repaired, lost = _time_roots(untimed_roots, kept)
        kept += repaired
        for root, why in untimed_roots:
            if any(r.span_id == root.span_id and r.trace_id == root.trace_id for r in repaired):
                notes.add(f"{{n}} model.startup root(s) whose own times cannot be true ({why}) timed from the "
                          "spans of their trace and reported not ready: {names}", [root])
            else:
                notes.add("{n} model.startup root(s) left out, their times cannot be true and their trace has no "
                          "other span to time them by: {names}", [root])
    return kept, notes


def _names(items: Sequence[Span], count: int) -> str:
    shown = ", ".join(f"{s.name or '(no name)'} {s.span_id} (trace {s.trace_id})" for s in items[:NAMED])
    return shown + (f" and {count - NAMED} more" if count > NAMED else "")


def _time_roots(untimed: list[tuple[Span, str | None]], kept: list[Span]) -> tuple[list[Span], list[Span]]:
    """Each root to the last end of the other spans of its trace, from its own start where
    that can be true, else from their first start: the start-up is shown, honestly marked,
    instead of as 0 ms and ready."""
    wanted = {s.trace_id for s, _ in untimed}
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in kept:
        if span.trace_id in wanted:
            by_trace[span.trace_id].append(span)
    repaired, lost = [], []
    for root, _ in untimed:
        others = by_trace.get(root.trace_id, [])
        if not others:
            lost.append(root)
            continue
        first, last = min(s.start_ns for s in others), max(s.end_ns for s in others)
        # The root's start stands when it can be true: before its first span (the process
        # starts before the plugin does), by less than a year.
        start = root.start_ns if first - LONGEST_NS < root.start_ns <= first else first
        end = last
        attributes = dict(root.attributes)
        attributes[semconv.READY] = False
        attributes[semconv.END_REASON] = semconv.END_UNTIMED
        repaired.append(dataclasses.replace(root, start_ns=start, end_ns=end, attributes=attributes))
    return repaired, lost


def repair(spans: Iterable[Span]) -> tuple[list[Span], list[str]]:
    unique, notes = repair_noted(spans)
    return unique, notes.lines()


def repair_noted(spans: Iterable[Span]) -> tuple[list[Span], Notes]:
    """repair, with what it did as :class:`Notes` (counts only: to be merged over traces)."""
    unique, notes = _dedupe(spans)
    present = _by_trace(unique)
    unique, cut = _cut_cycles(unique, present)
    if cut:
        notes.add("{n} parent loop(s) cut (the span where each loop closed is shown as top level)", count=cut)
    missing = sum(1 for s in unique if s.parent_id is not None and s.parent_id not in present.get(s.trace_id, ()))
    if missing:
        notes.add("{n} span(s) point at a parent that is not in the input", count=missing)
    return unique, notes


def _by_trace(spans: Iterable[Span]) -> dict[str, dict[str, int]]:
    """trace id -> span id -> position. Nested dicts keyed by the records' own strings: no
    key tuple per span (a million of them cost 160 MB and seconds on the 1M-span benchmark)."""
    index: dict[str, dict[str, int]] = {}
    for position, span in enumerate(spans):
        inner = index.get(span.trace_id)
        if inner is None:
            inner = index[span.trace_id] = {}
        inner[span.span_id] = position
    return index


def _dedupe(spans: Iterable[Span]) -> tuple[list[Span], Notes]:
    seen: dict[str, dict[str, Span]] = {}
    result: list[Span] = []
    copies = renamed = 0
    for span in spans:
        inner = seen.get(span.trace_id)
        if inner is None:
            inner = seen[span.trace_id] = {}
        first = inner.get(span.span_id)
        if first is None:
            inner[span.span_id] = span
            result.append(span)
        elif first == span:
            copies += 1
        else:
            suffix = 2
            while f"{span.span_id}#{suffix}" in inner:
                suffix += 1
            span = dataclasses.replace(span, span_id=f"{span.span_id}#{suffix}")
            inner[span.span_id] = span
            result.append(span)
            renamed += 1
    notes = Notes()
    if copies:
        notes.add("{n} duplicate span copie(s) dropped", count=copies)
    if renamed:
        notes.add("{n} span(s) reuse another span's id; renamed <id>#N", count=renamed)
    return result, notes


def _cut_cycles(spans: list[Span], index: dict[str, dict[str, int]]) -> tuple[list[Span], int]:
    """Iterative walk up parent links; a span is cut when its chain returns to itself."""
    state = bytearray(len(spans))  # 0 unseen, 1 on the current path, 2 done
    cut = 0
    for start in range(len(spans)):
        path = []
        i: int | None = start
        while i is not None and state[i] == 0:
            state[i] = 1
            path.append(i)
            span = spans[i]
            parent = index[span.trace_id].get(span.parent_id) if span.parent_id else None
            if parent is not None and state[parent] == 1:
                spans[i] = dataclasses.replace(span, parent_id=None)
                cut += 1
                parent = None
            i = parent
        for j in path:
            state[j] = 2
    return spans, cut
