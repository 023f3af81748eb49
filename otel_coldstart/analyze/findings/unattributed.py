"""Unattributed time dominating: the start-up spent most of its time outside any phase.
Says where (the longest gap, between which phases) and what to call it: the longest span
that is not ours inside that gap gives the name for ``otel_coldstart.phase(...)``.

Estimate: the unattributed time (what becomes actionable once it has a name).
"""

from __future__ import annotations

import re

from ... import semconv
from ..breakdown import Breakdown
from ..units import format_seconds
from ._finding import Finding, claim

MIN_SHARE = 0.3


def suggest_phase_name(span_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", span_name.lower()).strip("_")
    return slug[:40] or "setup"


def check(breakdown: Breakdown, floor=None) -> list[Finding]:
    total = breakdown.duration_ns
    if total <= 0 or breakdown.unattributed_ns < total * MIN_SHARE:
        return []
    evidence = [f"{format_seconds(breakdown.unattributed_ns)} of {format_seconds(total)} "
                f"({breakdown.unattributed_ns / total * 100:.0f}%) is in no phase"]
    name = "setup"
    gap = max(breakdown.gaps, key=lambda g: g.duration_ns, default=None)
    if gap is not None:
        where = (f"between {gap.after} and {gap.before}" if gap.after and gap.before
                 else f"after {gap.after}" if gap.after else f"before {gap.before}" if gap.before
                 else "the whole start-up")
        evidence.append(f"longest gap: {format_seconds(gap.duration_ns)} {where}, "
                        f"at +{format_seconds(gap.start_ns - breakdown.root.start_ns)}")
        inside = [c for c in breakdown.context if not c.encloses_root
                  and c.start_ns < gap.end_ns and c.end_ns > gap.start_ns]
        if inside:
            biggest = max(inside, key=lambda c: min(c.end_ns, gap.end_ns) - max(c.start_ns, gap.start_ns))
            evidence.append(f"span {biggest.name!r} ({format_seconds(biggest.duration_ns)}) runs in it")
            name = suggest_phase_name(biggest.name)
        elif gap.before:
            name = "before_" + suggest_phase_name(gap.before.split(".")[-1])
    return [Finding.about(
        breakdown, rule=semconv.UNATTRIBUTED,
        title=f"{breakdown.unattributed_ns / total * 100:.0f}% of the start-up is unattributed",
        evidence=evidence,
        lever=f"wrap that step in `with otel_coldstart.phase({name!r}):` so the next trace names it",
        saving_ns=breakdown.unattributed_ns, share=breakdown.unattributed_ns / total,
        claims=[claim(breakdown, breakdown.unattributed_ns, (semconv.UNATTRIBUTED,))],
        estimate="the unattributed time (what becomes actionable once it has a name)",
    )]
