"""Pickle checkpoints (torch.save zip or legacy format) where safetensors would do:
unpickling is single-threaded, copies every byte and runs code from the file.

Estimate: the pickle files' time minus their bytes at the safetensors throughput seen in
the same start-up, or half their time when no safetensors file was read.
"""

from __future__ import annotations

from ... import semconv
from ..breakdown import Breakdown
from ..units import format_bytes, format_rate, format_seconds
from ._finding import Finding

PICKLE_FORMATS = (semconv.FORMAT_TORCH_ZIP, semconv.FORMAT_TORCH_LEGACY)


def check(breakdown: Breakdown) -> list[Finding]:
    pickles = [s for s in breakdown.shards if s.format in PICKLE_FORMATS]
    if not pickles:
        return []
    safe = [s for s in breakdown.shards if s.format == semconv.FORMAT_SAFETENSORS and s.size]
    spent = sum(s.duration_ns for s in pickles)
    size = sum(s.size or 0 for s in pickles)
    safe_time = sum(s.duration_ns for s in safe)
    safe_rate = sum(s.size or 0 for s in safe) / (safe_time / 1e9) if safe and safe_time > 0 else None
    saving = spent - int(size / safe_rate * 1e9) if safe_rate else spent // 2
    evidence = [f"{len(pickles)} pickle file(s), {format_bytes(size)}, {format_seconds(spent)} to load"]
    if safe_rate:
        evidence.append(f"safetensors files in the same start-up read at {format_rate(safe_rate)}")
    return [Finding.about(
        breakdown, rule="pickle_checkpoints", phase=semconv.PHASE_DESERIALIZE,
        title=f"{len(pickles)} checkpoint file(s) are pickles ({', '.join(sorted({s.format for s in pickles}))})",
        evidence=evidence,
        lever="convert the checkpoint to safetensors (zero-copy mmap, no unpickling, no code execution)",
        saving_ns=saving,
    )]
