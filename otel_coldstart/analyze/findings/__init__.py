"""Findings: one small rule per module, each a pure function over breakdowns that returns
the evidence, the lever to pull and an estimate of the time it could save.

``find(results)`` runs every rule and ranks what they found by that estimate, largest
first. Per-start-up rules take one :class:`~..breakdown.Breakdown` (and the storage floor,
when one was given); rules over the ranks of one multi-process start take the list of
start-ups that share a trace.

Every second of a start-up counts toward at most one lever: each finding claims the
pieces of time its saving comes from (a shard, a phase, the unattributed time), and the
ranking gives a piece to the finding with the largest saving first; a later finding keeps
only what is left (a ``.bin`` shard that is both cold and a pickle is saved once). What is
left after a larger finding's claim is not a saving of its own: such a finding states none
and names the finding that counts its time.

The rules whose saving is a ``whatif`` lever's projection (``LEVER_RULES``, findings/_levers.py)
learn from every start-up given and the ``reference`` ones, as ``whatif`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ... import semconv
from ..breakdown import Breakdown, by_trace
from ..storage_floor import StorageFloor
from . import (
    cold_cache,
    compile_cache,
    dominant_phase,
    download_in_startup,
    graph_captures,
    hidden_mmap_reads,
    hub_metadata_cached,
    imports_from_source,
    imports_from_storage,
    lazy_weights,
    pageable_h2d,
    pickle_checkpoints,
    runtime_init,
    serial_download,
    straggler_rank,
    unattributed,
)
from ._finding import Finding
from ._levers import gathered

__all__ = ["Finding", "find", "PER_STARTUP_RULES", "PER_TRACE_RULES", "ACROSS_STARTUPS_RULES"]

PER_STARTUP_RULES = (dominant_phase, cold_cache, pickle_checkpoints, pageable_h2d,
                     hidden_mmap_reads, graph_captures, runtime_init, unattributed, lazy_weights,
                     imports_from_source, imports_from_storage,
                     download_in_startup, serial_download, hub_metadata_cached)  # issue 37: delivery
PER_TRACE_RULES = (straggler_rank,)
# Rules that read every start-up given at once (a reference may be in another start-up).
ACROSS_STARTUPS_RULES = (compile_cache,)
# Per-start-up rules whose saving is a whatif lever's projection: given what the levers learn.
LEVER_RULES = (cold_cache, pickle_checkpoints, dominant_phase, pageable_h2d, graph_captures, hidden_mmap_reads,
               imports_from_source, imports_from_storage, download_in_startup, hub_metadata_cached)


def find(results: Sequence[Breakdown], floor: StorageFloor | None = None,
         reference: Sequence[Breakdown] = ()) -> list[Finding]:
    found: list[Finding] = []
    evidence = gathered(results, floor, reference)
    for result in results:
        for rule in PER_STARTUP_RULES:
            found.extend(rule.check(result, floor, given=evidence) if rule in LEVER_RULES
                         else rule.check(result, floor))
    for group in by_trace(results).values():
        for rule in PER_TRACE_RULES:
            found.extend(rule.check(group))
    for rule in ACROSS_STARTUPS_RULES:
        found.extend(rule.check(results, given=evidence))
    return rank_without_double_counting(found, _capacities(results, found))


def _capacities(results: Sequence[Breakdown], found: Sequence[Finding]) -> dict[tuple, int]:
    """How much time each claimed piece holds (only the pieces some finding claims: a
    300,000-shard start-up need not index every shard)."""
    by_root = {(b.trace_id, b.root.span_id): b for b in results}
    shard_times: dict[tuple, dict[tuple, int]] = {}
    capacity: dict[tuple, int] = {}
    for f in found:
        for keys, _ in f.claims:
            for key in keys:
                if key in capacity:
                    continue
                b = by_root.get(key[:2])
                if b is None:
                    continue
                kind = key[2]
                if kind == "startup":
                    capacity[key] = b.duration_ns
                elif kind == semconv.UNATTRIBUTED:
                    capacity[key] = b.unattributed_ns
                elif kind == "phase":
                    phase = b.phase(key[3])
                    capacity[key] = phase.busy_ns if phase else 0
                elif kind == "shard":
                    times = shard_times.get(key[:2])
                    if times is None:
                        times = shard_times[key[:2]] = {(s.path or "", s.start_ns): s.duration_ns for s in b.shards}
                    capacity[key] = times.get(key[3:], 0)
    return capacity


def rank_without_double_counting(found: Sequence[Finding], capacity: dict[tuple, int]) -> list[Finding]:
    """Greedy: the finding with the largest remaining saving takes its pieces of time
    first; the others are re-estimated on what is left. Findings without claims keep
    their estimate (it is about no shared resource)."""
    remaining = dict(capacity)
    taken_by: dict[tuple, str] = {}  # a piece of time -> the rule that counted it first
    pending = list(found)
    ranked: list[Finding] = []

    def left(f: Finding) -> int:
        if not f.claims:
            return f.saving_ns
        total = 0
        for keys, ns in f.claims:
            total += min([ns] + [remaining.get(k, ns) for k in keys])
        return min(total, f.saving_ns)

    while pending:
        # On a tie the specific rule counts the time, not the dominant phase naming it.
        best = max(pending, key=lambda f: (left(f), f.rule != "dominant_phase", f.rule, f.trace_id))
        pending.remove(best)
        saving = left(best)
        counted_by = sorted({taken_by[k] for keys, _ in best.claims for k in keys
                             if k in taken_by and k[2] != "startup"})
        for keys, ns in best.claims:
            take = min([ns] + [remaining.get(k, ns) for k in keys])
            for k in keys:
                if k in remaining:
                    remaining[k] -= take
                    if take:
                        taken_by.setdefault(k, best.rule)
        if saving < best.saving_ns and (counted_by or saving == 0):
            # The rest after a larger finding's claim is no saving of this lever's own (the
            # floor's time for the bytes a pickle finding already counted, say). A claim over
            # its own pieces' time, with no other finding there, keeps the lever's figure.
            by = ", ".join(counted_by) or "a larger finding"
            note = f"no saving of its own: its time is already counted by {by}"
            best = dataclasses.replace(best, saving_ns=0, estimate=note)
        ranked.append(best)
    return sorted(ranked, key=lambda f: (-f.saving_ns, f.rule, f.trace_id, f.rank or 0))

