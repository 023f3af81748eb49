"""The storage floor (``otel-coldstart floor --json``) as an analysis input: what plain
read(2) gets from this storage, cold and warm. Per-byte findings compare real reads against
it instead of against shards whose bytes may never have been read (mmap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLOOR_FORMAT = "otel-coldstart.floor"  # floor.FORMAT; not imported: floor.py is not analysis


@dataclass(frozen=True)
class StorageFloor:
    source: str
    cold_bytes_per_s: float | None
    warm_bytes_per_s: float | None
    files: int = 0


def is_floor_document(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FLOOR_FORMAT


def _rate(doc: dict, state: str) -> float | None:
    entry = doc.get(state)
    if not isinstance(entry, dict):
        return None
    value = entry.get("bytes_per_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        return None
    if state == "cold" and entry.get("evicted") is False:
        return None  # the OS refused eviction: that run was not a cold read
    return float(value)


def floor_from_document(doc: dict, source: str) -> StorageFloor:
    files = doc.get("files")
    return StorageFloor(source, _rate(doc, "cold"), _rate(doc, "warm"),
                        len(files) if isinstance(files, list) else 0)


def combine(floors: list[StorageFloor]) -> StorageFloor | None:
    """Several floor files: the slowest of each (the conservative reference)."""
    if not floors:
        return None
    colds = [f.cold_bytes_per_s for f in floors if f.cold_bytes_per_s]
    warms = [f.warm_bytes_per_s for f in floors if f.warm_bytes_per_s]
    return StorageFloor(", ".join(f.source for f in floors), min(colds) if colds else None,
                        min(warms) if warms else None, sum(f.files for f in floors))
