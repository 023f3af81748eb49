"""The first request after ready(), as the trace tells it (otel_coldstart/first_token.py
writes it): how long it took, the time to first token (process start to its end), how long
the replica waited for it after ready(), how it ended, and what it paid for the start-up: our
spans nested in it (a graph capture or compilation for a new shape) and the weights still on
storage at ready() that were first read while it ran (first-use records, analyze/lazy.py).

Pure functions over plain records: :func:`first_request_of` is called by compute_breakdown
(the result rides on ``Breakdown.first_request``, kept by ``slim()``, so ``capacity`` and
``whatif`` read it); :func:`lines` and :func:`document` are what every renderer shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import semconv
from .model import Span
from .units import format_bytes, format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from .breakdown import Breakdown

OK = "ok"
FAILED = "failed"  # the request raised: its exception is on the span
INTERRUPTED = "interrupted"  # the process ended (exit, SIGTERM handled by us) while it ran
NOT_ENDED = "not ended"  # begun and never ended: killed during it (SIGKILL), or still running
# The first-use follow-up samples every 0.25 s (first_use.TICK_S): pages read during a request
# are first seen up to one tick after it.
FIRST_USE_TICK_S = 0.25
MAX_INSIDE = 8
WAIT_SHOWN_NS = 1_000_000  # a wait for the first request from 1 ms is worth its own figure


@dataclass(frozen=True)
class FirstRequest:
    """The first request of one start-up."""

    status: str  # OK, FAILED, INTERRUPTED or NOT_ENDED
    start_ns: int
    end_ns: int | None  # None: NOT_ENDED
    startup_start_ns: int  # the process start (the root's start)
    ready_ns: int  # the root's end
    source: str | None  # "first_request()" or "vllm"
    error_type: str | None = None
    end_reason: str | None = None  # INTERRUPTED: the process's end reason
    phases_inside: tuple[tuple[str, int, int], ...] = ()  # (phase, busy ns, spans) of our spans inside it
    span_id: str | None = None

    @property
    def ended(self) -> bool:
        return self.end_ns is not None

    @property
    def duration_ns(self) -> int | None:
        return None if self.end_ns is None else max(0, self.end_ns - self.start_ns)

    @property
    def time_to_first_token_ns(self) -> int | None:
        """Process start to the request's end: a first token only for a request that ended well."""
        return None if self.status != OK or self.end_ns is None else max(0, self.end_ns - self.startup_start_ns)

    @property
    def after_ready_ns(self) -> int:
        """ready() to the request's start: the replica waited for traffic (0 under a scale-out)."""
        return max(0, self.start_ns - self.ready_ns)

    @property
    def serving_ns(self) -> int | None:
        """The start-up to ready() plus the request itself, without the wait between them:
        the time to first token of a replica whose first request arrived at ready()."""
        duration = self.duration_ns
        return None if duration is None or self.status != OK else (self.ready_ns - self.startup_start_ns) + duration


def first_request_of(root: Span, members: Sequence[Span]) -> FirstRequest | None:
    """The first request among a start-up's spans (the earliest, should a trace hold two),
    else the record that one had begun; None when neither is there."""
    spans, begun = [], []
    for member in members:  # one pass: this runs for every start-up a fleet report reads
        name = member.name
        if name == semconv.SPAN_FIRST_REQUEST:
            spans.append(member)
        elif name == semconv.SPAN_FIRST_REQUEST_BEGUN:
            begun.append(member)
    if spans:
        span = min(spans, key=lambda s: s.start_ns)
        attrs = span.attributes
        if attrs.get(semconv.INTERRUPTED):
            status = INTERRUPTED
        elif span.status == "error":
            status = FAILED
        else:
            status = OK
        error = attrs.get(semconv.ERROR_TYPE)
        end = attrs.get(semconv.FIRST_REQUEST_END)
        source = attrs.get(semconv.FIRST_REQUEST_SOURCE)
        return FirstRequest(status, span.start_ns, span.end_ns, root.start_ns, root.end_ns,
                            source if isinstance(source, str) else None,
                            error if isinstance(error, str) else None, end if isinstance(end, str) else None,
                            _phases_inside(span, members), span.span_id)
    if not begun:
        return None
    record = min(begun, key=lambda s: s.start_ns)
    source = record.attributes.get(semconv.FIRST_REQUEST_SOURCE)
    return FirstRequest(NOT_ENDED, record.start_ns, None, root.start_ns, root.end_ns,
                        source if isinstance(source, str) else None)


