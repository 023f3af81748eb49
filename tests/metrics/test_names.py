"""The dashboards name only what the code emits; the docs name everything it emits; no
label can grow with files, tensors, threads, processes or traces.

The emitted side is read from a real start-up's Prometheus endpoint (what a Prometheus
scrapes), the dashboard side from the committed JSON's PromQL.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics_testlib import (
    DASHBOARDS,
    IDENTITY,
    INFLIGHT_PREFIX,
    REPO,
    committed_dashboards,
    load_generator,
    needs_grafana_sdk,
    panel_expressions,
    promql_names,
    variable_queries,
)
from otel_coldstart import metrics as coldstart_metrics, semconv

DOC = os.path.join(REPO, "docs", "metrics.md")
SCRAPE_LABELS = {"job", "instance"}  # added by the Prometheus scrape (or the Collector's exporter)
SERIES_LABELS = {"le"}  # histogram buckets


def _emitted(exposition: str) -> tuple[dict[str, str], set[str], list[tuple[str, dict]]]:
    """(sample name -> family, label names, samples) of an exposition."""
    names, labels, samples = {}, set(), []
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            names[sample.name] = family.name
            labels.update(sample.labels)
            samples.append((sample.name, sample.labels))
    return names, labels, samples


def _dashboard_names() -> tuple[set[str], set[str]]:
    metrics, labels = set(), set()
    for dashboard in committed_dashboards().values():
        for _title, expr in panel_expressions(dashboard):
            found_metrics, found_labels = promql_names(expr)
            metrics |= found_metrics
            labels |= found_labels
        for _name, metric, label in variable_queries(dashboard):
            metrics.add(metric)
            labels.add(label)
    return metrics, labels


def test_the_promql_reader_finds_metrics_and_labels():
    metrics, labels = promql_names(
        'topk by (a) (1, sum by (b, le) (max_over_time(m_total{c=~"x", d!="y"}[5m]))) '
        '/ ignoring (e) group_left (f) other_metric or on() vector(0)')
    assert metrics == {"m_total", "other_metric"}
    assert labels == {"a", "b", "le", "c", "d", "e", "f"}


@pytest.mark.process  # served_startup: a start-up in a fresh process, once per session
def test_every_metric_and_label_in_a_dashboard_is_emitted(served_startup):
    emitted_names, emitted_labels, _ = _emitted(served_startup.exposition())
    dashboard_metrics, dashboard_labels = _dashboard_names()
    assert len(dashboard_metrics) >= 8 and len(dashboard_labels) >= 8
    # In-flight gauges are gone once the start-up is ready: test_inflight_prometheus.py
    # checks them against the exposition of a start-up that runs.
    dashboard_metrics = {m for m in dashboard_metrics if not m.startswith(INFLIGHT_PREFIX)}
    assert not dashboard_metrics - set(emitted_names), "dashboards use metrics nothing emits"
    assert not dashboard_labels - emitted_labels - SCRAPE_LABELS - SERIES_LABELS, \
        "dashboards use labels nothing emits"


@pytest.mark.process  # served_startup: a start-up in a fresh process, once per session
def test_every_start_up_metric_is_used_by_a_dashboard(served_startup):
    emitted_names, _, _ = _emitted(served_startup.exposition())
    families = {family for family in emitted_names.values() if family.startswith("model_startup")}
    dashboard_metrics, _ = _dashboard_names()
    used = {emitted_names[m] for m in dashboard_metrics if m in emitted_names}
    assert not families - used, "emitted but shown nowhere"


@pytest.mark.process  # served_startup: a start-up in a fresh process, once per session
def test_docs_name_every_emitted_metric_and_label(served_startup):
    emitted_names, emitted_labels, _ = _emitted(served_startup.exposition())
    with open(DOC, encoding="utf-8") as handle:
        doc = handle.read()
    otel_names = [v for k, v in vars(semconv).items() if k.startswith("METRIC_")]
    assert len(otel_names) >= 8
    missing = [n for n in otel_names if f"`{n}`" not in doc]
    # Histogram samples are documented as `family_bucket`/`_sum`/`_count`: the family must be.
    missing += [n for n, family in sorted(emitted_names.items())
                if n.startswith("model_startup") and f"`{n}" not in doc and f"`{family}_" not in doc]
    missing += [label for label in sorted(emitted_labels) if label.startswith("coldstart_") and f"`{label}`" not in doc]
    assert not missing, f"add to docs/metrics.md: {missing}"


@pytest.mark.process  # served_startup: a start-up in a fresh process, once per session
def test_labels_stay_bounded(served_startup):
    """No label is a path, a tensor name, a thread, a process or a trace: the checks look at
    the real start-up's own file names, tensor names and trace id."""
    _, labels, samples = _emitted(served_startup.exposition())
    forbidden_labels = {a.replace(".", "_") for a in coldstart_metrics.UNBOUNDED_ATTRIBUTES}
    shard_files = [n for n in os.listdir(served_startup.checkpoint_dir) if n.endswith(".safetensors")]
    assert len(shard_files) == 3 and len(served_startup.tensor_names) > 10
    checked = 0
    for name, sample_labels in samples:
        if name.startswith("target_info"):
            continue  # resource attributes, once per process: where pid and host belong
        assert not forbidden_labels & set(sample_labels), (name, sample_labels)
        for label, value in sample_labels.items():
            checked += 1
            assert "/" not in value and served_startup.checkpoint_dir not in value, (name, label, value)
            assert value not in served_startup.tensor_names and value not in shard_files, (name, label, value)
            assert served_startup.trace_id not in value and not re.fullmatch(r"[0-9a-f]{16,32}", value), \
                (name, label, value)
    assert checked > 100
    # Exactly the label names the code means to emit, and the identifying ones the user set.
    expected = {semconv.PHASE, semconv.READY, semconv.CACHE_STATE, semconv.SHARD_POSITION, semconv.COPY_MEMORY,
                *IDENTITY, "otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "le"}
    assert labels - {"host_name", "process_pid", "service_instance_id", "telemetry_sdk_language",
                     "telemetry_sdk_name", "telemetry_sdk_version"} <= {e.replace(".", "_") for e in expected}


@pytest.mark.process  # served_startup: a start-up in a fresh process, once per session
def test_every_series_carries_the_identifying_attributes(served_startup):
    _, _, samples = _emitted(served_startup.exposition())
    startup = [(n, s) for n, s in samples if n.startswith("model_startup")]
    assert len(startup) > 20
    for name, sample_labels in startup:
        for key, value in IDENTITY.items():
            assert sample_labels.get(key.replace(".", "_")) == value, (name, key)


def test_committed_dashboards_equal_generated_output():
    generator = load_generator()
    with open(generator.OUTPUT, encoding="utf-8") as handle:
        assert handle.read() == generator.render(), "run: python dashboards/generate.py"
    assert generator.main(["--check"]) == 0


def test_dashboards_use_the_datasource_variables_and_no_uid():
    for name, dashboard in committed_dashboards().items():
        text = json.dumps(dashboard)
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        assert variables["traces"]["type"] == "datasource"
        uids = set(re.findall(r'"uid":\s*"([^"]*)"', text)) - {dashboard["uid"]}
        assert uids == {"${datasource}"}, (name, uids)
        refs = []

        def walk(node):
            if isinstance(node, dict):
                if "datasource" in node and isinstance(node["datasource"], dict):
                    refs.append(node["datasource"])  # noqa: B023 - walk runs within this iteration
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(dashboard["panels"])
        assert refs and all(ref == {"type": "prometheus", "uid": "${datasource}"} for ref in refs), name
        # The trace link goes through the traces variable too.
        assert "%24%7Btraces%7D" in text or "${traces}" in text
    assert os.path.exists(os.path.join(DASHBOARDS, "generate.py"))


def test_committed_dashboards_load_into_grafanas_typed_model():
    """The JSON reads back into the foundation SDK's dashboard types (Grafana's own schema,
    generated from its CUE) and loses nothing on the way."""
    needs_grafana_sdk()
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()

    def without_empty_custom(node):
        if isinstance(node, dict):
            return {k: without_empty_custom(v) for k, v in node.items() if not (k == "custom" and v == {})}
        if isinstance(node, list):
            return [without_empty_custom(v) for v in node]
        return node

    for name, dashboard in committed_dashboards().items():
        typed = Dashboard.from_json(dashboard)
        again = json.loads(JSONEncoder().encode(typed))
        assert without_empty_custom(again) == dashboard, name
        assert len(typed.panels) >= 15


def test_every_document_that_lists_metrics_names_exactly_what_semconv_defines():
    """semconv is the one source of metric names: the package docstring (help(otel_coldstart))
    and docs/metrics.md list all of them, and no document names one that does not exist."""
    import otel_coldstart

    defined = {v for k, v in vars(semconv).items() if k.startswith("METRIC_")}
    assert len(defined) >= 8
    pattern = re.compile(r"\bmodel\.startup(?:\.[a-z_]+)+(?:\.\*)?")

    def named(text: str) -> set[str]:
        """Names in a text; a ``prefix.*`` family stands for the defined names under it."""
        found = set()
        for match in pattern.findall(text):
            if match.endswith(".*"):
                family = {d for d in defined if d.startswith(match[:-1])}
                found |= family or {match}
            else:
                found.add(match.rstrip("."))
        return found

    with open(DOC, encoding="utf-8") as handle:
        metrics_doc = handle.read()
    assert named(otel_coldstart.__doc__) == defined, "help(otel_coldstart) lists other metrics than semconv"
    assert defined <= named(metrics_doc), "docs/metrics.md misses a metric"
    for path in ("README.md", os.path.join("docs", "metrics.md"), os.path.join("docs", "conventions.md")):
        with open(os.path.join(REPO, path), encoding="utf-8") as handle:
            stale = named(handle.read()) - defined
        assert not stale, f"{path} names metrics that do not exist: {stale}"
