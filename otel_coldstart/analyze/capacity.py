"""Capacity summary over many start-ups: p50/p95 of the start-up and of each phase, overall
and per value of a resource attribute (``host.type``, a node's instance type), and the
autoscaler lead time that implies: a new replica serves only after node provisioning plus
the p95 start-up, so scale-out must trigger that long before the load arrives.

Start-ups that did not reach ready() (killed, SIGTERMed, crashed, exited) are counted apart,
by how they ended, and left out of the percentiles unless ``include_unready``: a start-up
killed during deserialize never reached the phases after it, and would pull their
percentiles (and the lead time) down.

``until=FIRST_TOKEN`` (``capacity --until first-token``) ends each start-up at its first
token instead of ready(): the start-up to ready() plus its first request (a ``first_request``
row), without the wait for traffic between them (its own p50/p95, ``wait``: a replica that
a scale-out brings up gets its first request at ready(), so that wait is the test's, not the
start-up's). Start-ups without a first token (no first request in the trace, one that failed,
was interrupted or never ended, or no ready()) are counted apart by why, never in the
percentiles."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .. import semconv, verdicts
from .breakdown import Breakdown
from .end_reasons import end_word
from .report import Unready, split_unready
from .stats import percentile
from .units import format_seconds

DEFAULT_GROUP_KEYS = ("host.type",)
READY = "ready"
FIRST_TOKEN = "first-token"
UNTIL = (READY, FIRST_TOKEN)
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
    count: int  # start-ups in the group, ready or not
    ready: int
    total: Quantiles | None  # None: no start-up counted (none reached ready())
    phases: dict[str, Quantiles]  # phases present in the counted start-ups, missing counts as 0
    unready: Unready = Unready()  # start-ups that did not reach ready(), by end reason
    counted: int = 0  # start-ups the percentiles are made of (the ready ones, or all)
    until: str = READY  # where each start-up ends: ready() or its first token (FIRST_TOKEN)
    wait: Quantiles | None = None  # FIRST_TOKEN: ready() to the first request, left out of the total

    @property
    def p95_caveat(self) -> str | None:
        if self.counted >= MIN_FOR_P95 or not self.counted:
            return None
        return (f"p95 of {self.counted} start-up(s): fewer than {MIN_FOR_P95}, so it is close to the slowest "
                "seen, not a percentile")

    @property
    def dominant_phase(self) -> str | None:
        """The phase whose p50 is the largest, when it dominates the p50 start-up: the one
        rule (verdicts.dominant_phase) over the medians; None when none does."""
        if self.total is None:
            return None
        top = verdicts.dominant_phase((_Median(name, q.p50_ns) for name, q in self.phases.items()),
                                      self.total.p50_ns)
        return top.phase if top is not None else None

    def lead_time_ns(self, provisioning_ns: int = 0) -> int | None:
        return None if self.total is None else provisioning_ns + self.total.p95_ns

    def warm_pool(self, ramp_per_min: float, provisioning_ns: int = 0) -> WarmPool:
        """For a group with a total (the renderers ask no other)."""
        if self.total is None:
            raise ValueError(f"no warm pool for {self.key}={self.value}: no start-up of it has a total")
        return WarmPool(ramp_per_min, provisioning_ns + self.total.p95_ns, provisioning_ns, self.total.p95_ns,
                        "p95 to the first token" if self.until == FIRST_TOKEN else "p95 start-up")


@dataclass(frozen=True)
class WarmPool:
    """Replicas to keep warm so that a demand ramp is served while a scale-out is still
    starting: for the lead time (provisioning + p95 start-up) no new replica serves, and the
    demand grows by ramp x lead time meanwhile."""

    ramp_per_min: float
    lead_time_ns: int
    provisioning_ns: int
    p95_ns: int
    p95_of: str = "p95 start-up"  # what the p95 is of (FIRST_TOKEN: to the first token)

    @property
    def exact(self) -> float:
        return self.ramp_per_min * self.lead_time_ns / 60e9

    @property
    def replicas(self) -> int:
        return math.ceil(round(self.exact, 9))  # 3.0000000001 from float noise is 3

    def arithmetic(self) -> str:
        return (f"{self.ramp_per_min:g} replicas/min x ({format_seconds(self.provisioning_ns)} provisioning + "
                f"{format_seconds(self.p95_ns)} {self.p95_of}) / 60 s = {self.exact:.2f} -> {self.replicas} "
                "warm replica(s)")


class _Median(NamedTuple):
    phase: str
    busy_ns: int


def _quantiles(values: Sequence[int]) -> Quantiles:
    values = sorted(values)  # once: each percentile sorts them again, a sorted list in one pass
    return Quantiles(int(percentile(values, 0.5)), int(percentile(values, 0.95)), values[-1])


def _phase_quantiles(counted: Sequence[Breakdown]) -> dict[str, Quantiles]:
    """Each phase's busy time over the start-ups (0 in one without it), and the unattributed time.

    One column of busy times a phase, filled in one pass over the start-ups (a phase named
    twice in one start-up: the later figure, as a dict of it would keep): a fleet's 100,000
    start-ups made a dict each, per group, before (0.8 s of a 2 s summary)."""
    columns: dict[str, list[int]] = {}
    size = len(counted)
    for index, b in enumerate(counted):
        for p in b.phases:
            column = columns.get(p.phase)
            if column is None:
                column = columns[p.phase] = [0] * size
            column[index] = p.busy_ns
    phases = {name: _quantiles(columns[name]) for name in sorted(columns)}
    phases[semconv.UNATTRIBUTED] = _quantiles([b.unattributed_ns for b in counted])
    return phases


def summarize_group(key: str, value: str, results: Sequence[Breakdown],
                    include_unready: bool = False, until: str = READY) -> GroupSummary:
    if until == FIRST_TOKEN:
        return _summarize_to_first_token(key, value, results)
    counted, unready = split_unready(results, include_unready)
    phases = _phase_quantiles(counted) if counted else {}
    total = _quantiles([b.duration_ns for b in counted]) if counted else None
    return GroupSummary(key, value, len(results), len(results) - unready.count, total, phases, unready,
                        len(counted))


def no_first_token_reason(b: Breakdown) -> str | None:
    """Why a start-up has no first token, in a few words; None when it has one."""
    from .first_request import OK

    if not b.ready:
        return end_word(b)
    request = b.first_request
    if request is None:
        return "no first request"
    if request.status != OK:
        return f"first request {request.status}"
    return None


def _summarize_to_first_token(key: str, value: str, results: Sequence[Breakdown]) -> GroupSummary:
    counted = [b for b in results if no_first_token_reason(b) is None]
    reasons = Counter(r for r in (no_first_token_reason(b) for b in results) if r is not None)
    apart = Unready(sum(reasons.values()), tuple(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))))
    phases, total, wait = {}, None, None
    # Each counted start-up has a first request that ended well: its figures are all there.
    requests = [r for b in counted if (r := b.first_request) is not None]
    if counted:
        phases = _phase_quantiles(counted)
        phases[semconv.PHASE_FIRST_REQUEST] = _quantiles([ns for r in requests if (ns := r.duration_ns) is not None])
        total = _quantiles([ns for r in requests if (ns := r.serving_ns) is not None])
        wait = _quantiles([r.after_ready_ns for r in requests])
    return GroupSummary(key, value, len(results), sum(1 for b in results if b.ready), total, phases, apart,
                        len(counted), FIRST_TOKEN, wait)


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


def capacity_summary(results: Sequence[Breakdown], keys: Sequence[str] = DEFAULT_GROUP_KEYS,
                     include_unready: bool = False, until: str = READY) -> list[GroupSummary]:
    """The summary of all start-ups first, then one per (key, value), slowest p95 first
    (groups with no start-up counted last)."""
    if not results:
        raise ValueError("no start-ups to summarise")
    summaries = [summarize_group("", "all", results, include_unready, until)]
    for key in keys:
        groups: dict[str, list[Breakdown]] = defaultdict(list)
        for b in results:
            groups[resource_value(b, key)].append(b)
        per_key = [summarize_group(key, value, group, include_unready, until) for value, group in groups.items()]
        summaries.extend(sorted(per_key, key=lambda s: (s.total is None, -(s.total.p95_ns if s.total else 0),
                                                         s.value)))
    return summaries
