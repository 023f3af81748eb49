"""Convert an OTLP JSON (Lines) trace into Jaeger query-API JSON the way Jaeger does it.

Made to produce ``demo-cold-first-shard.jaeger.json`` from ``demo-cold-first-shard.otlp.jsonl``:

    python tests/data/traces/otlp_to_jaeger.py tests/data/traces/demo-cold-first-shard.otlp.jsonl \
        > tests/data/traces/demo-cold-first-shard.jaeger.json

Follows Jaeger's OTLP -> model translation: microsecond startTime/duration (nanoseconds
truncated, as Jaeger stores them), a CHILD_OF reference for the parent, typed tags
(int64, float64, bool, string), the resource as the process with ``service.name`` as
``serviceName``, ``span.kind`` and ``otel.scope.name`` as tags. An array value (the
Collector's ``pkg/translator/jaeger`` has no list tag type) becomes a string tag holding
``Value.AsString()``: the JSON text of its elements as Go's encoding/json writes them,
``["torch","numpy"]``, ``[1,2,4]``, ``[0.5,1]`` (collector_values.py). Deliberately
independent of otel_coldstart's readers, so the round trip tests them.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_values import as_string, otlp_spans  # noqa: E402

KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _tag(key: str, value: dict) -> dict:
    if "stringValue" in value:
        return {"key": key, "type": "string", "value": value["stringValue"]}
    if "boolValue" in value:
        return {"key": key, "type": "bool", "value": bool(value["boolValue"])}
    if "intValue" in value:
        number = int(value["intValue"])
        # Jaeger writes int64 beyond 2^53 as a JSON string
        return {"key": key, "type": "int64", "value": number if abs(number) < 2**53 else str(number)}
    if "doubleValue" in value:
        return {"key": key, "type": "float64", "value": float(value["doubleValue"])}
    if "arrayValue" in value:
        return {"key": key, "type": "string", "value": as_string(value)}
    return {"key": key, "type": "string", "value": json.dumps(value)}


def convert(lines: list[str]) -> dict:
    traces: dict[str, dict] = {}
    for service, attrs, scope, span in otlp_spans(lines):
        process = {"serviceName": service,
                   "tags": [_tag(a["key"], a["value"]) for a in attrs if a["key"] != "service.name"]}
        trace = traces.setdefault(span["traceId"], {"traceID": span["traceId"], "spans": [],
                                                    "processes": {}, "warnings": None})
        process_id = f"p{len(trace['processes']) + 1}"
        for key, existing in trace["processes"].items():
            if existing == process:
                process_id = key
        trace["processes"][process_id] = process
        start = int(span["startTimeUnixNano"])
        end = int(span["endTimeUnixNano"])
        tags = [_tag(a["key"], a["value"]) for a in span.get("attributes", [])]
        tags.append({"key": "span.kind", "type": "string", "value": KINDS.get(span.get("kind"), "internal")})
        if scope:
            tags.append({"key": "otel.scope.name", "type": "string", "value": scope})
        refs = []
        if span.get("parentSpanId"):
            refs.append({"refType": "CHILD_OF", "traceID": span["traceId"], "spanID": span["parentSpanId"]})
        trace["spans"].append({
            "traceID": span["traceId"], "spanID": span["spanId"], "operationName": span["name"],
            "references": refs, "startTime": start // 1000, "duration": end // 1000 - start // 1000,
            "tags": tags, "logs": [], "processID": process_id, "warnings": None,
        })
    return {"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}

if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        json.dump(convert(handle.readlines()), sys.stdout, indent=2)
    sys.stdout.write("\n")
