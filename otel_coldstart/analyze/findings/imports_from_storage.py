"""Imports that read from storage: the Python environment (site-packages, the ``.so`` files
torch maps) was not in the page cache (a fresh node, an image layer pulled lazily, a network
volume). patches/imports.py records the bytes the process read from storage during each
top-level import and the importing thread's CPU time; the wait is the time off the CPU
(analyze/import_causes.py).

Estimate: the ``prewarm-imports`` lever's projection (analyze/whatif/prewarm_imports.py, the
figure ``whatif --lever prewarm-imports`` gives): that wait, less what the start-up's imports
without storage reads spent off the CPU anyway, less those bytes at the storage floor's warm
read(2) rate when a floor was given.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..import_causes import import_spans, reads_storage, resident_off_cpu_share, storage_wait_ns
from ..storage_floor import StorageFloor
from ..units import format_bytes, format_rate, format_seconds
from ..whatif import PREWARM_IMPORTS
from ._finding import Finding, claim, share_text
from ._levers import lever_saving

MIN_BYTES = 4 << 20  # a few MiB: a .pyc or two evicted since, not a cold environment
MIN_WAIT_NS = 20_000_000

LEVER = ("keep the Python environment on local storage (not a network volume or a lazily pulled image layer), "
         "or pre-warm site-packages before the server starts (`vmtouch -t` over it, or read its files in an init "
         "step)")


def check(breakdown: Breakdown, floor: StorageFloor | None = None, given=None) -> list[Finding]:
    warm_rate = floor.warm_bytes_per_s if floor else None
    share_off = resident_off_cpu_share(breakdown)
    read = waited = off_cpu = queued = 0
    reading = []
    for span, causes in import_spans(breakdown):
        if not reads_storage(causes):
            continue
        read += causes.storage_read_bytes or 0  # not None: reads_storage
        off_cpu += causes.off_cpu_ns
        queued += causes.queued_ns or 0
        wait = storage_wait_ns(causes, share_off, warm_rate)
        waited += wait
        reading.append((wait, causes.storage_read_bytes, span))
    if read < MIN_BYTES or waited < MIN_WAIT_NS:
        return []
    total = breakdown.duration_ns
    reading.sort(key=lambda item: -item[0])
    evidence = [f"imports read {format_bytes(read)} from storage and waited {format_seconds(off_cpu)} off the CPU "
                f"({share_text(off_cpu, total)})" + (f"; another {format_seconds(queued)} waiting for a core (a busy "
                                                     "machine) is not counted" if queued else ""),
                "read by: " + "; ".join(f"{_label(span)}: {format_bytes(nbytes)}, {format_seconds(wait)} waiting"
                                        for wait, nbytes, span in reading[:3])]
    if share_off:
        evidence.append(f"imports that read nothing spent {share_off * 100:.0f}% of their time off the CPU too "
                        "(a busy machine, locks): not counted as waiting for storage")
    if warm_rate:
        evidence.append(f"the same bytes from the page cache: {format_seconds(int(read / warm_rate * 1e9))} at the "
                        f"storage floor's warm read(2) rate {format_rate(warm_rate)}")
    share = waited / total if total else 0.0
    projected = lever_saving(breakdown, PREWARM_IMPORTS, floor, given)
    saving = projected.ns or 0
    return [Finding.about(
        breakdown, rule="imports_from_storage", phase=semconv.PHASE_IMPORT,
        title=f"import read {format_bytes(read)} from storage in {format_seconds(waited)}", evidence=evidence,
        lever=LEVER, saving_ns=saving, share=share, estimate=projected.estimate,
        claims=[claim(breakdown, saving, ("phase", semconv.PHASE_IMPORT))] if saving else [],
    )]


def _label(span) -> str:
    module = span.attributes.get(semconv.IMPORT_MODULE)
    return f"import {module}" if isinstance(module, str) else "fast imports"
