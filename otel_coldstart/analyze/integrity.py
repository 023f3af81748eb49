"""Repairs for traces whose parent links cannot be trusted: duplicate span ids, cycles.

Real exports contain both (Jaeger returns the same span twice; its converter's golden
file gives two different spans one id; a buggy exporter can write a parent loop). The
analysis needs a forest, so: exact copies are dropped, a different span reusing an id is
renamed ``<id>#2`` (its children stay with the first), and a parent loop is cut at the
span where it was found. Missing parents are left as they are (the breakdown treats such
spans as top level) and counted. Each repair is reported as a one-line warning.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from .model import Span


def repair(spans: Iterable[Span]) -> tuple[list[Span], list[str]]:
    unique, warnings = _dedupe(spans)
    unique, cut = _cut_cycles(unique)
    if cut:
        warnings.append(f"{cut} parent loop(s) cut (the span where each loop closed is shown as top level)")
    present = {(s.trace_id, s.span_id) for s in unique}
    missing = sum(1 for s in unique if s.parent_id is not None and (s.trace_id, s.parent_id) not in present)
    if missing:
        warnings.append(f"{missing} span(s) point at a parent that is not in the input")
    return unique, warnings


def _dedupe(spans: Iterable[Span]) -> tuple[list[Span], list[str]]:
    seen: dict[tuple[str, str], Span] = {}
    result: list[Span] = []
    copies = renamed = 0
    for span in spans:
        key = (span.trace_id, span.span_id)
        first = seen.get(key)
        if first is None:
            seen[key] = span
            result.append(span)
        elif first == span:
            copies += 1
        else:
            suffix = 2
            while (span.trace_id, f"{span.span_id}#{suffix}") in seen:
                suffix += 1
            span = dataclasses.replace(span, span_id=f"{span.span_id}#{suffix}")
            seen[(span.trace_id, span.span_id)] = span
            result.append(span)
            renamed += 1
    warnings = []
    if copies:
        warnings.append(f"{copies} duplicate span copie(s) dropped")
    if renamed:
        warnings.append(f"{renamed} span(s) reuse another span's id; renamed <id>#N")
    return result, warnings


def _cut_cycles(spans: list[Span]) -> tuple[list[Span], int]:
    """Iterative walk up parent links; a span is cut when its chain returns to itself."""
    index = {(s.trace_id, s.span_id): i for i, s in enumerate(spans)}
    state = [0] * len(spans)  # 0 unseen, 1 on the current path, 2 done
    cut = 0
    for start in range(len(spans)):
        path = []
        i = start
        while i is not None and state[i] == 0:
            state[i] = 1
            path.append(i)
            span = spans[i]
            parent = index.get((span.trace_id, span.parent_id)) if span.parent_id else None
            if parent is not None and state[parent] == 1:
                spans[i] = dataclasses.replace(span, parent_id=None)
                cut += 1
                parent = None
            i = parent
        for j in path:
            state[j] = 2
    return spans, cut
