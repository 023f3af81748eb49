"""A finding's saving is a ``whatif`` lever's projection (analyze/whatif/): one function
computes both, so ``analyze`` and ``whatif --lever X`` state the same figure for the same
start-up, learned from the same evidence (the storage floor, every start-up given, and the
``--reference`` start-ups). A lever that does not apply states no saving.
"""

from __future__ import annotations

from typing import Sequence

from ..breakdown import Breakdown
from ..storage_floor import StorageFloor
from ..whatif import Options, Saving, evidence, saving
from ..whatif._evidence import Evidence


def gathered(results: Sequence[Breakdown], floor: StorageFloor | None = None,
             reference: Sequence[Breakdown] = ()) -> Evidence:
    """What the levers learn from the start-ups given, once for every rule."""
    return evidence(results, Options(floor=floor, reference=tuple(reference)))


def lever_saving(b: Breakdown, lever: str, floor: StorageFloor | None, ev: Evidence | None) -> Saving:
    """``lever``'s saving on ``b`` (a rule called on one start-up alone learns from it alone)."""
    return saving(b, lever, ev if ev is not None else gathered([b], floor))
