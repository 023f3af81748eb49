"""Helpers shared by the metrics tests (fixtures live in conftest.py): the dashboards'
PromQL, Grafana's variable substitution, a PromQL name reader, loopback HTTP."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DASHBOARDS = os.path.join(REPO, "dashboards")

# What the test start-up says about itself (OTEL_RESOURCE_ATTRIBUTES), and so what a user
# would pick in the dashboards' variables.
IDENTITY = {
    "service.name": "tiny-llama-server",
    "service.version": "2026.11.29",
    "host.type": "cpu-test-small",
    "coldstart.model.name": "tiny-llama",
}
# Grafana's substitution for each dashboard variable when the user picks the test's values.
CONCRETE_VARIABLES = {
    "model": IDENTITY["coldstart.model.name"],
    "instance_type": IDENTITY["host.type"],
    "version": IDENTITY["service.version"],
    "direction": "h2h",  # the only copy direction a CPU-only start-up has
}
ALL_VARIABLES = {name: ".*" for name in CONCRETE_VARIABLES}  # the variables' "All" value
# Grafana's built-in interval variables, as Grafana would fill them for a 15-minute view.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "15s", "__range": "15m"}

STARTUP_TIMEOUT_S = 180  # import torch on a loaded 2-core machine can be slow
SCRAPE_TIMEOUT_S = 60
PROMETHEUS_JOB = "otel-coldstart-test"
# Gauges of start-ups in flight: they vanish at ready(), so a start-up that already ended
# (the served_startup fixture) cannot show them; test_inflight_prometheus.py checks them
# against a start-up while it runs.
INFLIGHT_PREFIX = "model_startup_inflight_"


def is_inflight(expr: str) -> bool:
    return INFLIGHT_PREFIX in expr


def needs_grafana_sdk() -> None:
    """dashboards/generate.py's dependency is in requirements-dashboards.txt, installed where
    it can be (Python 3.11+): elsewhere (3.10) the dashboard tests skip and say why."""
    import pytest

    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (requirements-dashboards.txt) "
                        "needs Python 3.11+; the committed dashboards are checked on 3.11")


def load_generator():
    needs_grafana_sdk()
    spec = importlib.util.spec_from_file_location("dashboards_generate", os.path.join(DASHBOARDS, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_dashboards() -> dict[str, dict]:
    out = {}
    for name in sorted(os.listdir(DASHBOARDS)):
        if name.endswith(".json"):
            with open(os.path.join(DASHBOARDS, name), encoding="utf-8") as handle:
                out[name] = json.load(handle)
    return out


def panel_expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, rows included."""
    found = []

    def walk(panels):
        for panel in panels or ():
            for target in panel.get("targets") or ():
                if target.get("expr"):
                    found.append((panel.get("title", "?"), target["expr"]))
            walk(panel.get("panels"))

    walk(dashboard.get("panels"))
    return found


LABEL_VALUES = re.compile(r"^label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*([A-Za-z_]\w*)\s*\)$")


def variable_queries(dashboard: dict) -> list[tuple[str, str, str]]:
    """(variable, metric, label) of every ``label_values(metric, label)`` variable."""
    out = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            match = LABEL_VALUES.match(query or "")
            assert match, f"variable {variable['name']}: unsupported query {query!r}"
            out.append((variable["name"], match.group(1), match.group(2)))
    return out


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's interpolation of ``$name`` / ``${name}`` (longest names first)."""
    merged = {**BUILTIN_VARIABLES, **variables}
    for name in sorted(merged, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", merged[name]).replace("$" + name, merged[name])
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_IDENT = re.compile(r"[A-Za-z_:][\w:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression refers to, from its tokens."""
    labels: set[str] = set()
    text = _STRING.sub('""', expr)
    for _keyword, names in _GROUPING.findall(text):
        labels.update(n.strip() for n in names.split(",") if n.strip())
    text = _GROUPING.sub(" ", text)
    for inner in _MATCHERS.findall(text):
        labels.update(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", inner))
    text = _MATCHERS.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    metrics = set()
    for match in _IDENT.finditer(text):
        name = match.group(0)
        following = text[match.end():].lstrip()
        if following.startswith("(") or name.lower() in _KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        metrics.add(name)
    return metrics, labels


def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


