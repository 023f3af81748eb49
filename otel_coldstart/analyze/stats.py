"""Percentiles for small samples (linear interpolation between closest ranks, as
numpy's default and Prometheus' histogram_quantile within a bucket)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from itertools import repeat


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def iqr(values: Sequence[float]) -> tuple[float, float]:
    """The 25th and 75th percentiles (the spread compare shows beside each median)."""
    return percentile(values, 0.25), percentile(values, 0.75)


EXACT_LIMIT = 30  # per side: the exact U distribution is cheap up to here


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test: could A and B come from the same
    distribution? Exact (the distribution of U enumerated) for small samples without ties,
    the normal approximation with a tie correction otherwise. Pure Python: no scipy.

    Start-up samples are small (3-20 a side) and skewed (a cold start is 3x a warm one), so
    a rank test fits where a t-test would not."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 1.0
    # A value's rank in the pooled sample is the count of values below it plus the middle of
    # its tie group (1 + size) / 2; summed over A, in C (bisection in the sorted pool, a
    # count per value), not by walking the pooled (value, side) pairs one by one in Python:
    # that was 0.1-0.15 s of a fleet's compare (10,000 start-ups, 10 phases). The integer sums
    # are exact, so the p-values are the same.
    pooled = sorted([*a, *b])
    group_sizes = Counter(pooled)
    below = sum(map(bisect_left, repeat(pooled), a))
    rank_sum_a = below + (sum(map(group_sizes.__getitem__, a)) + n) / 2
    ties = len(group_sizes) < n + m
    tie_term = float(sum(t ** 3 - t for t in group_sizes.values() if t > 1)) if ties else 0.0
    u = rank_sum_a - n * (n + 1) / 2
    if not ties and n <= EXACT_LIMIT and m <= EXACT_LIMIT:
        counts = _u_distribution(n, m)
        total = sum(counts)
        low = min(u, n * m - u)
        tail = sum(counts[: int(low) + 1]) / total
        return min(1.0, 2 * tail)
    mean = n * m / 2
    variance = n * m / 12 * ((n + m + 1) - tie_term / ((n + m) * (n + m - 1)))
    if variance <= 0:
        return 1.0
    z = (abs(u - mean) - 0.5) / math.sqrt(variance)  # continuity correction
    return min(1.0, math.erfc(max(0.0, z) / math.sqrt(2)))


def _u_distribution(n: int, m: int) -> list[int]:
    """counts[u]: the number of orderings of n A's and m B's with U == u (A above B)."""
    # f[j][u] for the current i, built up one A at a time (the classic recurrence
    # f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u)).
    previous = [[1] + [0] * (n * m) for _ in range(m + 1)]  # i = 0: U is 0
    for i in range(1, n + 1):
        current = [[0] * (n * m + 1) for _ in range(m + 1)]
        current[0][0] = 1
        for j in range(1, m + 1):
            row, left, up = current[j], current[j - 1], previous[j]
            for u in range(i * j + 1):
                row[u] = left[u] + (up[u - j] if u >= j else 0)
        previous = current
    return previous[m]
