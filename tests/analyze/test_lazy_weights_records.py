"""Lazy weights on hand-built records: a file still partly on storage at ready() (its final
settlement record says how much), its first-use records after ready(), the summary lines, the
JSON rows and the ``lazy_weights`` finding; and no word of it for a resident file, a file
nothing maps any more (no attribute), a start-up that never got ready, or a few pages."""

from __future__ import annotations

import io
import json

from analyze_records import MS, T0, child, only, root, shard, span_id
from otel_coldstart import semconv
from otel_coldstart.analyze.findings import find, lazy_weights
from otel_coldstart.analyze.interrupted import complete_killed
from otel_coldstart.analyze.lazy import lazy_files, lines
from otel_coldstart.analyze.model import Span
from otel_coldstart.analyze.render import render_text, saving_text
from otel_coldstart.analyze.render_html import render_html
from otel_coldstart.analyze.render_json import analysis_document, render_json
from otel_coldstart.analyze.render_markdown import render_markdown
from otel_coldstart.analyze.report import Report

MiB = 1 << 20
SIZE = 87 * MiB


def record(parent: Span, name: str, at_ms: float, **attrs) -> Span:
    at = T0 + int(at_ms * MS)
    return Span(parent.trace_id, span_id(), parent.span_id, name, at, at, attrs, parent.resource)


def lazy_startup(unread: int | None = 27 * MiB, ready: bool = True, first_use: list[dict] | None = None):
    """A 1 s start-up whose one 87 MiB file read 60 MiB from storage in its 80 ms span, then
    its settlement at ready() (with ``unread`` still out of the page cache), then first-use
    records after ready()."""
    r = root(1000, **{semconv.READY: ready})
    f = shard(r, 0, 100, 180, SIZE, "cold", count=1)
    f.attributes.update({semconv.CACHE_STORAGE_READ_BYTES: 50 * MiB, semconv.CACHE_STORAGE_READ_PROVISIONAL: True})
    settled = {semconv.CACHE_STORAGE_READ_BYTES: 60 * MiB, semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES: 0,
               semconv.CACHE_SETTLED_RESIDENT_RATIO: 0.69}
    if unread is not None:
        settled[semconv.LAZY_UNREAD_BYTES] = unread
    spans = [r, f, record(f, semconv.SPAN_SETTLEMENT, 1000, **settled)]
    for number, attrs in enumerate(first_use or ()):
        spans.append(record(f, semconv.SPAN_FIRST_USE, 1500 + 1000 * number, **attrs))
    return only(complete_killed(spans))


def test_the_unread_bytes_make_the_line_and_the_finding_with_its_estimate():
    b = lazy_startup()
    [item] = lazy_files(b)
    assert item.unread_bytes == 27 * MiB and item.name == "model-00001.safetensors"
    assert item.rate == 60 * MiB / 0.080  # the file's own: its bytes from storage over its span
    assert lines(b) == ["27.0 MiB of model-00001.safetensors not read yet: the first forward pass will read it "
                        "from storage"]
    [f] = lazy_weights.check(b)
    assert f.rule == "lazy_weights" and f.saves_first_requests and f.share == 0.0 and not f.claims
    assert f.saving_ns == int(27 * MiB / (60 * MiB / 0.080) * 1e9)  # 36 ms
    assert "27.0 MiB of weights not read at ready()" in f.title
    assert "disable_mmap=True" in f.lever and "warm-up forward pass" in f.lever
    assert "first requests' time, not the start-up's" in f.estimate
    assert saving_text(f) == "could save the first requests ~36.0 ms"
    assert f in find([b])


def test_the_rate_comes_from_the_bytes_read_inside_the_span_only():
    r = root(1000)
    f = shard(r, 0, 100, 180, SIZE, "cold", count=1)
    f.attributes.update({semconv.CACHE_STORAGE_READ_BYTES: 60 * MiB,
                         semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES: 20 * MiB,  # read after the span: not its time
                         semconv.LAZY_UNREAD_BYTES: 27 * MiB})
    [item] = lazy_files(only([r, f]))
    assert item.rate == 40 * MiB / 0.080


def test_no_rate_no_estimate_and_the_floor_is_the_last_resort():
    from otel_coldstart.analyze.storage_floor import StorageFloor

    r = root(1000)
    f = shard(r, 0, 100, 180, SIZE, "warm", count=1)  # read nothing from storage in its span
    f.attributes.update({semconv.CACHE_STORAGE_READ_BYTES: 0, semconv.LAZY_UNREAD_BYTES: 27 * MiB})
    b = only([r, f])
    [finding] = lazy_weights.check(b)
    assert finding.saving_ns == 0 and "no cold read rate known" in finding.estimate
    [with_floor] = lazy_weights.check(b, StorageFloor("floor.json", cold_bytes_per_s=270 * MiB,
                                                      warm_bytes_per_s=2000 * MiB))
    assert with_floor.saving_ns == 100 * MS and "storage floor" in with_floor.estimate


