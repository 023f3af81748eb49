"""The machine-readable analysis: one JSON document, schema ``otel-coldstart.analysis/1``
(docs/cli.md documents every field). Seconds are floats, bytes integers, ids lowercase hex."""

from __future__ import annotations

import json
from typing import Any, TextIO

from .. import semconv
from .breakdown import Breakdown
from .downloads import downloads, to_dict as downloads_to_dict
from .findings import Finding
from .first_request import document as first_request_document
from .interrupted import interruption_document
from .lazy import lazy_files
from .own_cost import own_cost_document
from .render_explain import explain_document
from .report import Report
from .units import json_seconds as _s

SCHEMA = "otel-coldstart.analysis/1"


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class ShardRows:
    """The shards of a big start-up, made into dicts only while they are written (a million-
    span trace has 300,000 of them: 340 MB as dicts and their encoding at once)."""

    def __init__(self, b: Breakdown) -> None:
        self._b = b

    def __len__(self) -> int:
        return len(self._b.shards)

    def __iter__(self):
        origin = self._b.root.start_ns
        for r in self._b.shards:
            yield _shard(r, origin)


def _shard(r, origin: int) -> dict:
    return {"path": r.path, "index": r.index, "count": r.count, "size_bytes": r.size, "format": r.format,
            "duration_s": _s(r.duration_ns), "read_bytes": r.read_bytes, "read_unknown": r.read_unknown,
            "cache_state": r.state, "failed": r.failed, "error_type": r.error_type,
            "recorded_cache_state": r.cache_state, "resident_ratio": r.resident_ratio,
            "thread_id": r.thread_id, "offset_s": _s(r.start_ns - origin),
            # Small files folded into this one row (patches/_folded_files.py): how many, and their verdicts.
            "files": r.files, "folded": r.folded, "file_states": dict(r.file_states) if r.folded else None}


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
        "dominant_phase": b.dominant.phase if b.dominant else None,  # None: no phase dominates
        "largest_phase": b.largest.phase if b.largest else None,
        "graph_captures": b.graph_captures,
        "cold_shards": [r.name if r.folded else r.path for r in b.cold_shards],
        "after_ready_spans": b.after_ready,
        "resource": {k: _plain(v) for k, v in sorted(b.root.resource.items())},
        "phases": [
            {"phase": p.phase, "busy_s": _s(p.busy_ns), "share": p.share_of(total), "bytes": p.bytes,
             "throughput_bytes_per_s": p.throughput, "throughput_above_link_bound": p.above_bound,
             "spans": p.spans}
            for p in b.phases
        ],
        "shards": [_shard(r, b.root.start_ns) for r in b.shards] if len(b.shards) <= PRETTY_LIMIT else ShardRows(b),
        "gaps": [
            {"offset_s": _s(g.start_ns - b.root.start_ns), "duration_s": _s(g.duration_ns),
             "after": g.after, "before": g.before}
            for g in sorted(b.gaps, key=lambda g: -g.duration_ns)[:10]
        ],
        "lazy_weights": [_lazy(item) for item in lazy_files(b)],
        "first_request": first_request_document(b),  # None: no first request in the trace
        "downloads": downloads_to_dict(downloads(b), b.root.start_ns),
        "context": [
            {"name": c.name, "service": c.service, "offset_s": _s(c.start_ns - b.root.start_ns),
             "duration_s": _s(c.duration_ns), "phases_inside": list(c.phases_inside),
             "encloses_startup": c.encloses_root}
            for c in b.context
        ],
        **explain_document(b),  # "imports", "compile", "captures"
        **own_cost_document(b),  # "own_cost_s" and its parts: the plugin's own time, apart
    }


def _lazy(item) -> dict:
    seen = item.first_use
    return {"path": item.path, "size_bytes": item.size, "unread_at_ready_bytes": item.unread_bytes,
            "read_rate_bytes_per_s": item.rate, "read_rate_basis": item.rate_basis,
            "first_use": None if seen is None else {
                "bytes": seen.bytes, "unread_bytes": seen.unread_bytes, "first_s": seen.first_s,
                "last_s": seen.last_s, "followed_s": seen.followed_s, "bound_s": seen.bound_s, "end": seen.end}}


def finding_to_dict(f: Finding) -> dict:
    return {"rule": f.rule, "title": f.title, "evidence": list(f.evidence), "lever": f.lever,
            "saving_s": _s(f.saving_ns), "saving_basis": f.estimate,
            "saving_of": "first_requests" if f.saves_first_requests else "startup", "share": round(f.share, 4),
            "trace_id": f.trace_id, "rank": f.rank, "phase": f.phase}


def analysis_document(report: Report) -> dict:
    floor = report.floor
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "sources": list(report.sources),
        "skipped": list(report.skipped),
        "storage_floor": None if floor is None else {
            "source": floor.source, "cold_bytes_per_s": floor.cold_bytes_per_s,
            "warm_bytes_per_s": floor.warm_bytes_per_s},
        "startups": [startup_to_dict(b) for b in report.startups],
        "findings": [finding_to_dict(f) for f in report.findings],
    }
    if report.budget is not None:
        doc["budget"] = {"limits_s": {k: v / 1e9 for k, v in sorted(report.budget.limits_ns.items())},
                         "exceeded": [{"trace_id": v.trace_id, "rank": v.rank, "key": v.key,
                                       "limit_s": v.limit_ns / 1e9, "actual_s": v.actual_ns / 1e9}
                                      for v in report.budget.exceeded]}
    return doc


PRETTY_LIMIT = 2000  # shards beyond which the document is written compact (C encoder, 5x faster)


def render_json(report: Report, out: TextIO) -> None:
    write_json(analysis_document(report), out)


def write_json(doc: dict, out: TextIO) -> None:
    """A JSON document, indented unless it holds more than PRETTY_LIMIT shards (then compact
    and streamed: each shard encoded as it is written)."""
    shards = sum(len(s["shards"]) for s in doc.get("startups", ()))
    if shards <= PRETTY_LIMIT:
        json.dump(doc, out, indent=2, allow_nan=False, default=str)
    else:  # compact and streamed: each shard encoded by a C encoder as it is written
        try:
            import msgspec
        except ImportError:  # pragma: no cover - a dependency; the stdlib works too
            encode = lambda value: json.dumps(value, allow_nan=False, default=str)  # noqa: E731
        else:
            encoder = msgspec.json.Encoder(enc_hook=str)
            encode = lambda value: encoder.encode(value).decode()  # noqa: E731
        _stream(doc, out, encode)
    out.write("\n")


def _stream(value: Any, out: TextIO, encode) -> None:
    if isinstance(value, dict):
        out.write("{")
        for number, (key, item) in enumerate(value.items()):
            out.write(("," if number else "") + encode(str(key)) + ":")
            _stream(item, out, encode)
        out.write("}")
    elif isinstance(value, ShardRows) or (isinstance(value, list) and value and isinstance(value[0], dict)):
        out.write("[")
        batch: list = []
        first = True
        for item in value:
            if isinstance(item, dict) and not isinstance(value, ShardRows):
                if not first:
                    out.write(",")
                _stream(item, out, encode)
                first = False
                continue
            batch.append(item)
            if len(batch) == 1000:
                out.write(("" if first else ",") + encode(batch)[1:-1])
                batch, first = [], False
        if batch:
            out.write(("" if first else ",") + encode(batch)[1:-1])
        out.write("]")
    else:
        out.write(encode(value))
