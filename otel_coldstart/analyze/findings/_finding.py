"""The record every rule returns, and the words that scale with a finding's weight."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..breakdown import Breakdown

# A claim: the pieces of start-up time a lever would save, each piece naming the
# resources its time comes from (("phase", "deserialize"), ("shard", "<path>@<start>"),
# ("unattributed",), ("startup",)). The ranking (findings/__init__.py) lets every second
# of a resource count toward one lever only.
Claim = tuple[tuple[tuple, ...], int]


@dataclass(frozen=True)
class Finding:
    rule: str  # the rule's module name, stable for machines (docs/analysis.md)
    title: str  # one line: what is wrong, worded by its share of the start-up (see weight())
    evidence: tuple[str, ...]  # the numbers from the trace that show it
    lever: str  # what to change
    saving_ns: int  # estimated start-up time the lever could save (0: not estimated)
    trace_id: str
    rank: int | None = None
    phase: str | None = None
    share: float = 0.0  # the time this finding is about, as a share of the start-up
    estimate: str = ""  # how saving_ns was estimated, or why it was not
    # The saving is time the first requests after ready() would not pay (lazy_weights), not
    # start-up time: the lever moves it before ready(), where it may overlap other work.
    saves_first_requests: bool = False
    claims: tuple[Claim, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def about(cls, breakdown: Breakdown, **fields) -> Finding:
        fields.setdefault("rank", breakdown.rank)
        fields["saving_ns"] = max(0, int(fields["saving_ns"]))
        fields["evidence"] = tuple(fields["evidence"])
        fields["claims"] = tuple((tuple(keys), max(0, int(ns))) for keys, ns in fields.get("claims", ()))
        return cls(trace_id=breakdown.trace_id, **fields)


MAJOR_SHARE = 0.3  # a "bottleneck": at least this share of the start-up
NOTABLE_SHARE = 0.1


def weight(share: float) -> str:
    """How strongly a title may speak: 'bottleneck' only for a large share of the start-up."""
    if share >= MAJOR_SHARE:
        return "major"
    if share >= NOTABLE_SHARE:
        return "notable"
    return "minor"


def share_text(time_ns: int, total_ns: int) -> str:
    share = time_ns / total_ns if total_ns > 0 else 0.0
    return f"{share * 100:.0f}% of the start-up" if share >= 0.01 else "under 1% of the start-up"


def key(b: Breakdown, *resource) -> tuple:
    """A claim key: key(b, "phase", "h2d"), key(b, "shard", path, start_ns), key(b, "unattributed")."""
    return (b.trace_id, b.root.span_id) + tuple(resource)


def claim(b: Breakdown, ns: int, *resources: tuple) -> Claim:
    """``ns`` of start-up ``b``'s time, taken from each of ``resources`` and from the start-up
    itself (so no ranking ever counts more than the whole start-up)."""
    return ((key(b, "startup"),) + tuple(key(b, *r) for r in resources), ns)


def shard_resource(shard) -> tuple:
    return ("shard", shard.path or "", shard.start_ns)


def split(total_ns: int, weights: list[int]) -> list[int]:
    """``total_ns`` in pieces proportional to ``weights`` that add up to it exactly (a claim
    that lost a nanosecond to rounding would read as counted by another finding)."""
    weight_sum = sum(weights)
    if total_ns <= 0 or weight_sum <= 0:
        return [0] * len(weights)
    pieces = [total_ns * w // weight_sum for w in weights]
    pieces[-1] += total_ns - sum(pieces)
    return pieces
