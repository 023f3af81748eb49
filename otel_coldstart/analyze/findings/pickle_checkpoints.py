"""Pickle checkpoints (torch.save zip or legacy format) where safetensors would do:
unpickling is single-threaded, copies every byte and runs code from the file.

Estimate: the pickle files' time minus their bytes at the safetensors throughput seen in
the same start-up (only safetensors reads with the same cache state count, so a cold
``.bin`` is not compared with a warm mapped ``.safetensors``), else at the storage floor's
rate for that cache state; not estimated without either. The time of a shard that is also
cold is counted once in the ranking (findings/__init__.py).
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..storage_floor import StorageFloor
from ..units import format_bytes, format_rate, format_seconds
from ._finding import Finding, claim, share_text, shard_resource

PICKLE_FORMATS = (semconv.FORMAT_TORCH_ZIP, semconv.FORMAT_TORCH_LEGACY)


def _safetensors_rate(breakdown: Breakdown, cold: bool) -> float | None:
    safe = [s for s in breakdown.read_shards if s.format == semconv.FORMAT_SAFETENSORS and s.size and s.cold == cold]
    time = sum(s.duration_ns for s in safe)
    return sum(s.size or 0 for s in safe) / (time / 1e9) if safe and time > 0 else None


def check(breakdown: Breakdown, floor: StorageFloor | None = None) -> list[Finding]:
    pickles = [s for s in breakdown.read_shards if s.format in PICKLE_FORMATS]
    if not pickles:
        return []
    spent = sum(s.duration_ns for s in pickles)
    size = sum(s.size or 0 for s in pickles)
    total = breakdown.duration_ns
    claims, saving, bases = [], 0, set()
    for s in pickles:
        rate = _safetensors_rate(breakdown, s.cold)
        basis = "safetensors files read in the same start-up"
        if rate is None and floor is not None:
            rate = floor.cold_bytes_per_s if s.cold else floor.warm_bytes_per_s
            basis = "the storage floor"
        if rate is None or not s.size:
            continue
        piece = max(0, s.duration_ns - int(s.size / rate * 1e9))
        saving += piece
        bases.add(basis)
        claims.append(claim(breakdown, piece, shard_resource(s), ("phase", semconv.PHASE_DESERIALIZE)))
    evidence = [f"{len(pickles)} pickle file(s), {format_bytes(size)}, {format_seconds(spent)} to load "
                f"({share_text(spent, total)})"]
    for cold in (False, True):
        rate = _safetensors_rate(breakdown, cold)
        if rate:
            evidence.append(f"{'cold' if cold else 'warm'} safetensors files in the same start-up read at "
                            f"{format_rate(rate)}")
    return [Finding.about(
        breakdown, rule="pickle_checkpoints", phase=semconv.PHASE_DESERIALIZE,
        title=f"{len(pickles)} checkpoint file(s) are pickles ({', '.join(sorted({s.format for s in pickles}))})",
        evidence=evidence,
        lever="convert the checkpoint to safetensors (zero-copy mmap, no unpickling, no code execution)",
        saving_ns=saving, share=spent / total if total else 0.0, claims=claims,
        estimate=("their time minus their bytes at the rate of " + " and ".join(sorted(bases))) if bases
        else "not estimated: no safetensors read with the same cache state and no storage floor to compare with",
    )]
