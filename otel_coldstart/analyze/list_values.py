"""List attributes back from Jaeger's and Zipkin's JSON text (issue 39 item 9).

Neither Jaeger's tags nor Zipkin's have a list type. The OpenTelemetry Collector's
translators (pkg/translator/jaeger, pkg/translator/zipkin/zipkinv2) write an array value as
``Value.AsString()``: the JSON text of its elements, ``["torch","numpy"]``, ``[1,2,4]``,
``[0.589,0.19]`` (Go's encoding writes the double 1.0 as ``1``). Kept as a string, the imports'
packages and heaviest modules, the graph capture sizes and their times were gone from a trace
fetched from Jaeger, and ``whatif --lever fewer-captures`` had nothing to work from.

The rule: only the attributes otel-coldstart's conventions define as lists
(``semconv.LIST_ATTRIBUTES``) are parsed, and only when the text is a JSON array whose every
element is of the attribute's element type; they become the tuple the OTLP reader gives
(doubles as floats, ints as int64). Any other attribute is left as written, so a user's
string that happens to look like a JSON list (``'["a","b"]'`` in ``http.route``) is never
changed, and a list attribute whose text is not such an array stays the string it was.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .. import semconv
from ._values import INT64_MAX, INT64_MIN

MAX_LIST_TEXT = 1 << 20  # longer than any list we write (10 names, 10 times; sizes): parsed no further


def _element(kind: str, value: Any) -> Any:
    """``value`` as an element of a ``kind`` list, or raise ValueError."""
    if kind == "string" and isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise ValueError
    if kind == "int" and isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        return value
    if kind == "int" and isinstance(value, float) and value.is_integer() and math.isfinite(value):
        return int(value)  # 1e3 is the integer 1000, as the protobuf JSON mapping allows
    if kind == "double" and isinstance(value, (int, float)):
        number = float(value)
        if math.isfinite(number):
            return number
    raise ValueError


def list_from_text(key: str, value: Any) -> Any:
    """``value`` as the tuple an OTLP reader would give, where ``key`` is a list attribute of
    ours and ``value`` is its JSON text; anything else unchanged."""
    kind = semconv.LIST_ATTRIBUTES.get(key)
    if kind is None or not isinstance(value, str) or len(value) > MAX_LIST_TEXT:
        return value
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return value
    try:
        items = json.loads(text, parse_constant=_refuse)  # NaN/Infinity are not JSON: refused
        if not isinstance(items, list):
            return value
        return tuple(_element(kind, item) for item in items)
    except (ValueError, RecursionError):
        return value


def _refuse(name: str):
    raise ValueError(name)


def lists_from_text(attributes: dict) -> dict:
    """``attributes`` (a reader's dict, changed in place and returned) with each list
    attribute of ours that arrived as JSON text given back as a tuple."""
    for key in semconv.LIST_ATTRIBUTES:
        if key in attributes:
            attributes[key] = list_from_text(key, attributes[key])
    return attributes
