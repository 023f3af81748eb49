"""Convert an OTLP JSON (Lines) trace into Zipkin v2 JSON the way the OpenTelemetry
Collector's Zipkin exporter does (``pkg/translator/zipkin/zipkinv2``, ``from_translator.go``).

    python tests/data/traces/otlp_to_zipkin.py TRACE.otlp.jsonl > TRACE.zipkin.json

A flat array of spans: ``traceId``/``id``/``parentId`` in hex, ``timestamp`` and ``duration``
in microseconds (nanoseconds truncated: ``start // 1000`` and ``(end - start) // 1000``),
``kind`` upper case (none for INTERNAL), ``localEndpoint.serviceName`` from ``service.name``,
and every other resource attribute and every span attribute as a string tag
(``Value.AsString()``: arrays as their JSON text, collector_values.py), the scope as
``otel.scope.name``, an error status as ``otel.status_code`` ``ERROR`` and ``error``
(its message, or ``true``). Deliberately independent of otel_coldstart's readers.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_values import as_string, otlp_spans  # noqa: E402

KINDS = {2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def convert(lines: list[str]) -> list[dict]:
    spans = []
    for service, attrs, scope, span in otlp_spans(lines):
        start = int(span["startTimeUnixNano"])
        end = int(span["endTimeUnixNano"])
        tags = {a["key"]: as_string(a["value"]) for a in attrs if a["key"] != "service.name"}
        tags.update({a["key"]: as_string(a["value"]) for a in span.get("attributes", [])})
        if scope:
            tags["otel.scope.name"] = scope
        status = span.get("status", {})
        if status.get("code") in (2, "STATUS_CODE_ERROR"):
            tags["otel.status_code"] = "ERROR"
            tags["error"] = status.get("message") or "true"
        zipkin = {"traceId": span["traceId"], "id": span["spanId"], "name": span["name"],
                  "timestamp": start // 1000, "duration": (end - start) // 1000,
                  "localEndpoint": {"serviceName": service}, "tags": tags}
        if span.get("parentSpanId"):
            zipkin["parentId"] = span["parentSpanId"]
        if span.get("kind") in KINDS:
            zipkin["kind"] = KINDS[span["kind"]]
        spans.append(zipkin)
    return spans

if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        json.dump(convert(handle.readlines()), sys.stdout, indent=2)
    sys.stdout.write("\n")
