"""compare, capacity and budgets as pure functions over hand-built start-ups."""

from __future__ import annotations

import pytest

from analyze_records import MS, child, only, root
from otel_coldstart.analyze.budgets import check_budgets, parse_budget_file, parse_budget_specs
from otel_coldstart.analyze.capacity import capacity_summary
from otel_coldstart.analyze.compare import compare
from otel_coldstart.analyze.stats import percentile
from otel_coldstart.analyze.units import parse_duration_ns


def startup(total_ms, deserialize_ms, h2d_ms=0, host_type=None):
    r = root(total_ms, resource={"host.type": host_type} if host_type else {})
    spans = [r, child(r, "coldstart.deserialize", "deserialize", 0, deserialize_ms)]
    if h2d_ms:
        spans.append(child(r, "coldstart.h2d", "h2d", deserialize_ms, deserialize_ms + h2d_ms))
    return only(spans)


def test_percentile_interpolates_between_ranks():
    assert percentile([10, 20, 30, 40], 0.5) == 25
    assert percentile([10, 20, 30, 40], 0.95) == pytest.approx(38.5)
    assert percentile([7], 0.95) == 7
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_compare_few_startups_a_side_is_noise_with_a_warning():
    a = [startup(1000, 400, 100), startup(1100, 420, 100), startup(900, 380, 100)]
    b = [startup(1500, 900, 100), startup(1600, 950, 100)]
    result = compare(a, b)
    assert (result.total.a_ns, result.total.b_ns) == (1000 * MS, 1550 * MS)
    rows = {r.phase: r for r in result.rows}
    assert rows["deserialize"].delta_ns == 925 * MS - 400 * MS
    assert rows["h2d"].ratio == 1.0
    # 3 against 2, fully separated: the exact two-sided p is 2/10, so no verdict can be made
    assert rows["deserialize"].p_value == pytest.approx(0.2)
    assert result.slower() == [] and rows["deserialize"].verdict == "within noise"
    assert any("fewer than 5 start-ups" in w for w in result.warnings)


def test_compare_slower_with_enough_startups_faster_and_noise():
    a = [startup(1000 + i * 10, 400 + i * 7, 100 + (i % 3)) for i in range(6)]
    b = [startup(1500 + i * 10, 900 + i * 5, 100 + (i % 2)) for i in range(6)]
    result = compare(a, b)
    rows = {r.phase: r for r in result.rows}
    assert rows["deserialize"].verdict == "slower" and rows["deserialize"].p_value < 0.01
    assert rows["h2d"].verdict == "within noise"
    assert result.rows[0].phase == "deserialize" and result.total.verdict == "slower"
    assert rows["deserialize"].a_iqr[0] <= rows["deserialize"].a_ns <= rows["deserialize"].a_iqr[1]
    assert compare(b, a).total.verdict == "faster"
    assert result.warnings == []


def test_compare_significant_but_tiny_change_is_noise():
    a = [startup(10_000, 400 + i * 0.01) for i in range(8)]
    b = [startup(10_000, 401 + i * 0.01) for i in range(8)]  # +1 ms, always: p tiny, effect too small
    rows = {r.phase: r for r in compare(a, b).rows}
    assert rows["deserialize"].p_value < 0.01 and rows["deserialize"].verdict == "within noise"


def test_mann_whitney_exact_small_samples():
    from otel_coldstart.analyze.stats import mann_whitney_p
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)  # 2 of 20 orderings
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([1, 3, 5, 7, 9], [2, 4, 6, 8, 10]) > 0.5
    assert mann_whitney_p([1, 1, 1], [1, 1, 1]) == 1.0  # all ties


