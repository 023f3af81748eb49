"""The record every rule returns."""

from __future__ import annotations

from dataclasses import dataclass

from ..breakdown import Breakdown


@dataclass(frozen=True)
class Finding:
    rule: str  # the rule's module name, stable for machines (docs/analysis.md)
    title: str  # one line: what is wrong
    evidence: tuple[str, ...]  # the numbers from the trace that show it
    lever: str  # what to change
    saving_ns: int  # estimated start-up time the lever could save (how: docs/analysis.md)
    trace_id: str
    rank: int | None = None
    phase: str | None = None

    @classmethod
    def about(cls, breakdown: Breakdown, **fields) -> "Finding":
        fields.setdefault("rank", breakdown.rank)
        fields["saving_ns"] = max(0, int(fields["saving_ns"]))
        fields["evidence"] = tuple(fields["evidence"])
        return cls(trace_id=breakdown.trace_id, **fields)
