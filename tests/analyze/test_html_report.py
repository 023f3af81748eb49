"""The HTML report and the SVG waterfall, as a person sees them: rendered in headless
Chromium from real trace files (the demo's cold-first-shard and warm start-ups), with
assertions on the DOM after scripts ran, the console, what is clipped, and the pixels."""

from __future__ import annotations

import json
import re

import pytest

from analyze_records import data_file
from browser import count_colour, dump_dom, png_pixels, screenshot, with_clip_check
from otel_coldstart.analyze.waterfall import STATE_COLOURS, nice_step, tick_label
from otel_coldstart.cli import main

COLD = data_file("demo-cold-first-shard.otlp.jsonl")
WARM = data_file("demo-warm.otlp.jsonl")
COLD_FILE = "model-00001-of-00004.safetensors"


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


@pytest.fixture
def report(tmp_path, capsys):
    path = tmp_path / "report.html"
    assert main(["analyze", COLD, WARM, "--format", "html", "-o", str(path),
                 "--trace-url", "http://jaeger:16686/trace/{trace_id}"]) == 0
    capsys.readouterr()
    return path


def test_report_is_self_contained(report):
    text = report.read_text()
    assert "default-src 'none'" in text  # the CSP forbids any request
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//(?!jaeger:16686/trace/)""", text)
    assert "<link" not in text and "@import" not in text and "url(http" not in text
    assert 'href="http://jaeger:16686/trace/4e5c3f5f55b907e2df77600f59a0949d"' in text


@pytest.mark.process
def test_report_in_chromium_shows_the_cold_shard_coloured_without_errors_or_clipping(report, tmp_path):
    page = tmp_path / "checked.html"
    page.write_text(with_clip_check(report.read_text()))
    dom, console = dump_dom(str(page))
    assert 'data-rendered="1"' in dom  # the page's own script ran
    assert not [line for line in console if "Uncaught" in line or "Error" in line], console
    clipped = json.loads(re.search(r'<pre id="clip-check">(.*?)</pre>', dom).group(1).replace("&quot;", '"'))
    assert clipped == []
    # the cold shard's row in the waterfall: labelled with the file and its state, coloured cold
    row = re.search(r'<g class="row shard" data-state="cold">(.*?)</g>', dom)
    assert row and f"{COLD_FILE} (cold)" in row.group(1)
    assert f'fill="{STATE_COLOURS["cold"]}"' in row.group(1)
    assert re.search(r'<tr data-state="cold"><td>0</td><td[^>]*>' + re.escape(COLD_FILE), dom)
    assert "Cold rate per checkpoint file" in dom and "p95" in dom  # several start-ups: fleet tables
    assert "could save" in dom and "Estimate:" in dom  # findings with evidence


@pytest.mark.process
def test_report_screenshot_has_the_cold_colour(report, tmp_path):
    png = tmp_path / "shot.png"
    screenshot(str(report), str(png))
    width, height, rows = png_pixels(str(png))
    assert width == 1400 and height == 2400
    assert count_colour(rows, _rgb(STATE_COLOURS["cold"])) >= 40  # the cold bar and legend swatch are drawn
    assert count_colour(rows, _rgb(STATE_COLOURS["warm"])) >= 20


@pytest.mark.process
def test_clip_check_and_console_can_fail(tmp_path):
    """The checks above are not vacuous: a clipped label and a script error are caught."""
    page = tmp_path / "bad.html"
    page.write_text(with_clip_check('<svg width="100" height="20" viewBox="0 0 100 20">'
                                    '<text x="90" y="15">far too long a label</text></svg>'
                                    "<script>undefinedFunction();</script>"))
    dom, console = dump_dom(str(page))
    assert "far too long a label" in re.search(r'<pre id="clip-check">(.*?)</pre>', dom).group(1)
    assert any("Uncaught" in line for line in console)


@pytest.mark.process
def test_svg_waterfall_in_chromium_nothing_clipped(tmp_path, capsys):
    assert main(["analyze", COLD, "--waterfall", str(tmp_path / "wf")]) == 0
    capsys.readouterr()
    [svg] = list((tmp_path / "wf").iterdir())
    text = svg.read_text()
    assert f"{COLD_FILE} (cold)" in text
    page = tmp_path / "svg.html"
    page.write_text(with_clip_check(text))
    dom, console = dump_dom(str(page))
    assert json.loads(re.search(r'<pre id="clip-check">(.*?)</pre>', dom).group(1).replace("&quot;", '"')) == []
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', text)
    assert ticks == ["0", "1 s", "2 s", "3 s"]  # 1-2-5 steps, no 333.1 ms


def test_nice_ticks_and_labels():
    assert nice_step(3_331_000_000) == 1_000_000_000 and nice_step(2_000_000_000) == 500_000_000
    assert nice_step(42_000_000) == 10_000_000
    assert nice_step(120_000_000_000) == 20_000_000_000
    assert tick_label(1_500_000_000, 500_000_000, 3_300_000_000) == "1.5 s"
    assert tick_label(20_000_000, 10_000_000, 42_000_000) == "20 ms"
    assert tick_label(0, 1, 1) == "0"


def test_tiny_spans_get_a_visible_width_and_gaps_are_hatched(tmp_path):
    from analyze_records import child, only, root
    from otel_coldstart.analyze.render_svg import MIN_BAR_W, svg_waterfall
    r = root(60_000)
    b = only([r, child(r, "coldstart.h2d", "h2d", 100, 100.02), child(r, "coldstart.cast", "cast", 30_000, 59_000)])
    text = svg_waterfall(b)
    widths = [float(w) for w in re.findall(r'class="bar" x="[^"]+" y="[^"]+" width="([^"]+)"', text)]
    assert min(widths) >= MIN_BAR_W
    assert 'class="gap"' in text and 'fill="url(#gap)"' in text and "#c0392b" in text


def test_trace_content_is_escaped_in_html_and_svg(tmp_path, capsys):
    hostile = '<script>alert(1)</script>"&'
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "host.name", "value": {"stringValue": hostile}}]},
                              "scopeSpans": [{"spans": [
        {"traceId": "ab" * 16, "spanId": "01", "name": "model.startup", "startTimeUnixNano": "1000000000",
         "endTimeUnixNano": "2000000000", "attributes": [{"key": "coldstart.ready", "value": {"boolValue": True}}]},
        {"traceId": "ab" * 16, "spanId": "02", "parentSpanId": "01", "name": hostile,
         "startTimeUnixNano": "1100000000", "endTimeUnixNano": "1500000000",
         "attributes": [{"key": "coldstart.phase", "value": {"stringValue": hostile}},
                        {"key": "coldstart.file.path", "value": {"stringValue": "/x/" + hostile}}]}]}]}]}
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "r.html"
    assert main(["analyze", str(trace), "--format", "html", "-o", str(out), "--waterfall", str(tmp_path / "wf")]) == 0
    capsys.readouterr()
    for path in [out, *(tmp_path / "wf").iterdir()]:
        text = path.read_text()
        assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)" in text


@pytest.mark.process
def test_capacity_html_and_markdown(tmp_path, capsys):
    assert main(["capacity", COLD, WARM, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| all start-ups | 2 |" in out and "fewer than 20" in out and "dominant phase" in out
    page = tmp_path / "cap.html"
    assert main(["capacity", COLD, WARM, "--format", "html", "-o", str(page)]) == 0
    capsys.readouterr()
    dom, console = dump_dom(str(page))
    assert "n=2" in dom and "caveat" in dom and "autoscaler lead time" in dom
    assert not [line for line in console if "Uncaught" in line]
