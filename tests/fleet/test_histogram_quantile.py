"""analyze/histogram.bucket_quantile: histogram_quantile's interpolation, and the bucket."""

from __future__ import annotations

import math

from otel_coldstart.analyze.histogram import bucket_quantile

INF = math.inf


def test_interpolates_inside_the_bucket_that_holds_the_rank():
    buckets = [(1.0, 2), (2.5, 6), (5.0, 10), (INF, 10)]
    q = bucket_quantile(0.5, buckets)  # rank 5: the 2nd bucket, 3 of its 4
    assert (q.lower_s, q.upper_s) == (1.0, 2.5) and math.isclose(q.value_s, 1.0 + 1.5 * 3 / 4)
    q = bucket_quantile(0.95, buckets)  # rank 9.5
    assert (q.lower_s, q.upper_s) == (2.5, 5.0) and math.isclose(q.value_s, 2.5 + 2.5 * 3.5 / 4)


def test_beyond_the_largest_bound_is_that_bound_and_an_open_bucket():
    q = bucket_quantile(0.95, [(1.0, 1), (INF, 10)])
    assert q.value_s == 1.0 and q.upper_s == INF and "+Inf" in q.describe()


def test_start_ups_without_the_phase_count_as_zero():
    buckets = [(0.5, 0), (1.0, 2), (INF, 2)]  # 2 of 10 start-ups ran the phase
    q = bucket_quantile(0.5, buckets, zeros=8)
    assert (q.value_s, q.lower_s, q.upper_s) == (0.0, 0.0, 0.0)
    q = bucket_quantile(0.95, buckets, zeros=8)  # rank 9.5: among the two
    assert (q.lower_s, q.upper_s) == (0.5, 1.0)


def test_no_observation_is_none():
    assert bucket_quantile(0.5, [(1.0, 0), (INF, 0)]) is None
    assert bucket_quantile(0.5, []) is None
