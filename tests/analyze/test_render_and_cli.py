"""Outputs (text, Markdown, JSON schema, SVG waterfall) and the analyze / compare / capacity
commands on real demo traces: budgets, selection, never overwriting."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from analyze_records import child, data_file, only, root
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace_file
from otel_coldstart.analyze.render import render_startup_text
from otel_coldstart.analyze.render_svg import render_svg
from otel_coldstart.analyze.report import Report
from otel_coldstart.cli import main

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
COLD = data_file("demo-cold-first-shard.otlp.jsonl")
WARM = data_file("demo-warm.otlp.jsonl")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_text_report_has_breakdown_and_ranked_findings(capsys):
    code, out, _ = run(capsys, "analyze", COLD)
    assert code == 0
    assert "model.startup" in out and "unattributed" in out and "shards:" in out
    assert "findings (largest estimated saving first):" in out and "cold shard(s) read from storage" in out


def test_json_output_follows_the_documented_schema(capsys):
    code, out, _ = run(capsys, "analyze", COLD, "--format", "json", "--budget", "total=1h")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "otel-coldstart.analysis/1"
    assert doc["sources"][0]["format"] == "otlp" and doc["sources"][0]["startups"] == 1
    [startup] = doc["startups"]
    assert set(startup) >= {"trace_id", "span_id", "rank", "ready", "duration_s", "unattributed_s", "phases",
                            "shards", "gaps", "context", "dominant_phase", "parallelism", "resource", "lazy_weights"}
    total = sum(p["busy_s"] for p in startup["phases"]) + startup["unattributed_s"]
    assert total == pytest.approx(startup["duration_s"], abs=1e-6)
    assert startup["shards"][0]["cache_state"] == "cold"
    finding = doc["findings"][0]
    assert set(finding) == {"rule", "title", "evidence", "lever", "saving_s", "saving_basis", "saving_of", "share",
                            "trace_id", "rank", "phase"}
    assert doc["budget"] == {"limits_s": {"total": 3600.0}, "exceeded": []}


def test_markdown_report_is_tables_and_findings(capsys):
    code, out, _ = run(capsys, "analyze", COLD, "--format", "markdown")
    assert code == 0
    assert out.startswith("## Start-up trace `")
    assert "| phase | time | share | bytes | throughput | spans |" in out and "## Findings" in out


def test_budget_exceeded_exits_8_and_names_the_phase(capsys, tmp_path):
    code, _, err = run(capsys, "analyze", COLD, "--budget", "total=10m", "--budget", "cast=100ms")
    assert code == 8 and "over budget: cast" in err and "total" not in err.split("over budget:")[1]
    budget_file = tmp_path / "budget.json"
    budget_file.write_text('{"total": "1s"}')
    code, _, err = run(capsys, "analyze", COLD, "--budget-file", str(budget_file))
    assert code == 8 and "over budget: total" in err
    lines_file = tmp_path / "budget.txt"
    lines_file.write_text("# CI gate\ntotal = 90s\nh2d=10s\n")
    assert run(capsys, "analyze", COLD, "--budget-file", str(lines_file))[0] == 0


def test_trace_id_selects_and_unknown_id_is_exit_5(capsys, tmp_path):
    both = tmp_path / "both.jsonl"
    both.write_bytes(open(COLD, "rb").read() + open(WARM, "rb").read())
    code, out, _ = run(capsys, "analyze", str(both))
    assert code == 0 and out.count("model.startup ") == 2
    cold_id = breakdowns(read_trace_file(COLD))[0].trace_id
    code, out, _ = run(capsys, "analyze", str(both), "--trace-id", cold_id[:8])
    assert code == 0 and out.count("model.startup ") == 1 and cold_id in out
    assert run(capsys, "analyze", str(both), "--trace-id", "ffffffff")[0] == 5


def test_waterfall_is_self_contained_svg_and_never_overwritten(capsys, tmp_path):
    code, _, err = run(capsys, "analyze", COLD, "--waterfall", str(tmp_path / "wf"))
    assert code == 0
    [svg] = list((tmp_path / "wf").iterdir())
    tree = ET.parse(svg)
    assert tree.getroot().tag == "{http://www.w3.org/2000/svg}svg"
    text = svg.read_text()
    assert "model-00001-of-00004.safetensors (cold)" in text and "<script" not in text and "href" not in text
    assert run(capsys, "analyze", COLD, "--waterfall", str(tmp_path / "wf"))[0] == 6
    out_file = tmp_path / "report.md"
    out_file.write_text("keep me")
    assert run(capsys, "analyze", COLD, "--output", str(out_file))[0] == 6
    assert out_file.read_text() == "keep me"


def test_svg_shows_gaps_context_and_caps_rows(tmp_path):
    r = root(1000)
    spans = [r, child(r, "Load weights", None, 100, 900)] + [
        child(r, "coldstart.cast", "cast", i * 0.001, i * 0.001 + 0.0005) for i in range(600)]
    path = tmp_path / "w.svg"
    with open(path, "w") as handle:
        render_svg(Report([only(spans)]), handle)
    text = path.read_text()
    ET.parse(path)
    assert "Load weights" in text and "unattributed" in text and "200 shorter spans not shown" in text


def test_compare_reports_what_got_slower(capsys, tmp_path):
    code, out, _ = run(capsys, "compare", WARM, COLD)
    assert code == 0 and "total" in out and ("slower in B" in out or "nothing got slower" in out)
    code, out, _ = run(capsys, "compare", WARM, COLD, "--format", "json")
    doc = json.loads(out)
    assert doc["schema"] == "otel-coldstart.compare/3"
    rows = {r["phase"]: r for r in doc["rows"]}
    assert rows["deserialize"]["delta_s"] == pytest.approx(rows["deserialize"]["b_s"] - rows["deserialize"]["a_s"])
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    shutil.copy(COLD, set_dir / "a.jsonl")
    shutil.copy(WARM, set_dir / "b.jsonl")
    code, out, _ = run(capsys, "compare", str(set_dir), COLD)
    assert code == 0 and "(2 start-ups; 1 cold, 1 warm)" in out


def test_capacity_p50_p95_per_instance_type_and_lead_time(capsys, tmp_path):
    code, out, _ = run(capsys, "capacity", COLD, WARM, "--provisioning", "90s", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "otel-coldstart.capacity/2"
    overall = doc["groups"][0]
    assert overall["startups"] == 2 and overall["total"]["p50_s"] <= overall["total"]["p95_s"]
    assert overall["lead_time_s"] == pytest.approx(90 + overall["total"]["p95_s"])
    assert doc["groups"][1]["attribute"] == "host.type" and doc["groups"][1]["value"] == "(not set)"
    code, out, _ = run(capsys, "capacity", COLD, WARM, "--by", "host.name")
    assert code == 0 and "host.name=" in out and "autoscaler lead time" in out
    assert run(capsys, "capacity", COLD, "--provisioning", "soon")[0] == 2


def test_two_rank_trace_text_has_rank_headers_table_and_straggler(capsys):
    code, out, _ = run(capsys, "analyze", data_file("demo-two-ranks.otlp.jsonl"))
    assert code == 0
    assert "(ready) rank 0/2 trace" in out and "(ready) rank 1/2 trace" in out
    assert "ranks of trace 7a11c0de00000000000000000000beef:" in out
    assert "rank 0 is a straggler" in out


def test_context_spans_show_in_text():
    r = root(1000)
    load = child(r, "Load weights", None, 100, 900)
    spans = [r, load, child(load, "coldstart.deserialize", "deserialize", 150, 800)]
    text = io.StringIO()
    render_startup_text(only(spans), text)
    assert "context (spans that are not ours):" in text.getvalue()
    assert "Load weights" in text.getvalue() and "contains deserialize" in text.getvalue()


@pytest.mark.process
def test_closed_pipe_ends_quietly(tmp_path):
    sys.path.insert(0, BENCHMARKS)
    import analyzer_scale  # the benchmark's generator of big start-up traces

    path = tmp_path / "big.jsonl"
    analyzer_scale.write_trace(str(path), 6000)  # ~2000 shard lines: more than a pipe buffer
    process = subprocess.Popen([sys.executable, "-m", "otel_coldstart", "analyze", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().startswith(b"model.startup")
    process.stdout.close()  # like `| head -1`
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err
