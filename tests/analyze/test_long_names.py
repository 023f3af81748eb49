"""Issue 25.5: labels keep what tells files apart. Forty-eight shards whose names share a
100-character prefix are cut in the middle, keeping the shard number, the end of the name and
the state, in the text report and the waterfall; the full name stays in the tooltip and the
HTML files table. The SVG and the HTML page are checked in headless Chromium."""

from __future__ import annotations

import json
import re

import pytest

from analyze_records import otlp_attr
from browser import dump_dom, screenshot, with_clip_check
from otel_coldstart.analyze.labels import distinct_labels, shorten
from otel_coldstart.cli import main

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
PREFIX = "/mnt/weights/" + "meta-llama-3.1-405b-instruct-fp8-dynamic-tensor-parallel-8-pipeline-parallel-2-"
PREFIX += "x" * (100 - len(PREFIX))
NAMES = [f"{PREFIX}-{i:05d}-of-00048.safetensors" for i in range(1, 49)]




def _trace(tmp_path) -> str:
    trace = "ab" * 16
    spans = [{"traceId": trace, "spanId": f"{1:016x}", "name": "model.startup", "startTimeUnixNano": str(T0),
              "endTimeUnixNano": str(T0 + 2000 * MS), "attributes": [otlp_attr("coldstart.ready", True)]}]
    for index, path in enumerate(NAMES):
        start = T0 + (10 + index * 40) * MS
        spans.append({"traceId": trace, "spanId": f"{index + 2:016x}", "parentSpanId": f"{1:016x}",
                      "name": "coldstart.deserialize", "startTimeUnixNano": str(start),
                      "endTimeUnixNano": str(start + (30 if index else 35) * MS), "attributes": [
                          otlp_attr("coldstart.phase", "deserialize"), otlp_attr("coldstart.file.path", path),
                          otlp_attr("coldstart.file.size", 1 << 20), otlp_attr("coldstart.shard.index", index),
                          otlp_attr("coldstart.cache.state", "cold" if index == 16 else "warm")]})
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                   "scopeSpans": [{"spans": spans}]}]}))
    return str(path)


def test_middle_ellipsis_keeps_the_number_and_the_end():
    labels = distinct_labels([n.rsplit("/", 1)[1] for n in NAMES], 44)
    assert len(set(labels)) == 48 and all(len(label) <= 44 for label in labels)
    assert labels[16].endswith("00017-of-00048.safetensors") and labels[16].startswith("meta-llama")
    # the number in the middle of a long shared end is kept too
    middle = [f"model-{i:05d}-of-00048-" + "h" * 60 + ".bin" for i in range(1, 49)]
    assert all(f"{i:05d}" in label for i, label in enumerate(distinct_labels(middle, 40), start=1))
    assert shorten("short.bin", 40) == "short.bin"  # nothing to cut: nothing cut


