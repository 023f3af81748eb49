"""Host-to-device copies from pageable memory: the driver stages them through a pinned
bounce buffer, at roughly half the bandwidth of a copy from pinned memory, and they cannot
overlap with other work.

Estimate: the ``pinned`` lever's projection (analyze/whatif/pinned.py, the same figure
``whatif --lever pinned`` gives): the pageable bytes at the pinned rate measured in the
start-ups given; not estimated without a pinned copy to learn that rate from.
"""

from __future__ import annotations

from ... import semconv, verdicts
from ..breakdown import Breakdown
from ..units import format_bytes, format_seconds
from ..whatif import PINNED
from ._finding import Finding, claim
from ._levers import lever_saving

MIN_PAGEABLE_SHARE = 0.5


def check(breakdown: Breakdown, floor=None, given=None) -> list[Finding]:
    h2d = [s for s in breakdown.spans if s.phase == semconv.PHASE_H2D]
    pageable = sum(verdicts.positive_int(s.attributes, semconv.COPY_PAGEABLE_BYTES) for s in h2d)
    pinned = sum(verdicts.positive_int(s.attributes, semconv.COPY_PINNED_BYTES) for s in h2d)
    if pageable == 0 or pageable / (pageable + pinned) < MIN_PAGEABLE_SHARE:
        return []
    phase = breakdown.phase(semconv.PHASE_H2D)
    busy = phase.busy_ns if phase else 0
    share = pageable / (pageable + pinned)
    projected = lever_saving(breakdown, PINNED, floor, given)
    saving = projected.ns or 0
    return [Finding.about(
        breakdown, rule="pageable_h2d", phase=semconv.PHASE_H2D,
        title=f"{share * 100:.0f}% of host-to-device bytes come from pageable memory",
        evidence=[f"{format_bytes(pageable)} pageable vs {format_bytes(pinned)} pinned in {len(h2d)} h2d span(s)",
                  f"h2d busy time {format_seconds(busy)}"],
        lever="copy from pinned memory: pin a reusable staging buffer (or the loader's pin option) "
              "and use non_blocking=True so copies overlap the next read",
        saving_ns=saving, estimate=projected.estimate,
        claims=[claim(breakdown, saving, ("phase", semconv.PHASE_H2D))] if saving else [],
    )]
