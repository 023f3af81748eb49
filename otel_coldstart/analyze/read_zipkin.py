"""Zipkin v2 JSON (a flat array of spans) into :class:`Span` records.

Quirks handled: microsecond times; missing ``duration`` (incomplete spans become instants);
every tag is a string (numbers and booleans are given their type back, our list attributes
their list: analyze/list_values.py); and the shared
CLIENT/SERVER pair, two copies of one span id with the same ``parentId``: the client copy
is re-identified as ``<id>.client`` and the server copy nests under it, so the hop shows;
the resource's attributes, written as tags of every span, are taken back into the resource.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import semconv
from ._values import TraceReadError, as_dict, coerce_string, duration_ns, failure_type, hex_id, unix_ns
from .list_values import lists_from_text
from .model import Span


def is_zipkin(doc: Any) -> bool:
    return isinstance(doc, list) and all(
        isinstance(s, dict) and "traceId" in s and "id" in s for s in doc[:3]) and bool(doc)


def spans_from_zipkin(doc: list) -> Iterator[Span]:
    shared_ids = {hex_id(s.get("id"), 16) for s in doc if isinstance(s, dict) and s.get("shared")}
    for raw in doc:
        if not isinstance(raw, dict):
            raise TraceReadError("Zipkin document: a span is not an object")
        yield _span(raw, shared_ids)


def _span(raw: dict, shared_ids: set) -> Span:
    span_id = hex_id(raw.get("id"), 16)
    if not span_id:
        raise TraceReadError("Zipkin span without an id")
    parent = hex_id(raw.get("parentId"), 16) if raw.get("parentId") else None
    if span_id in shared_ids:
        if raw.get("shared"):
            parent = span_id + ".client"
        else:
            span_id = span_id + ".client"
    start = unix_ns(raw.get("timestamp", 0), f"span {span_id} timestamp", 1000)
    length = duration_ns(raw.get("duration"), f"span {span_id} duration", 1000)
    attrs = lists_from_text({k: coerce_string(v) if isinstance(v, str) else None
                             for k, v in as_dict(raw.get("tags")).items() if isinstance(k, str)})  # v2 tags are strings
    if raw.get("kind"):
        attrs.setdefault("span.kind", str(raw["kind"]).lower())
    if "error" in attrs:  # Zipkin's failure: an "error" tag holding the message
        message = raw["tags"].get("error")
        kind = failure_type(attrs.get(semconv.ERROR_TYPE), None, message if message not in ("true", "") else None)
        if kind is not None:
            attrs[semconv.ERROR_TYPE] = kind
    service = as_dict(raw.get("localEndpoint")).get("serviceName")
    resource = _resource_from_tags(attrs)
    if isinstance(service, str):
        resource["service.name"] = service
    return Span(
        trace_id=hex_id(raw.get("traceId"), 32),
        span_id=span_id,
        parent_id=parent,
        name=str(raw.get("name") or ""),
        start_ns=start,
        end_ns=min(start + length, 2**63 - 1),
        attributes=attrs,
        resource=resource,
        status="error" if "error" in attrs else "unset",
    )


# Zipkin has no resource: the Collector's Zipkin exporter writes the resource's attributes as
# tags of every span, and its Zipkin receiver moves the tags named by the resource semantic
# conventions back into the resource. So do we, for the namespaces a start-up's resource
# uses (the SDK's, the host's and process's, Kubernetes', vLLM's, our model name), so that
# `host.name` or `process.pid` read the same as from OTLP.
RESOURCE_PREFIXES = ("service.", "telemetry.", "host.", "process.", "os.", "container.", "k8s.", "cloud.",
                     "deployment.", "faas.", "device.", "vllm.")
RESOURCE_KEYS = frozenset({semconv.MODEL_NAME})
# Attributes of ours in those namespaces that are on spans: the launch span's (cli/run.py) and
# the root's entry point.
SPAN_KEYS = frozenset({"process.command_args", "process.executable.name", semconv.PROCESS_COMMAND})


def _resource_from_tags(attrs: dict) -> dict:
    """The resource attributes among ``attrs``, taken out of them."""
    keys = [k for k in attrs if (k.startswith(RESOURCE_PREFIXES) or k in RESOURCE_KEYS) and k not in SPAN_KEYS]
    return {k: attrs.pop(k) for k in keys}
