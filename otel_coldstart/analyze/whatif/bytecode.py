"""``bytecode``: the image ships compiled bytecode (``compileall`` at build time, or pip left to
compile), so no import compiles a module from source.

Each import span's measured compile time (``coldstart.import.compile_s``: importlib's
``source_to_code``, called only when no valid cached bytecode existed) comes off it; reading
the ``.pyc`` instead of the source is taken to cost the same as reading the source did.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..import_causes import import_spans
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome

NOTHING = "no import compiled a module from source (the bytecode was cached), or the trace does not say"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    for span, causes in import_spans(b):
        if not causes.compiled_modules or not causes.compile_ns:
            continue
        out.applies = True
        said.add("bytecode", "each import's time compiling modules from source (measured) comes off it: their "
                             "cached bytecode is read instead, at the cost reading their source had")
        cap = b.own_ns(span)
        out.cuts.append(Cut(span.span_id, semconv.PHASE_IMPORT, min(cap, causes.compile_ns), cap, ctx.of(span)))
    return out
