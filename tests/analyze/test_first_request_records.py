"""The first request on hand-built records (analyze/first_request.py): its span under the root
after ready(), or only the record that it had begun; the lazy weights first read while it ran
and our spans inside it shown inside it; every format says it; capacity and whatif to the
first token count apart the start-ups without one."""

from __future__ import annotations

import io
import json

from analyze_records import MS, T0, child, only, root, shard, span_id
from otel_coldstart import semconv
from otel_coldstart.analyze.capacity import FIRST_TOKEN, capacity_summary
from otel_coldstart.analyze.first_request import FAILED, NOT_ENDED, OK, document, lines
from otel_coldstart.analyze.interrupted import complete_killed
from otel_coldstart.analyze.model import Span
from otel_coldstart.analyze.render_html import render_html
from otel_coldstart.analyze.render_json import analysis_document
from otel_coldstart.analyze.render_markdown import render_markdown
from otel_coldstart.analyze.report import Report
from otel_coldstart.analyze.whatif import project

MiB = 1 << 20


def record(parent: Span, name: str, at_ms: float, **attrs) -> Span:
    at = T0 + int(at_ms * MS)
    return Span(parent.trace_id, span_id(), parent.span_id, name, at, at, attrs, parent.resource)


def served(request_ms=(1200, 1500), status="unset", trace="ab" * 16, lazy=False, **request_attrs):
    """A 1 s start-up (one 80 ms shard), then its first request from 1.2 s to 1.5 s with a
    graph capture inside; ``lazy``: the shard left 27 MiB on storage, first read at +0.3 s."""
    r = root(1000, trace=trace)
    f = shard(r, 0, 100, 180, 87 * MiB, "cold", count=1)
    spans = [r, f]
    if lazy:
        spans.append(record(f, semconv.SPAN_SETTLEMENT, 1000, **{semconv.CACHE_STORAGE_READ_BYTES: 60 * MiB,
                                                                  semconv.LAZY_UNREAD_BYTES: 27 * MiB}))
        spans.append(record(f, semconv.SPAN_FIRST_USE, 2000, **{semconv.FIRST_USE_BYTES: 20 * MiB,
                                                                semconv.FIRST_USE_FIRST_S: 0.3,
                                                                semconv.FIRST_USE_LAST_S: 0.5,
                                                                semconv.FIRST_USE_FOLLOWED_S: 1.0}))
    start, end = request_ms
    spans.append(record(r, semconv.SPAN_FIRST_REQUEST_BEGUN, start, **{semconv.FIRST_REQUEST_SOURCE: "first_request()"}))
    if end is not None:
        request = child(r, semconv.SPAN_FIRST_REQUEST, semconv.PHASE_FIRST_REQUEST, start, end,
                        **{semconv.FIRST_REQUEST_SOURCE: "first_request()", semconv.AFTER_READY: True,
                           **request_attrs})
        if status == "error":
            request = Span(request.trace_id, request.span_id, request.parent_id, request.name, request.start_ns,
                           request.end_ns, {**request.attributes, semconv.ERROR_TYPE: "RuntimeError"},
                           request.resource, status="error")
        spans += [request, child(request, "coldstart.graph_capture", semconv.PHASE_GRAPH_CAPTURE, start + 10,
                                 start + 110, **{semconv.AFTER_READY: True})]
    return spans


def test_a_first_request_after_ready():
    b = only(complete_killed(served()))
    request = b.first_request
    assert request.status == OK and request.source == "first_request()"
    assert request.time_to_first_token_ns == 1500 * MS and request.after_ready_ns == 200 * MS
    assert request.serving_ns == 1300 * MS  # ready() + the request, the wait left out
    assert request.phases_inside == ((semconv.PHASE_GRAPH_CAPTURE, 100 * MS, 1),)
    assert b.duration_ns == 1000 * MS and all(p.phase != semconv.PHASE_GRAPH_CAPTURE for p in b.phases)
    assert lines(b) == ["first request: 300.0 ms, began 200.0 ms after ready(); time to first token 1.50 s from "
                        "process start (1.30 s without the wait for it)",
                        "  inside it: graph_capture 100.0 ms"]