@pytest.mark.process  # starts a process of its own (the CLI, or headless Chromium)
def test_text_report_and_waterfall_keep_48_shard_names_apart(tmp_path, capsys):
    trace = _trace(tmp_path)
    assert main(["analyze", trace, "--waterfall", str(tmp_path / "wf")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.split("shards:")[1].splitlines() if ".safetensors" in line]
    assert len(rows) == 12  # issue 39: a long list is collapsed to the cold and slowest, then one line
    assert "... and 36 more shard(s): 36.0 MiB" in out
    names = [re.split(r"\s{2,}", row.strip())[1] for row in rows]
    assert len(set(names)) == 12
    for row, name in zip(rows, names):
        number = int(re.search(r"(\d{5})-of-00048\.safetensors", name).group(1))
        assert row.rstrip().endswith("cold" if number == 17 else "warm")
    assert any(row.rstrip().endswith("cold") for row in rows)  # the cold one is always listed

    (svg,) = (tmp_path / "wf").iterdir()
    text = svg.read_text()
    labels = re.findall(r'<g class="row shard" data-state="(\w+)"><text class="label"[^>]*>([^<]*)</text>', text)
    assert len(labels) == 48 and len({label for _, label in labels}) == 48  # main: 2 distinct for 49 rows
    for state, label in labels:
        assert label.endswith(f"-of-00048.safetensors ({state})") and re.search(r"000\d\d-of", label)
    tips = re.findall(r"<title>([^<]*)</title>", text)
    assert all(any(tip.startswith(name + ":") for tip in tips) for name in NAMES)  # the full name on hover

    page = tmp_path / "svg.html"
    page.write_text(with_clip_check(text))
    dom, console = dump_dom(str(page))
    assert json.loads(re.search(r'<pre id="clip-check">(.*?)</pre>', dom).group(1).replace("&quot;", '"')) == []
    assert not [line for line in console if "Error" in line]


@pytest.mark.process  # starts a process of its own (the CLI, or headless Chromium)
def test_html_files_table_has_the_full_names_and_the_page_renders(tmp_path, capsys):
    trace = _trace(tmp_path)
    report = tmp_path / "report.html"
    assert main(["analyze", trace, "--format", "html", "-o", str(report)]) == 0
    capsys.readouterr()
    html = report.read_text()
    for name in NAMES:
        basename = name.rsplit("/", 1)[1]
        assert f'<td title="{name}">{basename}</td>' in html
    page = tmp_path / "checked.html"
    page.write_text(with_clip_check(html))
    dom, console = dump_dom(str(page))
    assert 'data-rendered="1"' in dom
    assert json.loads(re.search(r'<pre id="clip-check">(.*?)</pre>', dom).group(1).replace("&quot;", '"')) == []
    png = tmp_path / "long-names.png"
    screenshot(str(report), str(png), height=3000)
    assert png.stat().st_size > 10_000
    keep = pytest.importorskip("os").environ.get("OTEL_COLDSTART_KEEP_SCREENSHOTS")
    if keep:  # for a person to look at: OTEL_COLDSTART_KEEP_SCREENSHOTS=/some/dir
        import shutil
        shutil.copy(png, keep)


# --- issue 39 item 10: what differs among siblings, whatever else is beside them --------------

def test_one_other_file_beside_the_shards_does_not_make_them_one_label():
    """On main the common prefix was taken over every name shown: one adapter file beside 48
    shards shares none, so each shard's "distinct part" was its whole name, cut before the
    number: 48 shards, one label."""
    basenames = [n.rsplit("/", 1)[1] for n in NAMES]
    for odd in ("adapter_model.safetensors", "z-draft-model.safetensors", "consolidated.00.pth"):
        labels = distinct_labels([*basenames, odd], 44)
        assert len(set(labels)) == 49, (odd, labels[:3])
        for number, label in enumerate(labels[:48], start=1):
            assert f"{number:05d}-of-00048.safetensors" in label and len(label) <= 44
    # names that differ only in the middle of a long shared start and end
    middle = [f"{PREFIX}-{tag}-" + "q" * 80 + ".safetensors" for tag in ("alpha", "beta", "gamma")]
    labels = distinct_labels([*middle, "other.bin"], 40)
    assert all(tag in label for tag, label in zip(("alpha", "beta", "gamma"), labels))


# --- issue 39 item 14: a 2,000-file start-up does not print 2,000 lines ------------------------

def _many_files_trace(tmp_path, count=2000) -> str:
    trace = "cd" * 16
    spans = [{"traceId": trace, "spanId": f"{1:016x}", "name": "model.startup", "startTimeUnixNano": str(T0),
              "endTimeUnixNano": str(T0 + (count + 100) * MS), "attributes": [otlp_attr("coldstart.ready", True)]}]
    for index in range(count):
        start = T0 + (10 + index) * MS
        took = 0.9 if index not in (700, 1500) else 7.0  # two slow ones
        cold = index in (3, 1999)
        spans.append({"traceId": trace, "spanId": f"{index + 2:016x}", "parentSpanId": f"{1:016x}",
                      "name": "coldstart.deserialize", "startTimeUnixNano": str(start),
                      "endTimeUnixNano": str(start + int(took * MS)), "attributes": [
                          otlp_attr("coldstart.phase", "deserialize"),
                          otlp_attr("coldstart.file.path", f"/ckpt/layers/layer-{index:05d}.safetensors"),
                          otlp_attr("coldstart.file.size", 4096), otlp_attr("coldstart.shard.index", index),
                          otlp_attr("coldstart.cache.state", "cold" if cold else "warm")]})
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                   "scopeSpans": [{"spans": spans}]}]}))
    return str(path)


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_long_shard_list_is_collapsed_in_text_and_whole_in_json(tmp_path, capsys, fmt):
    trace = _many_files_trace(tmp_path)
    assert main(["analyze", trace, "--format", fmt]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"layer-(\d{5})\.safetensors", out)
    assert len(out.splitlines()) < 60 and len(listed) == 12, len(out.splitlines())  # main: 2,000 lines
    assert {"00003", "01999", "00700", "01500"} <= set(listed)  # the cold ones and the slowest
    assert listed == sorted(listed)  # in read order
    (summary,) = [line for line in out.splitlines() if "more shard(s)" in line]
    # 1,988 left out, 4 KiB each, 0.9 ms each
    assert "1,988 more shard(s): 7.8 MiB, 1.79 s in all (0.9 ms each), 1,988 warm" in summary, summary
    assert main(["analyze", trace, "--format", "json"]) == 0
    (startup,) = json.loads(capsys.readouterr().out)["startups"]
    assert len(startup["shards"]) == 2000
