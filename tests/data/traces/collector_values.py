"""OTLP attribute values as strings, the way the OpenTelemetry Collector's
``pcommon.Value.AsString()`` writes them: what its Jaeger translator puts in a string tag for
an array, and its Zipkin translator in every tag.

- string: as is; bool: ``true``/``false``; int: decimal.
- double: ``strconv.FormatFloat(v, 'f', -1, 64)``: the shortest digits, never an exponent.
- array: ``json.Marshal`` of its elements (encoding/json, via jsoniter's standard-library
  configuration): no spaces; a double as the shortest digits, ``1`` for 1.0, an exponent only
  below 1e-6 or from 1e21 (``1e-7``, exponent without a leading zero); strings with ``<``,
  ``>``, ``&`` escaped as ``\\u003c`` etc.

Deliberately independent of otel_coldstart's readers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal


def _shortest_fixed(number: float) -> str:
    text = format(Decimal(repr(number)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _json_double(number: float) -> str:
    if number != 0 and (abs(number) < 1e-6 or abs(number) >= 1e21):
        mantissa, exponent = repr(number).split("e") if "e" in repr(number) else (repr(number), "0")
        mantissa = mantissa[:-2] if mantissa.endswith(".0") else mantissa
        sign = "-" if exponent.startswith("-") else "+"
        return f"{mantissa}e{sign}{int(exponent.lstrip('+-'))}"
    return _shortest_fixed(number)


def _json(value: dict) -> str:
    if "stringValue" in value:
        text = json.dumps(value["stringValue"], ensure_ascii=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    if "boolValue" in value:
        return "true" if value["boolValue"] else "false"
    if "intValue" in value:
        return str(int(value["intValue"]))
    if "doubleValue" in value:
        return _json_double(float(value["doubleValue"]))
    if "arrayValue" in value:
        return "[" + ",".join(_json(v) for v in value["arrayValue"].get("values", [])) + "]"
    return "null"


def as_string(value: dict) -> str:
    """``value`` (an OTLP/JSON AnyValue) as ``Value.AsString()`` writes it."""
    if "stringValue" in value:
        return value["stringValue"]
    if "doubleValue" in value:
        return _shortest_fixed(float(value["doubleValue"]))
    if "arrayValue" in value or "boolValue" in value or "intValue" in value:
        return _json(value)
    return json.dumps(value)


def otlp_spans(lines: list[str]) -> Iterator[tuple[str, list, str | None, dict]]:
    """Each span of OTLP JSON Lines with what the converters take from around it: the
    service name, the resource's attributes, the scope's name."""
    for line in lines:
        if not line.strip():
            continue
        for resource_spans in json.loads(line)["resourceSpans"]:
            attrs = resource_spans.get("resource", {}).get("attributes", [])
            service = next((a["value"]["stringValue"] for a in attrs if a["key"] == "service.name"), "unknown")
            for scope_spans in resource_spans.get("scopeSpans", []):
                scope = scope_spans.get("scope", {}).get("name")
                for span in scope_spans.get("spans", []):
                    yield service, attrs, scope, span
