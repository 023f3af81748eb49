"""Cold-cache asymmetry across shards: the shards whose bytes came from storage read
several times slower per byte than the ones served from the page cache, so storage, not
deserialisation, is the bottleneck.

Estimate: the cold shards' time minus what they would take at the warm shards' rate.
"""

from __future__ import annotations

import os

from ... import semconv
from ..breakdown import Breakdown, ShardRead
from ..units import format_bytes, format_rate, format_seconds
from ._finding import Finding

MIN_RATIO = 2.0  # cold per-byte time over warm per-byte time worth a finding


def is_cold(shard: ShardRead) -> bool:
    if shard.cache_state in (semconv.CACHE_COLD, semconv.CACHE_PARTIAL):
        return True
    if shard.cache_state == semconv.CACHE_WARM:
        return False
    return bool(shard.read_bytes and shard.size and shard.read_bytes >= shard.size // 2)


def _rate(shards: list[ShardRead]) -> float | None:
    size = sum(s.size or 0 for s in shards)
    time = sum(s.duration_ns for s in shards)
    return size / (time / 1e9) if size > 0 and time > 0 else None


def check(breakdown: Breakdown) -> list[Finding]:
    sized = [s for s in breakdown.shards if s.size]
    cold = [s for s in sized if is_cold(s)]
    warm = [s for s in sized if not is_cold(s)]
    cold_rate, warm_rate = _rate(cold), _rate(warm)
    if not cold or not warm or not cold_rate or not warm_rate or warm_rate / cold_rate < MIN_RATIO:
        return []
    ratio = warm_rate / cold_rate
    read = sum(s.read_bytes or 0 for s in cold)
    ideal = sum(int((s.size or 0) / warm_rate * 1e9) for s in cold)
    spent = sum(s.duration_ns for s in cold)
    names = ", ".join(_label(s) for s in cold[:4]) + (" ..." if len(cold) > 4 else "")
    evidence = [f"cold: {names} at {format_rate(cold_rate)}; warm shards at {format_rate(warm_rate)} "
                f"({ratio:.1f}x faster per byte)",
                f"{format_seconds(spent)} in {len(cold)} cold shard(s) of {len(sized)}"]
    if read:
        evidence.append(f"{format_bytes(read)} read from storage by the cold shard(s) during the start-up")
    return [Finding.about(
        breakdown, rule="cold_cache", phase=semconv.PHASE_DESERIALIZE,
        title=f"cold shards read {ratio:.1f}x slower per byte: storage is the bottleneck",
        evidence=evidence,
        lever="pre-warm the page cache before start (vmtouch / cat to /dev/null in an init container), "
              "keep weights on local NVMe, or read fewer, larger files",
        saving_ns=spent - ideal,
    )]


def _label(shard: ShardRead) -> str:
    name = os.path.basename(shard.path) if shard.path else "<bytes>"
    return f"#{shard.index} {name}" if shard.index is not None else name
