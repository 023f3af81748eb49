"""Every PromQL expression of every dashboard panel, run against a real Prometheus that
scraped a real instrumented start-up: each must parse and each must return data.

Variables are substituted the way Grafana does: once with the values a user would pick for
this start-up (its model, instance type, version, copy direction) and once with "All".
"""

from __future__ import annotations

import math

import pytest

from metrics_testlib import (
    ALL_VARIABLES,
    CONCRETE_VARIABLES,
    PROMETHEUS_JOB,
    committed_dashboards,
    is_inflight,
    panel_expressions,
    substitute,
    variable_queries,
)

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

CASES = [
    (dashboard_name, title, expr)
    for dashboard_name, dashboard in committed_dashboards().items()
    for title, expr in panel_expressions(dashboard)
    if not is_inflight(expr)  # checked while a start-up runs: test_inflight_prometheus.py
]


def test_the_dashboards_have_queries_to_check():
    assert len(CASES) >= 12


def _finite_values(result: dict) -> list[float]:
    data = result["data"]
    if data["resultType"] == "vector":
        values = [float(item["value"][1]) for item in data["result"]]
    elif data["resultType"] == "scalar":
        values = [float(data["result"][1])]
    else:
        values = [float(v) for item in data["result"] for _, v in item["values"]]
    return [v for v in values if math.isfinite(v)]


@pytest.mark.parametrize("variables", [CONCRETE_VARIABLES, ALL_VARIABLES], ids=["picked", "all"])
@pytest.mark.parametrize("dashboard_name,title,expr", CASES, ids=[f"{c[1]}#{i}" for i, c in enumerate(CASES)])
def test_panel_query_parses_and_returns_data(prometheus, dashboard_name, title, expr, variables):
    promql = substitute(expr, variables)
    result = prometheus.answer(promql)
    assert result.get("status") == "success", f"{dashboard_name} / {title}: {result.get('error')}\n{promql}"
    assert _finite_values(result), f"{dashboard_name} / {title}: no data\n{promql}\n{result['data']}"


def test_variable_queries_offer_the_start_ups_values(prometheus):
    """``label_values(metric, label)``: what Grafana asks Prometheus to fill a variable."""
    checked = 0
    for dashboard in committed_dashboards().values():
        for name, metric, label in variable_queries(dashboard):
            result = prometheus.api(f"label/{label}/values", **{"match[]": metric})
            assert result.get("status") == "success", result
            assert CONCRETE_VARIABLES[name] in result["data"], (name, result["data"])
            checked += 1
    assert checked >= 4


def test_the_scrape_saw_the_start_up_not_an_empty_endpoint(prometheus, served_startup):
    result = prometheus.answer(f'model_startup_duration_seconds_count{{job="{PROMETHEUS_JOB}"}}')
    assert [float(item["value"][1]) for item in result["data"]["result"]] == [1.0]


def test_the_check_can_fail(prometheus):
    """The same server answers a misspelt metric with no data and bad PromQL with an error."""
    assert not _finite_values(prometheus.answer("max_over_time(model_startup_duration_second_count[1m])"))
    assert prometheus.answer("sum by (le (model_startup_duration_seconds_bucket)").get("status") == "error"
