"""Cold page cache: checkpoint shards whose bytes came from storage (verdicts.py decides
cold, partial or warm), with what that cost and what pre-warming would save.

Per-byte rates use real reads: the bytes the cold shards read from storage (the thread's
``read_bytes``, or the file size where only residency was measured) over their time. The
reference for "the same bytes, warm" is the storage floor's warm read(2) rate when a floor
was given (``otel-coldstart floor --json``), else the warm shards of the same start-up, but
only where they plausibly read their bytes: a warm shard "read" faster than the floor's
warm rate was mapped, not read, and says nothing per byte.

Every shard cold (a fresh node, the usual autoscaling case) still gets the finding, with the
bytes read from storage and their rate; the warm reference then comes from the floor or the
other start-ups given (``--reference`` among them), and without any the saving is not
estimated and the finding says how to get one (``otel-coldstart floor FILES``).

Estimate: the ``prewarm`` lever's projection (analyze/whatif/prewarm.py: the same figure
``whatif --lever prewarm`` gives for this start-up). The title scales with the cold shards'
share of the start-up ("bottleneck" only from 30%).
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown, ShardRead
from ..storage_floor import StorageFloor
from ..units import format_bytes, format_rate, format_seconds, per_second
from ..whatif import PREWARM
from ._finding import Finding, claim, shard_resource, share_text, split, weight
from ._levers import cold_file_spans, lever_saving

NEEDS_A_FLOOR = ("saving needs a floor: `otel-coldstart floor FILES` (the checkpoint's files; its --json output "
                 "given among the inputs), or start-ups with the files resident (--reference)")
MIN_RATIO = 2.0  # cold per-byte time over the warm reference's worth a finding


def _bytes_read(shard: ShardRead) -> int:
    """Bytes this read took from storage: measured when the plugin could, else the size."""
    if shard.read_bytes:
        return min(shard.read_bytes, shard.size or shard.read_bytes)
    return shard.size or 0


def check(breakdown: Breakdown, floor: StorageFloor | None = None, given=None) -> list[Finding]:
    sized = [s for s in breakdown.read_shards if s.size]
    cold = [s for s in sized if s.cold]
    if not cold:
        return []
    warm = [s for s in sized if s.state == semconv.CACHE_WARM]
    spent = sum(s.duration_ns for s in cold)
    read = sum(_bytes_read(s) for s in cold)
    cold_rate = per_second(read, spent)
    warm_rate = per_second(sum(s.size or 0 for s in warm), sum(s.duration_ns for s in warm))
    floor_warm = floor.warm_bytes_per_s if floor else None
    reference, reference_name = None, ""
    if floor_warm:
        reference, reference_name = floor_warm, "the storage floor's warm read(2) rate"
    elif warm_rate:
        reference, reference_name = warm_rate, "the warm shards of this start-up"
    elif given is not None and _pooled_warm_rate(cold, given):
        reference = _pooled_warm_rate(cold, given)
        reference_name = "the resident files of the other start-ups given"
    if cold_rate is None:
        return []
    if reference is not None and reference / cold_rate < MIN_RATIO:
        return []  # a contrast that says the cold reads cost little
    total = breakdown.duration_ns
    share = spent / total if total else 0.0
    names = ", ".join(_label(s) for s in cold[:4]) + (" ..." if len(cold) > 4 else "")
    measured = any(s.read_bytes for s in cold)
    every = " (every shard of the start-up)" if len(cold) == len(sized) else ""
    evidence = [f"cold{every}: {names}: {format_bytes(read)} "
                f"{'read from storage during the start-up' if measured else '(file size; read bytes not measured)'}"
                f" in {format_seconds(spent)}, {share_text(spent, total)}"]
    if reference is not None:
        evidence.append(f"{format_rate(cold_rate)} from storage against {format_rate(reference)} for {reference_name} "
                        f"({reference / cold_rate:.1f}x slower per byte)")
    else:
        evidence.append(f"{format_rate(cold_rate)} from storage; no resident file and no storage floor to compare "
                        "with")
    if floor and floor.cold_bytes_per_s:
        verdict = ("the cold shards read at the storage speed" if cold_rate >= 0.7 * floor.cold_bytes_per_s
                   else "the cold shards read slower than the storage can deliver: the loader, not the "
                        "storage, sets the pace")
        evidence.append(f"storage floor, cold read(2): {format_rate(floor.cold_bytes_per_s)} ({verdict})")
    if warm_rate and floor_warm and warm_rate > floor_warm:
        evidence.append(f"warm shards 'read' at {format_rate(warm_rate)}, faster than read(2) from the page cache: "
                        "their bytes were mapped, not read, so they are no per-byte reference")
    projected = lever_saving(breakdown, PREWARM, floor, given)
    # prewarm's saving on the cold files themselves; its storage reads inside later copies
    # and casts are hidden_mmap_reads' part of the same projection.
    saving = projected.part(cold_file_spans(breakdown)) if projected.ns else 0
    # The saving's pieces, one per cold shard by its time (the ranking lets each count once).
    claims = [claim(breakdown, piece, shard_resource(s), ("phase", semconv.PHASE_DESERIALIZE))
              for s, piece in zip(cold, split(saving, [s.duration_ns for s in cold]))] if saving else []
    estimate = projected.estimate
    if projected.ns is None:
        estimate = NEEDS_A_FLOOR
        evidence.append(NEEDS_A_FLOOR)
    level = weight(share)
    files = sum(s.files for s in cold)  # a folded row is many small files (patches/_folded_files.py)
    if level == "major":
        title = (f"cold page cache: {files:,} shard(s) read from storage take {share_text(spent, total)}; "
                 "storage is the bottleneck")
    elif level == "notable":
        title = f"cold page cache: {files:,} shard(s) read from storage cost {share_text(spent, total)}"
    else:
        title = f"{files:,} cold shard(s) read from storage: {format_seconds(spent)}, {share_text(spent, total)}"
    return [Finding.about(
        breakdown, rule="cold_cache", phase=semconv.PHASE_DESERIALIZE, title=title, evidence=evidence,
        lever="pre-warm the page cache before start (vmtouch / cat to /dev/null in an init container), "
              "keep weights on local NVMe, or read fewer, larger files",
        saving_ns=saving, share=share, claims=claims, estimate=estimate,
    )]


def _pooled_warm_rate(cold: list[ShardRead], evidence) -> float | None:
    """The resident rate of the cold shards' format in the other start-ups given."""
    formats = {s.format for s in cold}
    rates = [evidence.warm_rate_by_format.get(fmt) for fmt in formats]
    return min(rates) if rates and all(rates) else None


def _label(shard: ShardRead) -> str:
    return f"#{shard.index} {shard.name}" if shard.index is not None else shard.name
