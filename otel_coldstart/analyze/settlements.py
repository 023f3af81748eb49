"""Storage figures settled after a file's span ended: merged back into the span.

A checkpoint file's ``deserialize`` span ends when its read ends (a span's times are the
work's times). Pages of a mapped file can still be read from storage after that, by casts,
copies or other threads, so its storage figure is only final later: the plugin then writes
a ``coldstart.settlement`` record, a zero-length span whose parent is the file's span and
whose attributes are the settled figure (otel_coldstart/patches/_storage.py). This module
puts those attributes on the file's span and drops the records, so every reader (``analyze``,
the summary printed in-process, metrics) sees one span per file with its final figure.

While the start-up runs, the in-flight monitor writes interim settlements (still marked
``coldstart.cache.storage_read_provisional``) when a waiting file's figure grew; the final one
is written when the start-up ends. A file span still marked provisional after the merge never
got its final settlement: the process ended (was killed) first, and its figure is the one
known shortly before, a lower bound.

First-use records (``coldstart.first_use``, written after ready() by the follow-up of files
still partly on storage at ready(): otel_coldstart/first_use.py) are merged the same way: the
latest one's ``coldstart.first_use.*`` attributes go on the file's span. Pure functions over
records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .. import semconv
from .model import Span

# What a settlement record may set on its file span.
SETTLED_KEYS = (semconv.CACHE_STORAGE_READ_BYTES, semconv.CACHE_STORAGE_READ_UNKNOWN,
                semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES, semconv.CACHE_SETTLED_RESIDENT_RATIO,
                semconv.CACHE_EVIDENCE, semconv.LAZY_UNREAD_BYTES)
# What a first-use record (written after ready() while a file still partly on storage is
# followed: otel_coldstart/first_use.py) sets on its file span.
FIRST_USE_KEYS = (semconv.FIRST_USE_BYTES, semconv.FIRST_USE_UNREAD_BYTES, semconv.FIRST_USE_FIRST_S,
                  semconv.FIRST_USE_LAST_S, semconv.FIRST_USE_FOLLOWED_S, semconv.FIRST_USE_BOUND_S,
                  semconv.FIRST_USE_END)
_RECORDS = (semconv.SPAN_SETTLEMENT, semconv.SPAN_FIRST_USE)


def merge_settlements(spans: Iterable[Span]) -> list[Span]:
    """``spans`` with each settlement record and each first-use record merged into its parent
    span (of each kind, the latest one wins when there are several) and every such record
    removed. A record whose parent is not among ``spans`` is dropped (its span was lost;
    nothing to complete)."""
    spans = list(spans)
    latest: dict[tuple[str, str, str], Span] = {}
    found = False
    for span in spans:
        if span.name in _RECORDS:
            found = True
            if span.parent_id is None:
                continue
            key = (span.trace_id, span.parent_id, span.name)
            best = latest.get(key)
            if best is None or span.end_ns >= best.end_ns:
                latest[key] = span
    if not found:
        return spans
    merged: list[Span] = []
    for span in spans:
        if span.name in _RECORDS:
            continue
        settlement = latest.get((span.trace_id, span.span_id, semconv.SPAN_SETTLEMENT))
        if settlement is not None:
            span = settle(span, settlement)
        first_use = latest.get((span.trace_id, span.span_id, semconv.SPAN_FIRST_USE))
        if first_use is not None:
            span = replace(span, attributes={**span.attributes, **{k: first_use.attributes[k] for k in FIRST_USE_KEYS
                                                                   if k in first_use.attributes}})
        merged.append(span)
    return merged


def settle(span: Span, settlement: Span) -> Span:
    """The file span with the settled figure: the settlement's keys replace the span's, a
    figure the settlement does not have (an unknown figure settled into a known one, or the
    reverse) is removed, and the provisional mark goes."""
    attributes = {k: v for k, v in span.attributes.items()
                  if k != semconv.CACHE_STORAGE_READ_PROVISIONAL and k not in SETTLED_KEYS}
    for key in SETTLED_KEYS:
        if key in settlement.attributes:
            attributes[key] = settlement.attributes[key]
        elif key == semconv.CACHE_EVIDENCE and key in span.attributes:
            attributes[key] = span.attributes[key]
    if settlement.attributes.get(semconv.CACHE_STORAGE_READ_PROVISIONAL) is True:
        attributes[semconv.CACHE_STORAGE_READ_PROVISIONAL] = True  # an interim one: the final never came
    return replace(span, attributes=attributes)
