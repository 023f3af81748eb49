"""Findings over many like start-ups, each said once (issue 39, item 11): ``analyze DIR`` over
3 start-ups of one service prints each finding once, "in 3 of 3 start-ups", with the figures
that differ as ranges; the JSON keeps every start-up's own findings."""

from __future__ import annotations

import io
import json
import re

import pytest

from analyze_records import child, root, shard, write_otlp
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.grouped_findings import group, ranged
from otel_coldstart.analyze.render import render_text
from otel_coldstart.analyze.report import Report
from otel_coldstart.cli import main

MB = 1_000_000


def _like_startup(trace: str, cold_ms: int, import_ms: int):
    """A cold shard, a warm one and an import that dominates: three findings each."""
    r = root(cold_ms + 10 + import_ms, trace=trace)
    return [r, shard(r, 0, 0, cold_ms, 400 * MB, "cold", read_bytes=400 * MB),
            shard(r, 1, cold_ms, cold_ms + 10, 400 * MB, "warm", read_bytes=0),
            child(r, "coldstart.import", semconv.PHASE_IMPORT, cold_ms + 10, cold_ms + 10 + import_ms)]


def _three():
    return [_like_startup("aa" * 16, 900, 2000), _like_startup("bb" * 16, 1000, 2100),
            _like_startup("cc" * 16, 1200, 2300)]


def test_each_finding_is_printed_once_with_its_figures_as_ranges():
    startups = breakdowns([s for spans in _three() for s in spans])
    report = Report.of(startups)
    assert len(report.findings) >= 6  # each start-up's own: two rules, three start-ups
    out = io.StringIO()
    render_text(report, out)
    text = out.getvalue().split("findings over", 1)[1]
    assert text.count("in 3 of 3 start-ups") == 2, text
    assert text.count("cold page cache") == 1 and text.count("import dominates") == 1, text
    # the cold shards' time 900 ms to 1.20 s, and the saving as the range of the three
    assert "900.0 ms–1.20 s" in text, text
    assert "could save ~890.0 ms–1.19 s" in text, text


def test_figures_that_agree_stay_single_and_different_words_keep_the_largest():
    assert ranged(["a 3 of 4 in 1.00 s", "a 3 of 4 in 900.0 ms"]) == ("a 3 of 4 in 900.0 ms–1.00 s", True)
    assert ranged(["x: 36%", "x: 40%", "x: 38%"]) == ("x: 36%–40%", True)
    assert ranged(["cold: the bottleneck", "cold: notable"]) == ("cold: the bottleneck", False)


def test_groups_count_start_ups_and_rank_by_the_largest_saving():
    startups = breakdowns([s for spans in _three() for s in spans])
    groups = group(Report.of(startups).findings, len(startups))
    assert [g.count for g in groups][:1] == [3]
    assert groups[0].rule == "cold_cache" and groups[0].savings_ns[1] >= groups[0].savings_ns[0] > 0


def test_analyze_dir_prints_each_once_and_json_keeps_every_startups_own(tmp_path, capsys):
    for index, spans in enumerate(_three()):
        write_otlp(tmp_path / f"startup-{index}.otlp.jsonl", spans)
    assert main(["analyze", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.count("in 3 of 3 start-ups") == 2 and text.count("cold page cache") == 1
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sorted(f["trace_id"] for f in document["findings"] if f["rule"] == "cold_cache") == \
        ["aa" * 16, "bb" * 16, "cc" * 16]


def test_markdown_over_several_startups_prints_each_finding_once_with_ranges(tmp_path, capsys):
    for index, spans in enumerate(_three()):
        write_otlp(tmp_path / f"startup-{index}.otlp.jsonl", spans)
    assert main(["analyze", str(tmp_path), "--format", "markdown"]) == 0
    findings = capsys.readouterr().out.split("## Findings", 1)[1]
    assert findings.count("in 3 of 3 start-ups") == 2 and findings.count("cold page cache") == 1, findings
    assert "900.0 ms–1.20 s" in findings and "could save ~890.0 ms–1.19 s" in findings, findings


@pytest.mark.process  # Chromium renders the page
def test_html_over_several_startups_shows_each_finding_once_in_chromium(tmp_path, capsys):
    from browser import dump_dom

    for index, spans in enumerate(_three()):
        write_otlp(tmp_path / f"startup-{index}.otlp.jsonl", spans)
    page = tmp_path / "report.html"
    assert main(["analyze", str(tmp_path), "--format", "html", "-o", str(page)]) == 0
    dom, console = dump_dom(str(page))
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    findings = re.findall(r'<div class="finding [a-z]+" data-rule="([a-z_]+)" data-count="(\d)">(.*?)</div>', dom, re.S)
    assert sorted((rule, count) for rule, count, _ in findings) == [("cold_cache", "3"), ("dominant_phase", "3")]
    cold = next(body for rule, _, body in findings if rule == "cold_cache")
    seen = re.sub(r"<[^>]+>", "", cold)
    assert "in 3 of 3 start-ups; could save ~890.0 ms–1.19 s" in seen and "900.0 ms–1.20 s" in seen, seen
    # each start-up it was seen in, linked to that start-up's section of the page
    for trace in ("aa" * 16, "bb" * 16, "cc" * 16):
        assert f'href="#trace-{trace}"' in cold and f'id="trace-{trace}"' in dom
