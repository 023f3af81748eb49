"""Host-to-device copies from pageable memory: the driver stages them through a pinned
bounce buffer, at roughly half the bandwidth of a copy from pinned memory, and they cannot
overlap with other work.

Estimate: half of the h2d time in proportion to the pageable share of its bytes.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..units import format_bytes, format_seconds
from ._attrs import total
from ._finding import Finding, claim

MIN_PAGEABLE_SHARE = 0.5


def check(breakdown: Breakdown, floor=None) -> list[Finding]:
    h2d = [s for s in breakdown.spans if s.phase == semconv.PHASE_H2D]
    pageable = total(h2d, semconv.COPY_PAGEABLE_BYTES)
    pinned = total(h2d, semconv.COPY_PINNED_BYTES)
    if pageable == 0 or pageable / (pageable + pinned) < MIN_PAGEABLE_SHARE:
        return []
    phase = breakdown.phase(semconv.PHASE_H2D)
    busy = phase.busy_ns if phase else 0
    share = pageable / (pageable + pinned)
    return [Finding.about(
        breakdown, rule="pageable_h2d", phase=semconv.PHASE_H2D,
        title=f"{share * 100:.0f}% of host-to-device bytes come from pageable memory",
        evidence=[f"{format_bytes(pageable)} pageable vs {format_bytes(pinned)} pinned in {len(h2d)} h2d span(s)",
                  f"h2d busy time {format_seconds(busy)}"],
        lever="copy from pinned memory: pin a reusable staging buffer (or the loader's pin option) "
              "and use non_blocking=True so copies overlap the next read",
        saving_ns=int(busy * share * 0.5), estimate="half the h2d time in proportion to its pageable bytes",
        claims=[claim(breakdown, int(busy * share * 0.5), ("phase", semconv.PHASE_H2D))],
    )]
