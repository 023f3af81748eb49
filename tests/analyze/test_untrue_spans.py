"""Issue 25.1 and 25.2: spans that cannot be true are repaired or left out with one warning
naming them (exit 12), a root that cannot be timed is never reported as ready, and a JSON
Lines file is read line by line whichever line is bad. Through the CLI, as a user meets it."""

from __future__ import annotations

import json

import pytest

from analyze_records import otlp_attr
from otel_coldstart.cli import main

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
TRACE = "ab" * 16




def _span(span_id, name, start_ms, end_ms, parent="0000000000000001", trace=TRACE, start_ns=None, end_ns=None,
          **attrs):
    span = {"traceId": trace, "spanId": span_id, "name": name,
            "startTimeUnixNano": str(start_ns if start_ns is not None else T0 + int(start_ms * MS)),
            "endTimeUnixNano": str(end_ns if end_ns is not None else T0 + int(end_ms * MS)),
            "attributes": [otlp_attr(k.replace("__", "."), v) for k, v in attrs.items()]}
    if parent:
        span["parentSpanId"] = parent
    return span


def _root(start_ms=0, end_ms=1000, trace=TRACE, **kw):
    return _span("0000000000000001", "model.startup", start_ms, end_ms, parent=None, trace=trace,
                 coldstart__ready=True, coldstart__end_reason="ready", **kw)


def _phase(span_id, phase, start_ms, end_ms, **kw):
    return _span(span_id, f"coldstart.{phase}", start_ms, end_ms, coldstart__phase=phase, **kw)


def _doc(*spans):
    return {"resourceSpans": [{"resource": {"attributes": [otlp_attr("service.name", "srv")]},
                               "scopeSpans": [{"spans": list(spans)}]}]}


def _analyze(tmp_path, capsys, content, *extra, name="trace.json"):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    code = main(["analyze", str(path), *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("otel-coldstart: warning:")]


def test_a_root_that_ends_before_it_starts_is_not_reported_ready(tmp_path, capsys):
    doc = _doc(_root(end_ms=-500), _phase("0000000000000002", "build_model", 0, 600),
               _phase("0000000000000003", "deserialize", 600, 900))
    code, out, err = _analyze(tmp_path, capsys, doc)
    assert code == 12
    first = out.splitlines()[0]
    assert "(ready)" not in first and "NOT READY" in first and "cannot be true" in first
    assert first.startswith("model.startup 900.0 ms")  # timed from its spans, not 0.0 ms
    assert "dominant phase: build_model" in out
    (warning,) = [w for w in _warnings(err) if "model.startup" in w]
    assert "end before start" in warning and "0000000000000001" in warning and TRACE in warning
    document = json.loads(_analyze(tmp_path, capsys, doc, "--format", "json", name="again.json")[1])
    (startup,) = document["startups"]
    assert startup["ready"] is False and startup["end_reason"] == "untimed"
    assert any("cannot be true" in s for s in document["skipped"])


@pytest.mark.parametrize("bad, why", [
    (dict(start_ms=100, end_ms=50), "end before start"),
    (dict(start_ms=100, end_ms=0, end_ns=2**63 - 1), "after 2100"),
    (dict(start_ms=100, end_ms=0, start_ns=0, end_ns=T0), "longer than a year"),
])
def test_spans_whose_times_cannot_be_true_are_left_out_by_name(tmp_path, capsys, bad, why):
    doc = _doc(_root(), _phase("0000000000000002", "build_model", 0, 300),
               _phase("00000000000000a1", "deserialize", **bad))
    code, out, err = _analyze(tmp_path, capsys, doc)
    assert code == 12
    assert "model.startup 1.00 s (ready)" in out and "deserialize" not in out.split("dominant")[0]
    (warning,) = _warnings(err)[:1]
    assert why in warning and "coldstart.deserialize 00000000000000a1" in warning and "left out" in warning
    assert "7427246454" not in out


def test_negative_sizes_and_bytes_are_dropped_with_a_warning(tmp_path, capsys):
    shard = _phase("0000000000000002", "deserialize", 0, 500, coldstart__file__path="/ckpt/a.safetensors",
                   coldstart__file__size=-1024, coldstart__bytes=-5, coldstart__cache__state="warm")
    code, out, err = _analyze(tmp_path, capsys, _doc(_root(), shard), "--format", "json")
    assert code == 12
    (startup,) = json.loads(out)["startups"]
    (read,) = startup["shards"]
    assert read["size_bytes"] is None and startup["phases"][0]["bytes"] == 0
    joined = "\n".join(_warnings(err))
    assert "coldstart.file.size dropped from 1 span(s) where it was negative" in joined
    assert "coldstart.bytes dropped" in joined and "0000000000000002" in joined


def test_spans_with_all_zero_ids_are_left_out(tmp_path, capsys):
    doc = _doc(_root(), _phase("0000000000000002", "build_model", 0, 300),
               _span("0000000000000000", "coldstart.cast", 300, 900, coldstart__phase="cast"),
               _root(trace="0" * 32))
    code, out, err = _analyze(tmp_path, capsys, doc)
    assert code == 12 and "cast" not in out.split("dominant")[0]
    assert out.count("model.startup ") == 1
    (warning,) = _warnings(err)[:1]
    assert "all-zero trace or span id" in warning and "2 span(s)" in warning


def test_a_file_where_nothing_can_be_true_is_refused_with_the_reason(tmp_path, capsys):
    code, _, err = _analyze(tmp_path, capsys, _doc(_root(trace="0" * 32)))
    assert code == 4 and "no span in it can be true" in err and "all-zero" in err


def test_compare_and_capacity_count_the_untimed_root_as_not_ready(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc(_root(), _phase("0000000000000002", "build_model", 0, 600))))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_doc(_root(end_ms=-1), _phase("0000000000000002", "build_model", 0, 600))))
    code = main(["capacity", str(good), str(bad), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 12 and "Traceback" not in err
    (group,) = json.loads(out)["groups"][:1]
    assert group["ready"] == 1


@pytest.mark.parametrize("junk", [b"garbage that is not json\n", b"{\"truncated\": \n", b"\n\nnot json at all\n"])
def test_json_lines_whose_first_line_is_junk_keep_every_other_line(tmp_path, capsys, junk):
    lines = [json.dumps(_doc(_root())), json.dumps(_doc(_phase("0000000000000002", "build_model", 0, 600))),
             json.dumps(_doc(_phase("0000000000000003", "cast", 600, 700)))]
    path = tmp_path / "t.jsonl"
    path.write_bytes(junk + "\n".join(lines).encode() + b"\n")
    code = main(["analyze", str(path)])
    out, err = capsys.readouterr()
    assert code == 12, err
    assert "build_model" in out and "cast" in out and "model.startup 1.00 s (ready)" in out
    number = junk.count(b"\n") if junk.startswith(b"\n") else 1
    assert f"line {number}" in err and "skipped" in err and "Traceback" not in err


def test_a_document_spread_over_lines_is_still_one_document(tmp_path, capsys):
    doc = _doc(_root(), _phase("0000000000000002", "build_model", 0, 600))
    code, out, err = _analyze(tmp_path, capsys, json.dumps(doc, indent=2))
    assert code == 0 and "build_model" in out and not _warnings(err)
    code, _, err = _analyze(tmp_path, capsys, "junk\n" + json.dumps(doc, indent=2), name="junk.json")
    assert code == 4 and "not JSON" in err