def _p_by_walking_the_pooled_ranks(a, b):
    """The normal approximation of mann_whitney_p with ranks found the textbook way: the
    pooled (value, side) pairs sorted and walked, a tie group given its middle rank."""
    import math
    n, m = len(a), len(b)
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    rank_sum_a, tie_term, i = 0.0, 0.0, 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        tie_term += (j - i + 1) ** 3 - (j - i + 1)
        rank_sum_a += sum((i + j) / 2 + 1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u = rank_sum_a - n * (n + 1) / 2
    variance = n * m / 12 * ((n + m + 1) - tie_term / ((n + m) * (n + m - 1)))
    if variance <= 0:
        return 1.0
    z = (abs(u - n * m / 2) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(max(0.0, z) / math.sqrt(2)))


@pytest.mark.parametrize("seed", range(40))
def test_mann_whitney_ranks_big_samples_as_walking_the_pooled_sample_does(seed):
    """The ranks are summed in C (bisection, counts per value) for a fleet's thousands of
    start-ups a side: the p-value is exactly the one of walking the pooled sample."""
    import random

    from otel_coldstart.analyze.stats import mann_whitney_p
    rng = random.Random(seed)
    spread = rng.choice([3, 50, 10**9])  # many ties, some, almost none
    a = [rng.randint(0, spread) for _ in range(rng.randint(31, 3000))]
    b = [rng.randint(0, spread) + rng.choice([0, spread // 10]) for _ in range(rng.randint(31, 3000))]
    if seed % 4 == 0:
        a = [v / 7 for v in a]  # floats too
    assert mann_whitney_p(a, b) == _p_by_walking_the_pooled_ranks(a, b)


def test_compare_marks_a_new_phase():
    result = compare([startup(1000, 400)] * 6, [startup(1000, 400, 200)] * 6)
    [new] = result.slower()
    assert new.phase == "h2d" and new.ratio is None


def test_capacity_caveat_and_dominant_phase_per_group():
    results = [startup(1000 + i * 100, 500, host_type="g5.xlarge") for i in range(5)] + \
        [startup(3000, 200, host_type="p4d.24xlarge")]
    overall, *groups = capacity_summary(results, ["host.type"])
    by_value = {g.value: g for g in groups}
    assert "fewer than 20" in overall.p95_caveat
    assert by_value["g5.xlarge"].dominant_phase == "deserialize"
    assert by_value["p4d.24xlarge"].dominant_phase is None  # 200 ms of 3 s: under 20%
    many = capacity_summary([startup(1000, 500) for _ in range(20)])[0]
    assert many.p95_caveat is None


def test_unknown_budget_keys_are_listed():
    from otel_coldstart.analyze.budgets import unknown_budget_keys, valid_budget_keys
    budget = parse_budget_specs(["totl=3s", "deserialise=1ms", "total=1s", "my_step=2s"])
    assert unknown_budget_keys(budget, {"my_step"}) == ["deserialise", "totl"]
    assert {"total", "unattributed", "deserialize", "my_step"} <= set(valid_budget_keys({"my_step"}))


def test_capacity_per_instance_type_and_lead_time():
    results = [startup(1000 + i * 100, 500, host_type="g5.xlarge") for i in range(5)] + \
        [startup(3000, 2500, host_type="p4d.24xlarge"), startup(2000, 1500)]
    overall, *groups = capacity_summary(results, ["host.type"])
    assert overall.count == 7 and overall.value == "all"
    by_value = {g.value: g for g in groups}
    assert set(by_value) == {"g5.xlarge", "p4d.24xlarge", "(not set)"}
    g5 = by_value["g5.xlarge"]
    assert g5.total.p50_ns == 1200 * MS and g5.total.p95_ns == 1380 * MS
    assert g5.phases["deserialize"].p95_ns == 500 * MS
    assert g5.lead_time_ns(90_000 * MS) == 90_000 * MS + 1380 * MS
    assert groups[0].value == "p4d.24xlarge"  # slowest p95 first


def test_budget_specs_files_and_violations():
    assert parse_duration_ns("1.5m") == 90_000 * MS and parse_duration_ns("250ms") == 250 * MS
    assert parse_duration_ns("2") == 2000 * MS
    budget = parse_budget_specs(["total=1s", "deserialize=300ms"])
    assert parse_budget_file('{"total": "1s", "deserialize": 0.3}') == budget
    assert parse_budget_file("# gate\ntotal = 1s\ndeserialize=300ms  # reads\n") == budget
    for bad in (["total"], ["=1s"], ["total=soon"]):
        with pytest.raises(ValueError):
            parse_budget_specs(bad)
    with pytest.raises(ValueError):
        parse_budget_file('{"total": [1]}')
    [violation] = check_budgets([startup(900, 400)], budget)
    assert violation.key == "deserialize" and violation.actual_ns == 400 * MS
    assert "deserialize 400.0 ms > budget 300.0 ms" in violation.describe()
    assert check_budgets([startup(900, 200)], budget) == []
    assert check_budgets([startup(900, 200)], {"unattributed": 100 * MS})[0].actual_ns == 700 * MS
