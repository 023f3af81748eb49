"""``fewer-captures``: CUDA graphs captured for fewer batch sizes.

The captures (the leaves, as ``verdicts.capture_count`` counts them) of the sizes not kept are
removed: their ``coldstart.graph.capture_times_s`` (parallel to ``coldstart.graph.batch_sizes``),
or the span's mean per size where those are not recorded. Kept: ``--keep-capture-sizes``, by
default one power of two per size up to the largest captured (requests padded up). Captures
without sizes: not estimated.
"""

from __future__ import annotations

from collections.abc import Iterable

from ... import semconv
from ..breakdown import Breakdown
from ..model import Span
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome

NOTHING = "no graph capture in these start-ups"


def _capture_leaves(b: Breakdown) -> list[Span]:
    captures = [s for s in b.spans if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    containers = {s.parent_id for s in captures}
    return [s for s in captures if s.span_id not in containers]


def _capture_sizes(span: Span) -> list[int]:
    many = span.attributes.get(semconv.GRAPH_BATCH_SIZES)
    values = list(many) if isinstance(many, (tuple, list)) else [span.attributes.get(semconv.GRAPH_BATCH_SIZE)]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]


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


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
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
        cap = b.own_ns(span)
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
        out.cuts.append(Cut(span.span_id, semconv.PHASE_GRAPH_CAPTURE, min(cap, cut), cap, ctx.of(span)))
    if unsized:
        out.unknown = (f"{unsized} capture span(s) without batch sizes ({semconv.GRAPH_BATCH_SIZES}): which of "
                       "them a keep-list removes is unknown")
    return out