def test_lazy_weights_first_read_inside_it_are_shown_inside_it():
    b = only(complete_killed(served(lazy=True)))
    doc = document(b)
    assert doc["first_use_inside"] == [{"file": "model-00001.safetensors", "bytes": 20 * MiB,
                                        "first_seen_after_ready_s": 0.3}]
    assert "  inside it: model-00001.safetensors first read from storage 0.30 s after ready() (20.0 MiB after " \
           "ready() in all)" in lines(b)
    late = only(complete_killed(served(request_ms=(1800, 1900), lazy=True)))  # read before it began: not inside
    assert document(late)["first_use_inside"] == []


def test_failed_and_never_ended():
    failed = only(complete_killed(served(status="error")))
    assert failed.first_request.status == FAILED and failed.first_request.time_to_first_token_ns is None
    assert "FAILED (RuntimeError): no time to first token" in lines(failed)[0]
    killed = only(complete_killed(served(request_ms=(1200, None))))
    assert killed.first_request.status == NOT_ENDED and document(killed)["seconds"] is None
    assert lines(killed) == ["first request: began 200.0 ms after ready() and never ended (killed during it, or "
                             "still running): no time to first token"]
    assert only(complete_killed(served()[:2])).first_request is None  # no first request: nothing said
    assert lines(only(complete_killed(served()[:2]))) == []


def test_every_format_says_it():
    b = only(complete_killed(served()))
    assert analysis_document(Report.of([b]))["startups"][0]["first_request"]["time_to_first_token_s"] == 1.5
    markdown, page = io.StringIO(), io.StringIO()
    render_markdown(Report.of([b]), markdown)
    render_html(Report.of([b]), page)
    assert "- first request: 300.0 ms" in markdown.getvalue()
    assert "<ul class=\"first-request\"><li class=\"\">first request: 300.0 ms" in page.getvalue()


def test_capacity_and_whatif_to_the_first_token():
    startups = [only(complete_killed(served(request_ms=(1000 + 100 * i, 1200 + 100 * i + 50 * i),
                                            trace=f"{i:032x}"))) for i in range(1, 4)]
    startups.append(only(complete_killed(served(status="error", trace="f" * 32))))
    startups.append(only(complete_killed(served()[:2])))  # no first request
    [group] = capacity_summary(startups, keys=(), until=FIRST_TOKEN)
    # each: ready at 1 s + its request (200 ms + 50 ms x i): 1.25, 1.30, 1.35 s
    assert group.counted == 3 and group.total.p50_ns == 1300 * MS and group.total.max_ns == 1350 * MS
    assert group.wait.p50_ns == 200 * MS
    assert dict(group.unready.reasons) == {"first request failed": 1, "no first request": 1}
    assert group.phases[semconv.PHASE_FIRST_REQUEST].p50_ns == 300 * MS
    result = project(startups, until=FIRST_TOKEN)
    assert result.baseline.n == 3 and result.baseline.total.p50_ns == 1300 * MS
    assert len(result.left_out) == 2 and any("no first token" in note for note in result.notes)
    assert json.dumps(document(startups[0]))  # plain JSON


def test_capacity_to_the_first_token_in_every_format():
    from otel_coldstart.analyze.renderers import RENDERERS
    from otel_coldstart.analyze.report import CapacityReport

    startups = [only(complete_killed(served(trace=f"{i:032x}"))) for i in range(1, 3)]
    startups.append(only(complete_killed(served()[:2])))  # no first request
    report = CapacityReport(capacity_summary(startups, keys=(), until=FIRST_TOKEN), ramp_per_min=6)
    out = {}
    for name, render in RENDERERS["capacity"].items():
        buffer = io.StringIO()
        render(report, buffer)
        out[name] = buffer.getvalue()
    assert "to first token p50 1.30 s" in out["text"] and "no first token: 1 (1 no first request)" in out["text"]
    assert "p95 to the first token" in out["text"]
    assert "Each start-up ends at its first token" in out["markdown"]
    assert "to first token p50 1.30 s" in out["html"]
    doc = json.loads(out["json"])
    assert doc["until"] == "first-token" and doc["groups"][0]["wait_for_first_request"]["p50_s"] == 0.2
    assert doc["groups"][0]["warm_pool"]["lead_time_s"] == 1.3
    assert "1.30 s p95 to the first token) / 60 s" in doc["groups"][0]["warm_pool"]["arithmetic"]
