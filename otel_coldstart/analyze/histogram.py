"""Quantiles from a histogram's cumulative bucket counts, as Prometheus's histogram_quantile
computes them (linear interpolation inside the bucket that holds the rank), with the bucket
itself: a quantile from buckets is only known to lie in that interval, and says so.

Pure: counts in, figures out (cli/_prometheus.py fetches the counts)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BucketQuantile:
    value_s: float  # histogram_quantile's estimate
    lower_s: float  # the bucket that holds the rank: the true quantile is in [lower, upper]
    upper_s: float  # +Inf when the rank is beyond the largest finite bucket

    def describe(self) -> str:
        from .units import format_seconds

        upper = "+Inf" if math.isinf(self.upper_s) else format_seconds(int(self.upper_s * 1e9))
        return (f"{format_seconds(int(self.value_s * 1e9))} (bucket {format_seconds(int(self.lower_s * 1e9))}"
                f"..{upper})")


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]], zeros: float = 0) -> BucketQuantile | None:
    """``buckets``: (upper bound ``le``, cumulative count), +Inf included. ``zeros``: start-ups
    that had none of this (a phase a start-up did not run), counted at 0 as the file path
    counts a missing phase. None without any observation."""
    points = sorted((le, count + zeros) for le, count in buckets)
    if zeros:
        points.insert(0, (0.0, zeros))
    if not points or points[-1][1] <= 0:
        return None
    total = points[-1][1]
    rank = q * total
    previous_le, previous_count = 0.0, 0.0
    for le, count in points:
        if count >= rank and count > 0:
            if math.isinf(le):  # Prometheus: the largest finite bound
                return BucketQuantile(previous_le, previous_le, le)
            if le == 0:
                return BucketQuantile(0.0, 0.0, 0.0)
            inside = count - previous_count
            value = previous_le + (le - previous_le) * ((rank - previous_count) / inside if inside > 0 else 1)
            return BucketQuantile(value, previous_le, le)
        previous_le, previous_count = le, count
    return None
