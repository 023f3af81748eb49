"""``compile-cache``: compiled artifacts cached across start-ups.

Each compilation that missed the cache (``coldstart.compile.cache.misses`` > 0) at the own
time of the fastest compilation of the same frame (``coldstart.compile.frame``) that only hit
it, in the input or the reference start-ups. Not estimated for a frame that never hit, nor for
compilations without provenance (traces from before issue 26).
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome

NOTHING = "no compilation missed the cache in these start-ups"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    compiles = [s for s in b.spans if s.phase == semconv.PHASE_COMPILE]
    missed = []
    no_provenance = 0
    for span in compiles:
        hits, misses = verdicts.int_value(span.attributes, semconv.COMPILE_CACHE_HITS), verdicts.int_value(span.attributes, semconv.COMPILE_CACHE_MISSES)
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
        hit = ev.compile_hits.get(frame) if frame is not None else None
        if hit is None:
            never_hit.append(frame or "(frame not recorded)")
            continue
        said.add("compile", "each compilation that missed the cache at the own time of the fastest compilation "
                            "of the same frame that only hit it in the input")
        cap = b.own_ns(span)
        out.cuts.append(Cut(span.span_id, semconv.PHASE_COMPILE, max(0, cap - hit.ns), cap, ctx.of(span)))
    if never_hit:
        shown = ", ".join(sorted(set(never_hit))[:3]) + (" ..." if len(set(never_hit)) > 3 else "")
        reasons.append(f"no cache hit in the input for {shown}: the cost of a hit is unknown (give start-ups "
                       "that compiled with a warm cache, e.g. with --reference)")
    if reasons:
        out.unknown = "; ".join(reasons)
    return out
