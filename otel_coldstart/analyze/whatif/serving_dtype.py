"""``serving-dtype``: the checkpoint saved in the dtype it is served in.

Every cast span is removed, except the storage reads inside it (at the cold read rate: the
bytes are still read on their first touch); a device copy that also converts the dtype stays
(the copy is needed anyway; the conversion is taken as free).
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ._evidence import COPY_PHASES, Assumptions, Concurrency, Cut, Evidence, LeverOutcome, storage_read_rate

NOTHING = "no cast in these start-ups: the checkpoint is already in the serving dtype"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    casts = [s for s in b.spans if s.phase == semconv.PHASE_CAST]
    device_casts = [s for s in b.spans if s.phase in COPY_PHASES and semconv.CAST_TO in s.attributes]
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
        cap = b.own_ns(span)
        keep = 0
        read = verdicts.int_value(span.attributes, semconv.IO_READ_BYTES) or 0
        if read > 0:
            cold_rate = cold_rate or storage_read_rate([b]) or (ev.floor.cold_bytes_per_s if ev.floor else None) \
                or ev.cold_rate
            if cold_rate:
                keep = min(cap, int(read / cold_rate * 1e9))
                said.add("cast-reads", "storage reads inside the casts stay (the bytes are still read on their "
                                       "first touch), at the cold read rate ({rates})", cold_rate)
            else:
                said.add("cast-reads-gone", "storage reads inside the casts go with them (no cold read rate to "
                                            "tell them apart)")
        out.cuts.append(Cut(span.span_id, semconv.PHASE_CAST, cap - keep, cap, ctx.of(span)))
    return out
