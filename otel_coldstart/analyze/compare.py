"""Compare two start-ups or two sets of start-ups (before/after a rollout): per phase,
the median busy time on each side, the delta and the ratio, slowest-growing first."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from .breakdown import Breakdown

TOTAL = "total"
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class PhaseDelta:
    phase: str  # a phase, or "total" / "unattributed"
    a_ns: int
    b_ns: int

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_ns

    @property
    def ratio(self) -> float | None:
        return self.b_ns / self.a_ns if self.a_ns > 0 else None


@dataclass(frozen=True)
class Comparison:
    a_count: int
    b_count: int
    total: PhaseDelta
    rows: tuple[PhaseDelta, ...]  # phases and unattributed, largest increase first

    def slower(self, min_ns: int = 1_000_000, min_ratio: float = 1.1) -> list[PhaseDelta]:
        """Rows that got slower by at least ``min_ns`` and ``min_ratio`` (or appeared)."""
        return [r for r in self.rows
                if r.delta_ns >= min_ns and (r.ratio is None or r.ratio >= min_ratio)]


def _median(values: Sequence[int]) -> int:
    return int(statistics.median(values)) if values else 0


def _value(b: Breakdown, key: str) -> int:
    if key == TOTAL:
        return b.duration_ns
    if key == UNATTRIBUTED:
        return b.unattributed_ns
    phase = b.phase(key)
    return phase.busy_ns if phase else 0


def compare(a: Sequence[Breakdown], b: Sequence[Breakdown]) -> Comparison:
    if not a or not b:
        raise ValueError("compare needs at least one start-up on each side")
    phases = sorted({p.phase for side in (a, b) for item in side for p in item.phases})
    rows = [PhaseDelta(key, _median([_value(x, key) for x in a]), _median([_value(x, key) for x in b]))
            for key in phases + [UNATTRIBUTED]]
    rows.sort(key=lambda r: (-r.delta_ns, r.phase))
    total = PhaseDelta(TOTAL, _median([x.duration_ns for x in a]), _median([x.duration_ns for x in b]))
    return Comparison(len(a), len(b), total, tuple(rows))
