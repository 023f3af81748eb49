"""``pinned``: host-to-device copies from pinned memory.

Pageable host-to-device bytes at the pinned rate measured in the input (pinned-only copies,
timed as the breakdown times a bandwidth: device time where resolved, host time for
synchronous copies), one copy after another; in a copy that moved both, the pageable share of its time by bytes; storage reads
inside a copy are not the copy and stay. Not estimated without a pinned copy to learn from
(the storage floor measures reads, not copies).
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome, storage_read_rate

NOTHING = "no pageable host-to-device copy in these start-ups"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
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
        cap = b.own_ns(span)
        pageable = verdicts.positive_int(span.attributes, semconv.COPY_PAGEABLE_BYTES)
        pinned = verdicts.positive_int(span.attributes, semconv.COPY_PINNED_BYTES)
        storage = 0
        read = verdicts.int_value(span.attributes, semconv.IO_READ_BYTES) or 0
        if read > 0:  # storage reads inside the copy are not the copy (prewarm's time)
            cold_rate = cold_rate or storage_read_rate([b]) or (ev.floor.cold_bytes_per_s if ev.floor else None) \
                or ev.cold_rate
            storage = min(cap, int(read / cold_rate * 1e9)) if cold_rate else 0
        pageable_ns = (cap - storage) * pageable // (pageable + pinned)
        if pinned:
            said.add("pinned-mixed", "in copies that moved pinned and pageable bytes, the pageable share of the "
                                     "time in proportion to the bytes")
        ideal = int(pageable / ev.pinned_rate * 1e9)
        out.cuts.append(Cut(span.span_id, semconv.PHASE_H2D, max(0, pageable_ns - ideal), cap,
                             ctx.of(span)))
    return out
