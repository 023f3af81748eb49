"""The machine-readable analysis: one JSON document, schema ``otel-coldstart.analysis/1``
(docs/cli.md documents every field). Seconds are floats, bytes integers, ids lowercase hex."""

from __future__ import annotations

import json
from typing import Any, Sequence, TextIO

from .. import semconv
from .breakdown import Breakdown
from .findings import Finding
from .interrupted import interruption_document

SCHEMA = "otel-coldstart.analysis/1"


def _s(ns: int) -> float:
    return round(ns / 1e9, 9)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def startup_to_dict(b: Breakdown) -> dict:
    total = b.duration_ns
    return {
        "trace_id": b.trace_id,
        "span_id": b.root.span_id,
        "rank": b.rank,
        "world_size": b.world_size,
        "ready": b.ready,
        "end_reason": b.root.attributes.get(semconv.END_REASON),
        **interruption_document(b),  # "killed" (where it was) and "stalls"
        "end_phase": b.end_phase,
        "start_unix_ns": b.root.start_ns,
        "duration_s": _s(total),
        "unattributed_s": _s(b.unattributed_ns),
        "unattributed_share": b.unattributed_ns / total if total else 0.0,
        "busy_s": _s(b.total_busy_ns),
        "parallelism": round(b.parallelism, 4),
        "dominant_phase": b.dominant.phase if b.dominant else None,
        "after_ready_spans": b.after_ready,
        "resource": {k: _plain(v) for k, v in sorted(b.root.resource.items())},
        "phases": [
            {"phase": p.phase, "busy_s": _s(p.busy_ns), "share": p.share_of(total), "bytes": p.bytes,
             "throughput_bytes_per_s": p.throughput, "spans": p.spans}
            for p in b.phases
        ],
        "shards": [
            {"path": r.path, "index": r.index, "count": r.count, "size_bytes": r.size, "format": r.format,
             "duration_s": _s(r.duration_ns), "read_bytes": r.read_bytes, "read_unknown": r.read_unknown,
             "cache_state": r.cache_state,
             "resident_ratio": r.resident_ratio, "thread_id": r.thread_id,
             "offset_s": _s(r.start_ns - b.root.start_ns)}
            for r in b.shards
        ],
        "gaps": [
            {"offset_s": _s(g.start_ns - b.root.start_ns), "duration_s": _s(g.duration_ns),
             "after": g.after, "before": g.before}
            for g in sorted(b.gaps, key=lambda g: -g.duration_ns)[:10]
        ],
        "context": [
            {"name": c.name, "service": c.service, "offset_s": _s(c.start_ns - b.root.start_ns),
             "duration_s": _s(c.duration_ns), "phases_inside": list(c.phases_inside),
             "encloses_startup": c.encloses_root}
            for c in b.context
        ],
    }


def finding_to_dict(f: Finding) -> dict:
    return {"rule": f.rule, "title": f.title, "evidence": list(f.evidence), "lever": f.lever,
            "saving_s": _s(f.saving_ns), "trace_id": f.trace_id, "rank": f.rank, "phase": f.phase}


def analysis_document(results: Sequence[Breakdown], findings: Sequence[Finding],
                      sources: Sequence[dict], budget: dict | None = None) -> dict:
    doc = {
        "schema": SCHEMA,
        "sources": list(sources),
        "startups": [startup_to_dict(b) for b in results],
        "findings": [finding_to_dict(f) for f in findings],
    }
    if budget is not None:
        doc["budget"] = budget
    return doc


PRETTY_LIMIT = 2000  # shards beyond which the document is written compact (C encoder, 5x faster)


def render_json(doc: dict, out: TextIO) -> None:
    shards = sum(len(s["shards"]) for s in doc.get("startups", ()))
    indent = 2 if shards <= PRETTY_LIMIT else None
    json.dump(doc, out, indent=indent, allow_nan=False, default=str)
    out.write("\n")
