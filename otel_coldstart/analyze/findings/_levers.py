"""A finding's saving is a ``whatif`` lever's projection (analyze/whatif/): one function
computes both, so ``analyze`` and ``whatif --lever X`` state the same figure for the same
start-up, learned from the same evidence (the storage floor, every start-up given, and the
``--reference`` start-ups). A lever that does not apply states no saving.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..breakdown import Breakdown, same_thread
from ..storage_floor import StorageFloor
from ..whatif import Options, Saving, saving
from ..whatif._evidence import Evidence, file_reads, gather


def gathered(results: Sequence[Breakdown], floor: StorageFloor | None = None,
             reference: Sequence[Breakdown] = ()) -> Evidence:
    """What the levers learn from the start-ups given, once for every rule."""
    return gather(results, Options(floor=floor, reference=tuple(reference)))


def lever_saving(b: Breakdown, lever: str, floor: StorageFloor | None, ev: Evidence | None) -> Saving:
    """``lever``'s saving on ``b`` (a rule called on one start-up alone learns from it alone)."""
    return saving(b, lever, ev if ev is not None else gathered([b], floor))


def cold_file_spans(b: Breakdown) -> set[str]:
    """The spans prewarm saves as part of reading the cold files: each cold or partial file's
    span and the copies made on its thread while it was open (whatif/prewarm.py). The rest of
    prewarm's saving is storage reads inside other copies and casts (``hidden_mmap_reads``)."""
    cold = {span.span_id: span for span, shard in file_reads(b) if shard.cold}
    inside = set(cold)
    for span in b.spans:
        parent = cold.get(span.parent_id or "")
        if parent is not None and same_thread(span, parent):
            inside.add(span.span_id)
    return inside
