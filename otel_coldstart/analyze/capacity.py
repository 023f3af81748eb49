"""Capacity summary over many start-ups: p50/p95 of the start-up and of each phase, overall
and per value of a resource attribute (``host.type``, a node's instance type), and the
autoscaler lead time that implies: a new replica serves only after node provisioning plus
the p95 start-up, so scale-out must trigger that long before the load arrives."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from .. import semconv, verdicts
from .breakdown import Breakdown
from .stats import percentile
from .units import format_seconds

DEFAULT_GROUP_KEYS = ("host.type",)
UNKNOWN = "(not set)"
MIN_FOR_P95 = 20  # below this many start-ups a p95 is the slowest one or two, not a percentile


@dataclass(frozen=True)
class Quantiles:
    p50_ns: int
    p95_ns: int
    max_ns: int


@dataclass(frozen=True)
class GroupSummary:
    key: str  # the resource attribute grouped by, or "" for all start-ups
    value: str
    count: int
    ready: int
    total: Quantiles
    phases: dict[str, Quantiles]  # phases present in the group, missing counts as 0

    @property
    def p95_caveat(self) -> str | None:
        if self.count >= MIN_FOR_P95:
            return None
        return (f"p95 of {self.count} start-up(s): fewer than {MIN_FOR_P95}, so it is close to the slowest "
                "seen, not a percentile")

    @property
    def dominant_phase(self) -> str | None:
        """The phase whose p50 is the largest, when it dominates the p50 start-up: the one
        rule (verdicts.dominant_phase) over the medians; None when none does."""
        top = verdicts.dominant_phase((_Median(name, q.p50_ns) for name, q in self.phases.items()),
                                      self.total.p50_ns)
        return top.phase if top is not None else None

    def lead_time_ns(self, provisioning_ns: int = 0) -> int:
        return provisioning_ns + self.total.p95_ns

    def warm_pool(self, ramp_per_min: float, provisioning_ns: int = 0) -> "WarmPool":
        return WarmPool(ramp_per_min, self.lead_time_ns(provisioning_ns), provisioning_ns, self.total.p95_ns)


@dataclass(frozen=True)
class WarmPool:
    """Replicas to keep warm so that a demand ramp is served while a scale-out is still
    starting: for the lead time (provisioning + p95 start-up) no new replica serves, and the
    demand grows by ramp x lead time meanwhile."""

    ramp_per_min: float
    lead_time_ns: int
    provisioning_ns: int
    p95_ns: int

    @property
    def exact(self) -> float:
        return self.ramp_per_min * self.lead_time_ns / 60e9

    @property
    def replicas(self) -> int:
        return math.ceil(round(self.exact, 9))  # 3.0000000001 from float noise is 3

    def arithmetic(self) -> str:
        return (f"{self.ramp_per_min:g} replicas/min x ({format_seconds(self.provisioning_ns)} provisioning + "
                f"{format_seconds(self.p95_ns)} p95 start-up) / 60 s = {self.exact:.2f} -> {self.replicas} "
                "warm replica(s)")


class _Median(NamedTuple):
    phase: str
    busy_ns: int


def _quantiles(values: Sequence[int]) -> Quantiles:
    return Quantiles(int(percentile(values, 0.5)), int(percentile(values, 0.95)), max(values))


def summarize_group(key: str, value: str, results: Sequence[Breakdown]) -> GroupSummary:
    names = sorted({p.phase for b in results for p in b.phases})
    phases = {}
    for name in names:
        phases[name] = _quantiles([b.phase(name).busy_ns if b.phase(name) else 0 for b in results])
    phases[semconv.UNATTRIBUTED] = _quantiles([b.unattributed_ns for b in results])
    return GroupSummary(key, value, len(results), sum(1 for b in results if b.ready),
                        _quantiles([b.duration_ns for b in results]), phases)


def resource_value(b: Breakdown, key: str) -> str:
    value = b.root.resource.get(key, b.root.attributes.get(key))
    return UNKNOWN if value is None else str(value)


def known_keys(results: Sequence[Breakdown]) -> list[str]:
    """Resource and root-span attributes that some start-up has: what --by can group by."""
    keys: set[str] = set()
    for b in results:
        keys.update(b.root.resource)
        keys.update(k for k, v in b.root.attributes.items() if isinstance(v, (str, int)) and not isinstance(v, bool))
    return sorted(keys)


def capacity_summary(results: Sequence[Breakdown],
                     keys: Sequence[str] = DEFAULT_GROUP_KEYS) -> list[GroupSummary]:
    """The summary of all start-ups first, then one per (key, value), slowest p95 first."""
    if not results:
        raise ValueError("no start-ups to summarise")
    summaries = [summarize_group("", "all", results)]
    for key in keys:
        groups: dict[str, list[Breakdown]] = defaultdict(list)
        for b in results:
            groups[resource_value(b, key)].append(b)
        per_key = [summarize_group(key, value, group) for value, group in groups.items()]
        summaries.extend(sorted(per_key, key=lambda s: (-s.total.p95_ns, s.value)))
    return summaries
