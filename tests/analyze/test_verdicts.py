"""One module of verdicts (otel_coldstart/verdicts.py): the same trace read by the printed
summary, the findings, the JSON and Markdown reports and the metrics gives one answer for
the dominant phase (or its absence), the graph-capture count and the cold shards."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from analyze_records import aggregate, child, only, root, shard
from otel_coldstart import semconv, verdicts
from otel_coldstart.analyze.findings import find
from otel_coldstart.analyze.render import render_findings_text, render_startup_text
from otel_coldstart.analyze.render_json import analysis_document
from otel_coldstart.analyze.render_markdown import render_markdown
from otel_coldstart.analyze.report import Report
from otel_coldstart.metrics import StartupMetrics

MiB = 1 << 20


def _graph_startup(dominant: bool):
    """A torch.cuda.graph container around one aggregate of 8 captures (the case where the
    finding counted 9 and the metric 8), a cold and a warm shard whose state is only in
    read bytes for one of them, and either a dominant cast or a start-up that is mostly
    unattributed (its largest phase 5%)."""
    r = root(10_000)
    spans = [r]
    container = child(r, "torch.cuda.graph", "graph_capture", 9000, 9400)
    spans.append(container)
    spans.append(aggregate(container, "graph_capture", 9000, 9400, 380, 8, 0))
    spans.append(shard(r, 0, 100, 300, 100 * MiB, "cold", 100 * MiB))
    spans.append(shard(r, 1, 300, 320, 100 * MiB, None, 80 * MiB))  # no recorded state: 80% read -> cold
    spans.append(shard(r, 2, 320, 330, 100 * MiB, "warm", 0))
    if dominant:
        spans.append(child(r, "coldstart.cast", "cast", 1000, 6000))
    else:
        spans.append(child(r, "coldstart.cast", "cast", 1000, 1500))  # 5%: the largest, not dominant
    return spans


def _metrics(b, records):
    reader = InMemoryMetricReader()
    StartupMetrics(MeterProvider(metric_readers=[reader])).record(b, {}, records)
    data = reader.get_metrics_data()
    found = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                found[metric.name] = metric
    captures = sum(p.value for p in found[semconv.METRIC_GRAPH_CAPTURES].data.data_points)
    cold = sum(p.count for p in found[semconv.METRIC_SHARD_DURATION].data.data_points
               if p.attributes.get(semconv.CACHE_STATE) in verdicts.COLD_STATES)
    return captures, cold


@pytest.mark.parametrize("dominant", [True, False])
def test_one_trace_one_answer_everywhere(dominant):
    records = _graph_startup(dominant)
    b = only(records)
    expected_dominant = "cast" if dominant else None
    assert (b.dominant.phase if b.dominant else None) == expected_dominant
    assert b.graph_captures == 8
    cold_paths = [s.path for s in b.cold_shards]
    assert len(cold_paths) == 2

    summary = io.StringIO()
    render_startup_text(b, summary)
    text = summary.getvalue()
    if dominant:
        assert "dominant phase: cast" in text and text.count("<- dominant") == 1
    else:
        assert "dominant phase: none (the largest, cast, is 5%" in text and "<- dominant" not in text
    assert text.count(" cold,") + text.count(" cold\n") == 2  # both cold shards, as cold

    findings = find([b])
    rules = {f.rule: f for f in findings}
    assert ("dominant_phase" in rules) == dominant
    if dominant:
        assert rules["dominant_phase"].phase == "cast"
    assert rules["graph_captures"].title.startswith("8 CUDA graph captures")
    assert "2 shard(s)" in rules["cold_cache"].title or "2 cold shard(s)" in rules["cold_cache"].title
    findings_text = io.StringIO()
    render_findings_text(findings, findings_text)

    doc = json.loads(json.dumps(analysis_document(Report([b], findings))))
    startup = doc["startups"][0]
    assert startup["dominant_phase"] == expected_dominant and startup["largest_phase"] == "cast"
    assert startup["graph_captures"] == 8 and startup["cold_shards"] == cold_paths
    assert [s["cache_state"] for s in startup["shards"]] == ["cold", "cold", "warm"]

    markdown = io.StringIO()
    render_markdown(Report([b], findings), markdown)
    md = markdown.getvalue()
    assert ("Dominant phase: cast" in md) == dominant
    assert ("Dominant phase: none" in md) == (not dominant)
    assert md.count("| cold |") == 2 and "**8 CUDA graph captures" in md

    captures, cold = _metrics(b, records)
    assert captures == 8 and cold == 2


def test_patches_use_the_same_cold_thresholds():
    from otel_coldstart.patches import _files
    assert _files.cache_state_from_reads is verdicts.cache_state_from_reads  # verdicts' thresholds, not a copy
    assert not hasattr(_files, "COLD_AT_LEAST") and not hasattr(_files, "WARM_BELOW")
    for read, size in ((0, 100), (4, 100), (5, 100), (49, 100), (50, 100), (100, 100)):
        assert verdicts.shard_cache_state(None, read, size) == verdicts.cache_state_from_reads(read, size)
    assert verdicts.shard_cache_state("warm", 100, 100) == "warm"  # the plugin's recorded verdict wins


def test_attribute_typing():
    """One rule for a bad value: another type than asked for reads as absent (None), and a
    count or byte total reads absent, bad or not positive as 0."""
    attrs = {"bool": True, "int": 3, "neg": -1, "float": 3.0, "text": "7"}
    assert [verdicts.int_value(attrs, k) for k in ("bool", "int", "neg", "float", "text", "none")] == \
        [None, 3, -1, None, None, None]
    assert [verdicts.positive_int(attrs, k) for k in ("bool", "int", "neg", "float", "text", "none")] == \
        [0, 3, 0, 0, 0, 0]
    assert verdicts.number_value(attrs, "bool") is None and verdicts.number_value(attrs, "int") == 3.0
    assert verdicts.str_value(attrs, "text") == "7" and verdicts.str_value(attrs, "int") is None


@pytest.mark.process
def test_verdicts_import_is_light():
    """The patches import it, so it imports nothing but semconv (no torch, no analyzer)."""
    import ast
    tree = ast.parse(open(verdicts.__file__).read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add((node.level, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            imported.update((0, a.name, ()) for a in node.names)
    allowed = {(0, "__future__"): {"annotations"}, (0, "typing"): {"Any", "Iterable", "Mapping", "Sequence"},
               (0, "collections.abc"): {"Iterable", "Mapping", "Sequence"},
               (1, None): {"semconv"}}
    assert all(set(names) <= allowed.get((level, module), set()) for level, module, names in imported), imported
    code = ("import sys; import otel_coldstart; before = set(sys.modules); import otel_coldstart.verdicts; "
            "print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout.replace("'", '"'))) <= {"otel_coldstart.verdicts", "otel_coldstart.semconv"}


def test_capacity_names_the_dominant_phase_by_the_same_rule_as_one_startup():
    """Issue 22.6: capacity had its own dominant-phase rule (ties went to the last name, the
    breakdown's to the first). Two phases of the same time, each 40% of the start-up: every
    start-up, and the group of them, name the same one."""
    from otel_coldstart.analyze.capacity import capacity_summary

    startups = []
    for _ in range(3):
        r = root(1000)
        startups.append(only([r, child(r, "coldstart.warmup", "warmup", 0, 400),
                              child(r, "coldstart.build", "build", 400, 800)]))
    assert {b.dominant.phase for b in startups} == {"build"}
    (group,) = capacity_summary(startups, keys=())
    assert group.dominant_phase == "build"
    # unattributed time is never a phase, however large its median
    r = root(1000)
    mostly_idle = only([r, child(r, "coldstart.build", "build", 0, 300)])
    (group,) = capacity_summary([mostly_idle], keys=())
    assert group.phases[semconv.UNATTRIBUTED].p50_ns > group.phases["build"].p50_ns
    assert group.dominant_phase == "build"
