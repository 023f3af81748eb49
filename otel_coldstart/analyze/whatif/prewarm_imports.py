"""``prewarm-imports``: the Python environment is in the page cache before the start-up
(local storage, ``vmtouch -t`` over site-packages in an init step).

Each import that read from storage loses what it took beyond the same import with its files
resident, where the start-ups given (``--reference``) hold one; otherwise its wait for storage
(analyze/import_causes.py): its time off the CPU, less the share of their time the start-up's
imports that read nothing spent off the CPU anyway, less its bytes at the storage floor's warm
read(2) rate when a floor was given (a lower bound: the kernel's CPU for the reads stays).
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..import_causes import beyond_resident_ns, import_spans, reads_storage, resident_off_cpu_share, storage_wait_ns
from ._evidence import Assumptions, Concurrency, Cut, Evidence, LeverOutcome

NOTHING = "no import read from storage (the environment was resident), or the trace does not say"


def cut(b: Breakdown, ctx: Concurrency, ev: Evidence, said: Assumptions) -> LeverOutcome:
    out = LeverOutcome()
    reading = [(span, causes) for span, causes in import_spans(b) if reads_storage(causes)]
    if not reading:
        return out
    out.applies = True
    share = resident_off_cpu_share(b)
    warm = ev.floor.warm_bytes_per_s if ev.floor else None
    for span, causes in reading:
        cap = b.own_ns(span)
        beyond = beyond_resident_ns(span, causes, ev.resident_imports)
        if beyond is not None:
            said.add("prewarm-imports-twin", "each import that read from storage takes what the same import took with "
                                             "its files resident in the start-ups given (median, without the wait "
                                             "for a core): the wait for storage and the kernel's CPU for the reads go")
            out.cuts.append(Cut(span.span_id, semconv.PHASE_IMPORT, min(cap, beyond), cap, ctx.of(span)))
            continue
        if causes.cpu_ns is None:
            out.unknown = "an import that read from storage did not record its CPU time: its wait is unknown"
            continue
        said.add("prewarm-imports", "each import that read from storage loses its time off the CPU, less the share "
                                    "imports without reads spent off the CPU in the same start-up (a lower bound: "
                                    "the kernel's CPU for the reads stays; give a warm start-up with --reference)")
        if warm:
            said.add("prewarm-imports-floor", "its bytes are read from the page cache at the storage floor's warm "
                                              "read(2) rate ({rates}) instead", warm)
        out.cuts.append(Cut(span.span_id, semconv.PHASE_IMPORT, min(cap, storage_wait_ns(causes, share, warm)), cap,
                             ctx.of(span)))
    return out
