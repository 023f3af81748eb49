"""A straggler rank in a multi-process start: every rank waits for the slowest at the
first collective, so the start-up is as slow as its slowest rank.

Estimate: the straggler's time beyond the median of the other ranks.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..breakdown import Breakdown
from ..units import format_seconds
from ._finding import Finding
from .dominant_phase import LEVERS

MIN_EXCESS = 0.15  # slower than the others' median by this share


def check(group: Sequence[Breakdown]) -> list[Finding]:
    ranked = [b for b in group if b.rank is not None]
    if len(ranked) < 2:
        return []
    slowest = max(ranked, key=lambda b: b.duration_ns)
    others = [b for b in ranked if b is not slowest]
    import statistics  # 2 ms of imports: only with several ranks (the summary of one start-up has one)

    median = statistics.median(b.duration_ns for b in others)
    if median <= 0 or slowest.duration_ns < median * (1 + MIN_EXCESS):
        return []
    deltas = {}
    for item in slowest.phases:
        peer = statistics.median(phase.busy_ns if (phase := b.phase(item.phase)) else 0 for b in others)
        deltas[item.phase] = item.busy_ns - peer
    worst = max(deltas, key=deltas.__getitem__) if deltas else None
    evidence = [f"rank {slowest.rank}: {format_seconds(slowest.duration_ns)}; "
                f"median of the other {len(others)} rank(s): {format_seconds(int(median))}"]
    if worst is not None and deltas[worst] > 0:
        evidence.append(f"{worst} is {format_seconds(deltas[worst])} slower on rank {slowest.rank}")
    host = slowest.root.resource.get("host.name")
    if isinstance(host, str):
        evidence.append(f"host {host}")
    lever = (f"look at what is different on that rank's node; for {worst}: {LEVERS[worst]}"
             if worst in LEVERS else "look at what is different on that rank's node (cache, storage, NUMA)")
    return [Finding.about(
        slowest, rule="straggler_rank", phase=worst,
        title=f"rank {slowest.rank} is a straggler ({slowest.duration_ns / median:.1f}x the median rank)",
        evidence=evidence, lever=lever,
        saving_ns=slowest.duration_ns - int(median),
    )]