def _phases_inside(span: Span, members: Sequence[Span]) -> tuple[tuple[str, int, int], ...]:
    """Our phased spans under the first request (any depth), summed per phase, top level only
    (a span under another counted one is in its parent's time)."""
    children: dict[str, list[Span]] = defaultdict(list)
    for member in members:
        if member.parent_id is not None:
            children[member.parent_id].append(member)
    totals: dict[str, list[int]] = {}
    stack = list(children.get(span.span_id, ()))
    seen = {span.span_id}
    while stack:
        child = stack.pop()
        if child.span_id in seen:
            continue  # a parent cycle in a hostile trace
        seen.add(child.span_id)
        if child.phase is not None:
            item = totals.setdefault(child.phase, [0, 0])
            item[0] += child.duration_ns
            item[1] += 1
            continue
        stack.extend(children.get(child.span_id, ()))
    return tuple(sorted(((p, ns, n) for p, (ns, n) in totals.items()), key=lambda t: (-t[1], t[0])))[:MAX_INSIDE]


def first_use_inside(b: Breakdown) -> list[tuple[str, int, float]]:
    """The files still on storage at ready() whose first reads the follow-up saw while the
    first request ran (to one sampling tick after it): (file name, bytes read after ready()
    in all, seconds after ready() first seen)."""
    request = b.first_request
    if request is None:
        return []
    from .lazy import lazy_files

    start_s = request.after_ready_ns / 1e9
    end_s = start_s + request.duration_ns / 1e9 if request.duration_ns is not None else float("inf")
    found = []
    for item in lazy_files(b):
        seen = item.first_use
        if seen is None or not seen.bytes or seen.first_s is None:
            continue
        if start_s <= seen.first_s <= end_s + FIRST_USE_TICK_S:
            found.append((item.name, seen.bytes, seen.first_s))
    return found


def _status_text(request: FirstRequest) -> str:
    if request.status == FAILED:
        return f"FAILED ({request.error_type})" if request.error_type else "FAILED"
    if request.status == INTERRUPTED:
        return f"interrupted ({request.end_reason or 'process ended'})"
    return request.status


def lines(b: Breakdown) -> list[str]:
    """Every renderer's lines about the first request; [] when the trace has none."""
    request = b.first_request
    if request is None:
        return []
    after = format_seconds(request.after_ready_ns)
    if request.status == NOT_ENDED:
        return [f"first request: began {after} after ready() and never ended (killed during it, or still "
                "running): no time to first token"]
    head = f"first request: {format_seconds(request.duration_ns or 0)}, began {after} after ready()"
    if request.status == OK:
        head += f"; time to first token {format_seconds(request.time_to_first_token_ns or 0)} from process start"
        if request.after_ready_ns >= WAIT_SHOWN_NS:
            head += f" ({format_seconds(request.serving_ns or 0)} without the wait for it)"
    else:
        head += f"; {_status_text(request)}: no time to first token"
    out = [head]
    if request.phases_inside:
        out.append("  inside it: " + ", ".join(f"{phase} {format_seconds(ns)}" + (f" ({n} spans)" if n > 1 else "")
                                               for phase, ns, n in request.phases_inside))
    for name, nbytes, first_s in first_use_inside(b):
        out.append(f"  inside it: {name} first read from storage {first_s:.2f} s after ready() "
                   f"({format_bytes(nbytes)} after ready() in all)")
    return out


def document(b: Breakdown) -> dict | None:
    """``analyze --format json``'s ``first_request`` of one start-up (None without one)."""
    request = b.first_request
    if request is None:
        return None
    ttft = request.time_to_first_token_ns
    duration = request.duration_ns
    serving = request.serving_ns
    return {
        "status": request.status,
        "seconds": None if duration is None else duration / 1e9,
        "time_to_first_token_s": None if ttft is None else ttft / 1e9,
        "without_wait_s": None if serving is None else serving / 1e9,
        "after_ready_s": request.after_ready_ns / 1e9,
        "offset_s": (request.start_ns - request.startup_start_ns) / 1e9,
        "source": request.source,
        "error_type": request.error_type,
        "end_reason": request.end_reason,
        "phases_inside": [{"phase": p, "seconds": ns / 1e9, "spans": n} for p, ns, n in request.phases_inside],
        "first_use_inside": [{"file": name, "bytes": nbytes, "first_seen_after_ready_s": first_s}
                             for name, nbytes, first_s in first_use_inside(b)],
    }