def test_the_latest_first_use_record_is_merged_and_shown():
    b = lazy_startup(first_use=[
        {semconv.FIRST_USE_BYTES: 12 * MiB, semconv.FIRST_USE_UNREAD_BYTES: 17 * MiB, semconv.FIRST_USE_FIRST_S: 0.5,
         semconv.FIRST_USE_LAST_S: 0.5, semconv.FIRST_USE_FOLLOWED_S: 0.5, semconv.FIRST_USE_BOUND_S: 300.0},
        {semconv.FIRST_USE_BYTES: 29 * MiB, semconv.FIRST_USE_UNREAD_BYTES: 0, semconv.FIRST_USE_FIRST_S: 0.5,
         semconv.FIRST_USE_LAST_S: 2.25, semconv.FIRST_USE_FOLLOWED_S: 2.25, semconv.FIRST_USE_BOUND_S: 300.0,
         semconv.FIRST_USE_END: semconv.FIRST_USE_END_RESIDENT},
    ])
    assert not [s for s in b.spans if s.name in (semconv.SPAN_FIRST_USE, semconv.SPAN_SETTLEMENT)]
    assert b.after_ready == 0  # records after ready() are no work after ready()
    [item] = lazy_files(b)
    assert item.first_use.bytes == 29 * MiB and item.first_use.end == "resident"
    assert lines(b)[1] == ("  first use: 29.0 MiB of model-00001.safetensors read from storage between 0.50 s and "
                           "2.25 s after ready(); the whole file is in the page cache now")
    [f] = lazy_weights.check(b)
    assert any(line.startswith("first use: 29.0 MiB") for line in f.evidence)


def test_first_use_wording_for_each_end():
    def line(**attrs):
        attrs = {semconv.FIRST_USE_BYTES: 0, semconv.FIRST_USE_UNREAD_BYTES: 27 * MiB,
                 semconv.FIRST_USE_FOLLOWED_S: 300.0, semconv.FIRST_USE_BOUND_S: 300.0, **attrs}
        return lines(lazy_startup(first_use=[attrs]))[1]

    assert "nothing of model-00001.safetensors read from storage in 300.0 s" in line(
        **{semconv.FIRST_USE_END: semconv.FIRST_USE_END_BOUND})
    assert "27.0 MiB still on storage when following stopped at 300 s" in line(
        **{semconv.FIRST_USE_END: semconv.FIRST_USE_END_BOUND})
    assert "when the process ended (exit) at 300.0 s" in line(**{semconv.FIRST_USE_END: semconv.END_EXIT})
    assert "still followed, or killed" in line()


def test_nothing_for_a_resident_copied_unready_or_nearly_whole_file():
    assert lazy_files(lazy_startup(unread=None)) == []  # resident at ready(), or its tensors copied: no attribute
    assert lazy_files(lazy_startup(ready=False)) == []  # cut short: nothing is "at ready()"
    assert lazy_files(lazy_startup(unread=512 * 1024)) == []  # under 1 MiB
    big = 10 * 1024 * MiB  # a 10 GiB file with 50 MiB out: under 1% of it
    r = root(1000)
    f = shard(r, 0, 100, 180, big, "cold", count=1)
    f.attributes[semconv.LAZY_UNREAD_BYTES] = 50 * MiB
    assert lazy_files(only([r, f])) == [] and lazy_weights.check(only([r, f])) == []
    assert not [f for f in find([lazy_startup(unread=None)]) if f.rule == "lazy_weights"]


def test_every_renderer_says_it():
    b = lazy_startup(first_use=[{semconv.FIRST_USE_BYTES: 29 * MiB, semconv.FIRST_USE_FIRST_S: 0.5,
                                 semconv.FIRST_USE_LAST_S: 2.0, semconv.FIRST_USE_FOLLOWED_S: 2.0,
                                 semconv.FIRST_USE_END: semconv.FIRST_USE_END_RESIDENT}])
    report = Report.of([b])

    def rendered(render) -> str:  # every renderer has the one signature render(report, out)
        out = io.StringIO()
        render(report, out)
        return out.getvalue()

    text = rendered(render_text)
    assert "  27.0 MiB of model-00001.safetensors not read yet: the first forward pass will read it" in text
    assert "could save the first requests ~36.0 ms" in text
    parsed = json.loads(rendered(render_json))
    [row] = parsed["startups"][0]["lazy_weights"]
    assert row["unread_at_ready_bytes"] == 27 * MiB and row["first_use"]["bytes"] == 29 * MiB
    assert row["first_use"]["end"] == "resident" and row["read_rate_bytes_per_s"] == 60 * MiB / 0.080
    [lazy] = [f for f in parsed["findings"] if f["rule"] == "lazy_weights"]
    assert lazy["saving_of"] == "first_requests"
    assert {f["saving_of"] for f in parsed["findings"] if f["rule"] != "lazy_weights"} <= {"startup"}
    markdown = rendered(render_markdown)
    assert "- 27.0 MiB of model-00001.safetensors not read yet" in markdown
    assert "  - first use: 29.0 MiB" in markdown
    assert "<ul class=\"lazy-weights\"><li class=\"partial\">27.0 MiB of model-00001.safetensors" in rendered(render_html)


def test_no_lazy_rows_for_a_start_up_without_them():
    r = root(1000)
    b = only([r, child(r, "coldstart.cast", "cast", 0, 100)])
    doc = analysis_document(Report.of([b]))
    assert doc["startups"][0]["lazy_weights"] == []
