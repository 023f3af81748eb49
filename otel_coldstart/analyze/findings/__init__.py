"""Findings: one small rule per module, each a pure function over breakdowns that returns
the evidence, the lever to pull and an estimate of the time it could save.

``find(results)`` runs every rule and ranks what they found by that estimate, largest
first. Per-start-up rules take one :class:`~..breakdown.Breakdown`; rules over the ranks
of one multi-process start take the list of start-ups that share a trace.
"""

from __future__ import annotations

from typing import Sequence

from ..breakdown import Breakdown, by_trace
from ._finding import Finding
from . import (cold_cache, dominant_phase, graph_captures, hidden_mmap_reads, pageable_h2d,
               pickle_checkpoints, runtime_init, straggler_rank, unattributed)

__all__ = ["Finding", "find", "PER_STARTUP_RULES", "PER_TRACE_RULES"]

PER_STARTUP_RULES = (dominant_phase, cold_cache, pickle_checkpoints, pageable_h2d,
                     hidden_mmap_reads, graph_captures, runtime_init, unattributed)
PER_TRACE_RULES = (straggler_rank,)


def find(results: Sequence[Breakdown]) -> list[Finding]:
    found: list[Finding] = []
    for result in results:
        for rule in PER_STARTUP_RULES:
            found.extend(rule.check(result))
    for group in by_trace(results).values():
        for rule in PER_TRACE_RULES:
            found.extend(rule.check(group))
    return sorted(found, key=lambda f: (-f.saving_ns, f.rule, f.trace_id, f.rank or 0))
