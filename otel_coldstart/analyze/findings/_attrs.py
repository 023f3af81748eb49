"""Typed reads of span attributes for the rules (a wrong type reads as absent)."""

from __future__ import annotations

from typing import Iterable

from ..model import Span


def int_attr(span: Span, key: str) -> int:
    value = span.attributes.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def total(spans: Iterable[Span], key: str) -> int:
    return sum(int_attr(s, key) for s in spans)
