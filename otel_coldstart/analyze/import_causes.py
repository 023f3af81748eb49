"""Why imports were slow (issue 38), per import span, as the findings (imports_from_source,
imports_from_storage) and the what-if levers (bytecode, prewarm-imports) both estimate it.

Pure functions over a :class:`~.breakdown.Breakdown`'s ``coldstart.import`` spans and the
causes patches/imports.py recorded on them (explain.import_causes).

- Compiling from source: the time importlib spent compiling modules whose cached bytecode was
  missing or stale (``coldstart.import.compile_s``). With the bytecode cached, that time goes;
  reading a ``.pyc`` instead of a ``.py`` costs about the same.
- Reading from storage: where the start-ups given hold the same top-level import made with
  its files resident (a warm node's trace, ``--reference``), the cold import loses what it
  took beyond that twin, both counted without their wait for a core: the wait for storage
  and the kernel's CPU for the reads alike (measured on this VM: the kernel's side was more
  than half of what prewarming saved). Without a twin, a lower bound: the import's time
  neither on the CPU nor waiting for a core (the run-queue wait the plugin records: a busy
  machine's), less the share of their time the same start-up's imports that read nothing
  spent so too (a lock, another thread), less reading the same bytes from the page cache (the
  storage floor's warm read(2) rate, where a floor was given).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator

from .. import semconv, verdicts
from .breakdown import Breakdown
from .explain import ImportCauses, import_causes
from .model import Span

MIN_REFERENCE_NS = 50_000_000  # resident imports shorter than this in all are no reference for waiting
# An import that read less than this from storage (a few .pyc files evicted since) is not
# waiting for storage: its time off the CPU is another wait's (a lock, a page of the heap).
MIN_STORAGE_BYTES = 1 << 20


def reads_storage(causes: ImportCauses) -> bool:
    return (causes.storage_read_bytes or 0) >= MIN_STORAGE_BYTES


def import_spans(b: Breakdown) -> Iterator[tuple[Span, ImportCauses]]:
    """Each import span that recorded its causes, with them."""
    for span in b.spans:
        if span.phase == semconv.PHASE_IMPORT:
            causes = import_causes(span)
            if causes is not None:
                yield span, causes


def resident_off_cpu_share(b: Breakdown) -> float:
    """The share of their time the start-up's imports that read nothing from storage spent off
    the CPU anyway (0 when they are too short to tell)."""
    wall = off = 0
    for _, causes in import_spans(b):
        if causes.storage_read_bytes is not None and not reads_storage(causes) and causes.cpu_ns is not None:
            wall += causes.ns
            off += causes.off_cpu_ns
    return off / wall if wall >= MIN_REFERENCE_NS else 0.0


def storage_wait_ns(causes: ImportCauses, resident_share: float, warm_bytes_per_s: float | None) -> int:
    """The time an import waited for its storage reads, beyond what the same reads cost from
    the page cache: 0 for an import that read nothing or did not record its CPU time."""
    if not reads_storage(causes) or causes.cpu_ns is None:
        return 0
    wait = causes.off_cpu_ns - resident_share * causes.ns
    if warm_bytes_per_s:
        wait -= (causes.storage_read_bytes or 0) / warm_bytes_per_s * 1e9  # not None: reads_storage
    return max(0, int(wait))


def _unqueued_ns(causes: ImportCauses) -> int:
    """An import's time less its wait for a core: what a busy machine adds is not the import's."""
    return causes.ns - (causes.queued_ns or 0)


def resident_import_ns(breakdowns: Iterable[Breakdown]) -> dict[str, int]:
    """Per top-level module, the median time its import took with nothing read from storage
    (less the wait for a core), over every start-up given: the twin a cold import is set
    against."""
    times: dict[str, list[int]] = {}
    for b in breakdowns:
        for span, causes in import_spans(b):
            module = verdicts.str_value(span.attributes, semconv.IMPORT_MODULE)
            if module is None or causes.storage_read_bytes is None or reads_storage(causes):
                continue
            times.setdefault(module, []).append(_unqueued_ns(causes))
    return {module: int(statistics.median(values)) for module, values in times.items()}


def beyond_resident_ns(span: Span, causes: ImportCauses, resident: dict[str, int]) -> int | None:
    """What a cold import took beyond its resident twin (both less their wait for a core); None
    without a twin."""
    module = verdicts.str_value(span.attributes, semconv.IMPORT_MODULE)
    if module is None or module not in resident or not reads_storage(causes):
        return None
    return max(0, _unqueued_ns(causes) - resident[module])
