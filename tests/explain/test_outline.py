"""vLLM's own start-up spans as the outline (analyze/outline.py): a trace shaped as vLLM's
tracing writes it (tests/explain/vllm_trace.py, with the sources it follows), with our
spans from the vLLM plugin in every process, read by ``otel-coldstart analyze``."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

import vllm_trace
from analyze_records import child, only, root
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.findings import dominant_phase
from otel_coldstart.analyze.readers import read_trace_file
from otel_coldstart.analyze.render_html import render_html
from otel_coldstart.analyze.report import Report


def _analyze(path: str, fmt: str = "json") -> str:
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", "--format", fmt, path],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


@pytest.mark.process  # the report is read through the CLI, as a user reads it
def test_a_vllm_start_up_across_processes_is_one_start_up_with_both_levels(tmp_path):
    path, facts = vllm_trace.write(str(tmp_path), launched=True, workers=2)
    document = json.loads(_analyze(path))
    (startup,) = document["startups"]  # front end, engine core and two workers: one start-up
    assert startup["span_id"] == facts["front_root"]  # the outermost root: the front end's
    assert startup["duration_s"] == 61.0 and startup["ready"] is True and startup["rank"] is None
    outline = startup["outline"]
    names = [n["name"] for n in outline]
    for name in ("Overall Loading", "EngineCoreProc init", "Executor init", "Worker init", "Init device",
                 "Load model", "Load weights", "Prepare model", "Capture model"):
        assert name in names
    assert names.count("model.startup") == 2 + facts["workers"]  # every process's root, in its place
    # Both levels: vLLM's step, and our phases inside it, per worker.
    weights = [n for n in outline if n["name"] == "Load weights"]
    assert sorted(n["process"] for n in weights) == ["Worker_TP0", "Worker_TP1"]
    assert all(n["phases"] == {"deserialize": 16.0, "h2d": 3.6} for n in weights)
    (device,) = [n for n in outline if n["name"] == "Init device" and n["process"] == "Worker_TP0"]
    assert device["phases"] == {"runtime_init": 2.7} and device["own_s"] == 0.3
    # The engine core's "Prepare model" waited for the workers' compile and captures (over
    # RPC, so not its children): that is not its own time.
    (prepare,) = [n for n in outline if n["name"] == "Prepare model"]
    assert prepare["process"] == "EngineCore" and prepare["own_s"] < 4.0
    depth = {n["name"]: n["depth"] for n in outline if n["process"] in ("EngineCore", "Worker_TP0")}
    assert depth["Load weights"] > depth["Load model"] > depth["Worker init"] > depth["Executor init"] > \
        depth["EngineCoreProc init"]
    # Our phases from every process are the start-up's: two workers' shards, and the time no
    # process was in a phase is what is unattributed.
    phases = {p["phase"]: p["busy_s"] for p in startup["phases"]}
    assert phases["deserialize"] == facts["deserialize_ms"] / 1000
    assert len(startup["shards"]) == 4
    assert abs(startup["unattributed_s"] - 8.55) < 1e-6
    assert startup["dominant_phase"] == "graph_capture"
    assert startup["compile"]["compilations"] == 2 and startup["captures"]["count"] == 134

    text = _analyze(path, "text")
    assert "outline (the server's start-up spans, our phases inside; 4 process(es))" in text
    assert "Load weights" in text and "deserialize 16.00 s, h2d 3.60 s" in text
    markdown = _analyze(path, "markdown")
    assert "| outline (server spans, our phases inside) |" in markdown


@pytest.mark.process
def test_without_a_launcher_the_front_end_is_its_own_start_up_and_the_rest_is_one(tmp_path):
    path, facts = vllm_trace.write(str(tmp_path), launched=False, workers=2)
    front, server = sorted(json.loads(_analyze(path))["startups"], key=lambda s: s["start_unix_ns"])
    assert front["trace_id"] == vllm_trace.FRONT_TRACE and front["outline"] is None
    assert server["trace_id"] == vllm_trace.TRACE and server["span_id"] == facts["overall"]
    assert server["duration_s"] == 55.8  # "Overall Loading" is the outermost: it spans the rest
    assert [n["name"] for n in server["outline"]][0] == "Overall Loading"


def test_the_html_page_has_the_outline_and_compare_and_capacity_count_one_start_up(tmp_path):
    path, facts = vllm_trace.write(str(tmp_path), launched=True, workers=2)
    spans = read_trace_file(path)
    out = io.StringIO()
    render_html(Report.of(breakdowns(spans)), out)
    page = out.getvalue()
    assert "<h3>Outline</h3>" in page and "Load weights" in page and "Worker_TP1" in page
    assert "graph captures: 134 in" in page
    # compare and capacity read start-ups slim (no spans that are not ours, no outline): still
    # one start-up per server, with the same phases.
    (slim,) = breakdowns(spans, slim=True)
    (full,) = breakdowns(spans)
    assert slim.root.span_id == facts["front_root"] and slim.phases == full.phases
    assert slim.unattributed_ns == full.unattributed_ns and slim == full.slim() and not slim.outline


def test_in_one_process_the_breakdown_is_as_without_the_outline_and_finest_phases_decide():
    r = root(1000)
    device = child(r, "Init device", None, 100, 700, **{"code.namespace": "vllm.v1.worker.gpu_worker"})
    load = child(r, "Load weights", None, 700, 950, **{"code.namespace": "vllm.model_executor.model_loader"})
    shard = child(load, "coldstart.deserialize", "deserialize", 710, 940)
    b = only([r, device, load, shard])
    assert b.phase("deserialize").busy_ns == 230_000_000
    assert sum(p.busy_ns for p in b.phases) + b.unattributed_ns == b.duration_ns  # the invariant holds
    # The finest pieces: deserialize (230 ms) and the own time of vLLM's "Init device" (600
    # ms, nothing of ours inside): that one dominates.
    assert b.dominant.phase == "Init device"
    (finding,) = dominant_phase.check(b)
    assert finding.phase == "Init device" and "otel-coldstart records no phase there yet" in finding.lever
    assert [(n.name, n.own_ns // 1_000_000) for n in b.outline if n.kind == "server"] == \
        [("Init device", 600), ("Load weights", 20)]


def test_the_runner_up_comes_from_the_dominant_phases_own_candidates():
    """With an outline the dominant phase is chosen among the finest pieces; "next:" is the
    piece after it among the same ones. Picked from our phases alone it skipped the real
    runner-up (deserialize, 230 ms) for the second of ours (cast, 40 ms)."""
    r = root(1000)
    device = child(r, "Init device", None, 100, 700, **{"code.namespace": "vllm.v1.worker.gpu_worker"})
    load = child(r, "Load weights", None, 700, 990, **{"code.namespace": "vllm.model_executor.model_loader"})
    b = only([r, device, load, child(load, "coldstart.deserialize", "deserialize", 710, 940),
              child(load, "coldstart.cast", "cast", 945, 985)])
    assert [p.phase for p in b.phases] == ["deserialize", "cast"]
    assert (b.dominant.phase, b.runner_up.phase, b.largest.phase) == ("Init device", "deserialize", "Init device")
    (finding,) = dominant_phase.check(b)
    assert "next: deserialize 230.0 ms" in finding.evidence
    # ... and a server step's own time is the runner-up where one of our phases dominates
    r = root(1000)
    device = child(r, "Init device", None, 0, 300, **{"code.namespace": "vllm.v1.worker.gpu_worker"})
    load = child(r, "Load weights", None, 300, 990, **{"code.namespace": "vllm.model_executor.model_loader"})
    b = only([r, device, load, child(load, "coldstart.deserialize", "deserialize", 310, 910),
              child(load, "coldstart.cast", "cast", 910, 960)])
    assert (b.dominant.phase, b.runner_up.phase) == ("deserialize", "Init device")


def test_a_trace_without_server_spans_is_unchanged():
    r = root(1000)
    b = only([r, child(r, "Load something", None, 0, 500), child(r, "coldstart.cast", "cast", 0, 300)])
    assert b.outline == () and b.dominant.phase == "cast"


def test_hostile_parent_links_do_not_hang_or_raise(tmp_path):
    path, _ = vllm_trace.write(str(tmp_path), launched=True, workers=1)
    spans = read_trace_file(path)
    # Every vLLM span's parent replaced by a span that does not exist, and one pointing at itself.
    from otel_coldstart.analyze.model import Span

    broken = []
    for s in spans:
        if s.name in ("Load model", "Executor init"):
            s = Span(s.trace_id, s.span_id, "ffffffffffffffff", s.name, s.start_ns, s.end_ns, s.attributes, s.resource)
        elif s.name == "Worker init":
            s = Span(s.trace_id, s.span_id, s.span_id, s.name, s.start_ns, s.end_ns, s.attributes, s.resource)
        broken.append(s)
    results = breakdowns(broken)
    assert results and all(r.duration_ns > 0 for r in results)
