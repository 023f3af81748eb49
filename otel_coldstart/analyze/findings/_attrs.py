"""Typed reads of span attributes for the rules (a wrong type reads as absent)."""

from __future__ import annotations

from typing import Iterable

from ... import verdicts
from ..model import Span


def int_attr(span: Span, key: str) -> int:
    return verdicts.positive_int(span.attributes, key)


def total(spans: Iterable[Span], key: str) -> int:
    return sum(int_attr(s, key) for s in spans)
