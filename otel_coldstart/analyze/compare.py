"""Compare two start-ups or two sets of start-ups (before/after a rollout): per phase, the
median busy time on each side with its spread (interquartile range), the delta and the
ratio, and a verdict: ``slower``, ``faster`` or ``within noise``.

A verdict other than noise needs both (docs/analysis.md):

- a Mann-Whitney U test (exact for small samples) with p < ALPHA: start-up samples are
  small and skewed, so a rank test, not a t-test; with 2 start-ups a side no difference
  can reach it, which is the honest answer;
- a minimum effect: the medians differ by at least MIN_EFFECT_NS and MIN_EFFECT_RATIO of
  the baseline (a significant 0.3 ms change in a 30 s start-up is not a regression).

Each side also reports its cache mix (start-ups with a cold or partial checkpoint read,
with only warm reads, without any recorded), because a cold set against a warm one
differs for that reason alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .. import semconv
from .breakdown import TOTAL, Breakdown
from .stats import iqr, mann_whitney_p

ALPHA = 0.05
MIN_EFFECT_NS = 5_000_000  # 5 ms
MIN_EFFECT_RATIO = 0.10  # 10% of the baseline median
MIN_SIDE = 5  # fewer start-ups a side than this gets a warning: little can be told apart

SLOWER, FASTER, NOISE = "slower", "faster", "within noise"


@dataclass(frozen=True)
class PhaseDelta:
    phase: str  # a phase, or "total" / "unattributed"
    a_ns: int  # medians
    b_ns: int
    a_iqr: tuple[int, int] = (0, 0)
    b_iqr: tuple[int, int] = (0, 0)
    p_value: float = 1.0
    verdict: str = NOISE

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_ns

    @property
    def ratio(self) -> float | None:
        return self.b_ns / self.a_ns if self.a_ns > 0 else None


@dataclass(frozen=True)
class CacheMix:
    cold: int  # start-ups with at least one cold or partial checkpoint read
    warm: int  # with checkpoint reads, all warm
    unknown: int  # no checkpoint read with a cache state

    def describe(self) -> str:
        parts = [f"{self.cold} cold", f"{self.warm} warm"]
        if self.unknown:
            parts.append(f"{self.unknown} without cache evidence")
        return ", ".join(parts)


@dataclass(frozen=True)
class Comparison:
    a_count: int
    b_count: int
    total: PhaseDelta
    rows: tuple[PhaseDelta, ...]  # phases and unattributed: slower first (largest delta), then the rest
    a_cache: CacheMix = CacheMix(0, 0, 0)
    b_cache: CacheMix = CacheMix(0, 0, 0)

    def slower(self) -> list[PhaseDelta]:
        return [r for r in self.rows if r.verdict == SLOWER]

    def faster(self) -> list[PhaseDelta]:
        return [r for r in self.rows if r.verdict == FASTER]

    @property
    def warnings(self) -> list[str]:
        notes = []
        if min(self.a_count, self.b_count) < MIN_SIDE:
            notes.append(f"fewer than {MIN_SIDE} start-ups on a side (A {self.a_count}, B {self.b_count}): "
                         "only large, consistent differences can show; most rows will read as noise")
        if (self.a_cache.cold > 0) != (self.b_cache.cold > 0) or (
                self.a_count and self.b_count and
                abs(self.a_cache.cold / self.a_count - self.b_cache.cold / self.b_count) >= 0.5):
            notes.append(f"the sides differ in cache state (A: {self.a_cache.describe()}; "
                         f"B: {self.b_cache.describe()}): deserialize differences may be the page cache, not the code")
        return notes


def _median(values: Sequence[int]) -> int:
    return int(statistics.median(values)) if values else 0


def cache_mix(side: Sequence[Breakdown]) -> CacheMix:
    verdicts = [b.cache for b in side]
    cold, warm = verdicts.count(semconv.CACHE_COLD), verdicts.count(semconv.CACHE_WARM)
    return CacheMix(cold, warm, len(verdicts) - cold - warm)


def delta(key: str, a_values: Sequence[int], b_values: Sequence[int]) -> PhaseDelta:
    # Sorted once: the median and the quartiles sort them again, and a sorted list sorts in
    # one pass (a fleet's sides are thousands of start-ups, a side sorted 3 times a phase).
    a_values, b_values = sorted(a_values), sorted(b_values)
    a_med, b_med = _median(a_values), _median(b_values)
    p = mann_whitney_p(a_values, b_values)
    effect = abs(b_med - a_med)
    big_enough = effect >= MIN_EFFECT_NS and effect >= MIN_EFFECT_RATIO * max(a_med, 1)
    verdict = NOISE
    if p < ALPHA and big_enough:
        verdict = SLOWER if b_med > a_med else FASTER
    a_q, b_q = iqr(a_values), iqr(b_values)
    return PhaseDelta(key, a_med, b_med, (int(a_q[0]), int(a_q[1])), (int(b_q[0]), int(b_q[1])), p, verdict)


_ORDER = {SLOWER: 0, FASTER: 1, NOISE: 2}


def compare(a: Sequence[Breakdown], b: Sequence[Breakdown]) -> Comparison:
    if not a or not b:
        raise ValueError("compare needs at least one start-up on each side")
    phases = sorted({p.phase for side in (a, b) for item in side for p in item.phases})
    rows = [delta(key, [x.time_of(key) for x in a], [x.time_of(key) for x in b])
            for key in phases + [semconv.UNATTRIBUTED]]
    rows.sort(key=lambda r: (_ORDER[r.verdict], -abs(r.delta_ns), r.phase))
    total = delta(TOTAL, [x.duration_ns for x in a], [x.duration_ns for x in b])
    return Comparison(len(a), len(b), total, tuple(rows), cache_mix(a), cache_mix(b))
