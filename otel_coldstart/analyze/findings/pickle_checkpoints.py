"""Pickle checkpoints (torch.save zip or legacy format) where safetensors would do:
unpickling is single-threaded, copies every byte and runs code from the file.

Estimate: the ``to-safetensors`` lever's projection (analyze/whatif/to_safetensors.py, the
same figure ``whatif --lever to-safetensors`` gives for this start-up): each pickle file at
the rate of safetensors files read with the same cache state (this start-up's, else the other
start-ups given); else nothing for a resident file (safetensors maps it) and the floor's cold
rate for one read from storage; a cold file without a rate: not estimated. The time of a shard that is also cold is counted once in the ranking
(findings/__init__.py).
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..storage_floor import StorageFloor
from ..units import format_bytes, format_rate, format_seconds
from ..whatif import TO_SAFETENSORS
from ._finding import Finding, claim, shard_resource, share_text, split
from ._levers import lever_saving

PICKLE_FORMATS = (semconv.FORMAT_TORCH_ZIP, semconv.FORMAT_TORCH_LEGACY)


def _safetensors_rate(breakdown: Breakdown, cold: bool) -> float | None:
    safe = [s for s in breakdown.read_shards if s.format == semconv.FORMAT_SAFETENSORS and s.size and s.cold == cold]
    time = sum(s.duration_ns for s in safe)
    return sum(s.size or 0 for s in safe) / (time / 1e9) if safe and time > 0 else None


def check(breakdown: Breakdown, floor: StorageFloor | None = None, given=None) -> list[Finding]:
    pickles = [s for s in breakdown.read_shards if s.format in PICKLE_FORMATS]
    if not pickles:
        return []
    spent = sum(s.duration_ns for s in pickles)
    size = sum(s.size or 0 for s in pickles)
    total = breakdown.duration_ns
    projected = lever_saving(breakdown, TO_SAFETENSORS, floor, given)
    saving = projected.ns or 0
    # The saving's pieces, one per file by its time (the ranking lets each count once).
    claims = [claim(breakdown, piece, shard_resource(s), ("phase", semconv.PHASE_DESERIALIZE))
              for s, piece in zip(pickles, split(saving, [s.duration_ns for s in pickles]))]
    evidence_lines = [f"{len(pickles)} pickle file(s), {format_bytes(size)}, {format_seconds(spent)} to load "
                      f"({share_text(spent, total)})"]
    for cold in (False, True):
        rate = _safetensors_rate(breakdown, cold)
        if rate:
            evidence_lines.append(f"{'cold' if cold else 'warm'} safetensors files in the same start-up read at "
                                  f"{format_rate(rate)}")
    return [Finding.about(
        breakdown, rule="pickle_checkpoints", phase=semconv.PHASE_DESERIALIZE,
        title=f"{len(pickles)} checkpoint file(s) are pickles ({', '.join(sorted({s.format for s in pickles if s.format}))})",
        evidence=evidence_lines,
        lever="convert the checkpoint to safetensors (zero-copy mmap, no unpickling, no code execution)",
        saving_ns=saving, share=spent / total if total else 0.0, claims=claims if saving else [],
        estimate=projected.estimate,
    )]
