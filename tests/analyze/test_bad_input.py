"""Bad input gets one line on stderr and its documented exit code, never a traceback;
inconsistent but readable traces (cycles, duplicate ids, missing parents) are repaired."""

from __future__ import annotations

import json

import pytest

from otel_coldstart.analyze.readers import read_trace
from otel_coldstart.cli import main


def otlp(*spans, resource=None) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": resource or []},
                               "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]}


def raw_span(span_id, parent=None, name="model.startup", start="1700000000000000000",
             end="1700000001000000000", trace="ab" * 16, attrs=()):
    span = {"traceId": trace, "spanId": span_id, "name": name, "startTimeUnixNano": start,
            "endTimeUnixNano": end, "attributes": list(attrs)}
    if parent:
        span["parentSpanId"] = parent
    return span


def phase_attr(phase):
    return {"key": "coldstart.phase", "value": {"stringValue": phase}}


def run_cli(tmp_path, capsys, content: bytes | str, *extra) -> tuple[int, str]:
    path = tmp_path / "trace.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    code = main(["analyze", str(path), *extra])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize("content, needle", [
    ("", "empty"),
    ("   \n\n", "empty"),
    ("hello", "not JSON"),
    ('{"resourceSpans": [', "truncated"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    ("[" * 100000, "nested too deeply"),
    ("42", "not a trace"),
    ('{"foo": 1}', "not a trace"),
    ('{"resourceSpans": 5}', "not a list"),
    ('{"traces": []}', "search result"),
    ('{"data": [1, 2]}', "not a trace"),
])
def test_unreadable_content_is_exit_4_with_one_line(tmp_path, capsys, content, needle):
    code, err = run_cli(tmp_path, capsys, content)
    assert code == 4
    assert len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.parametrize("start", ["1e999", "99999999999999999999999999", "-5", "NaN", "abc"])
def test_out_of_range_times_are_exit_4(tmp_path, capsys, start):
    code, err = run_cli(tmp_path, capsys, json.dumps(otlp(raw_span("01", start=start))))
    assert code == 4 and "startTimeUnixNano" in err


def test_integer_with_thousands_of_digits_is_exit_4(tmp_path, capsys):
    code, err = run_cli(tmp_path, capsys, '{"resourceSpans": [], "x": ' + "9" * 5000 + "}")
    assert code == 4 and len(err.strip().splitlines()) == 1


def test_huge_float_json_number_time_is_rejected(tmp_path, capsys):
    doc = json.dumps(otlp(raw_span("01"))).replace('"1700000000000000000"', "1e400")
    code, err = run_cli(tmp_path, capsys, doc)
    assert code == 4 and "not finite" in err


def test_missing_file_is_exit_3(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope.json")]) == 3
    assert "no such file" in capsys.readouterr().err


def test_single_document_over_the_limit_is_exit_7_and_the_flag_raises_it(tmp_path, capsys):
    doc = json.dumps(otlp(raw_span("01"), *[raw_span(f"{i:02x}", "01", name="x") for i in range(2, 200)]),
                     indent=2)
    code, err = run_cli(tmp_path, capsys, doc, "--max-input-mb", "0.001")
    assert code == 7 and "--max-input-mb" in err
    assert main(["analyze", str(tmp_path / "trace.json"), "--max-input-mb", "10"]) == 0


def test_json_lines_are_streamed_past_the_document_limit(tmp_path):
    lines = [json.dumps(otlp(raw_span("01")))] + [
        json.dumps(otlp(raw_span(f"{i:02x}", "01", name="coldstart.x", attrs=[phase_attr("x")])))
        for i in range(2, 60)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    limit = max(len(line) for line in lines) + 10
    assert path.stat().st_size > limit
    assert len(read_trace(str(path), max_bytes=limit).spans) == 59


def test_truncated_json_lines_file_names_the_line_and_keeps_the_rest(tmp_path, capsys):
    line = json.dumps(otlp(raw_span("01")))
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n" + line[: len(line) // 2])
    result = read_trace(str(path))
    assert len(result.spans) == 1 and result.skipped and "line 2 is truncated" in result.skipped[0]
    assert main(["analyze", str(path)]) == 12  # a report, and a distinct exit code for CI
    captured = capsys.readouterr()
    assert "model.startup" in captured.out
    assert f"{path}: line 2 is truncated" in captured.err and "Traceback" not in captured.err


def test_parent_cycle_is_cut_and_analysed(tmp_path, capsys):
    doc = otlp(raw_span("01"),
               raw_span("02", "03", name="coldstart.a", attrs=[phase_attr("a")]),
               raw_span("03", "02", name="coldstart.b", attrs=[phase_attr("b")]),
               raw_span("04", "04", name="coldstart.self", attrs=[phase_attr("c")]))
    code, err = run_cli(tmp_path, capsys, json.dumps(doc))
    assert code == 0 and "parent loop" in err
    spans = read_trace(str(tmp_path / "trace.json")).spans
    assert sum(1 for s in spans if s.parent_id is None) == 3  # root + one per cut loop


def test_duplicate_span_ids_identical_copies_dropped_different_renamed(tmp_path):
    a = raw_span("02", "01", name="coldstart.a", attrs=[phase_attr("a")])
    b = raw_span("02", "01", name="coldstart.b", attrs=[phase_attr("b")])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(otlp(raw_span("01"), a, a, b)))
    result = read_trace(str(path))
    assert sorted(s.span_id for s in result.spans) == ["0000000000000001", "0000000000000002",
                                                       "0000000000000002#2"]
    assert len(result.warnings) == 2


def test_missing_parent_spans_are_top_level_in_the_breakdown(tmp_path, capsys):
    doc = otlp(raw_span("01"),
               raw_span("02", "99", name="coldstart.a", start="1700000000100000000",
                        end="1700000000600000000", attrs=[phase_attr("a")]))
    code, err = run_cli(tmp_path, capsys, json.dumps(doc), "--format", "json")
    assert code == 0 and "not in the input" in err


def test_unreadable_directory_entry_and_budget_usage_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(tmp_path / "empty")]) == 3
    path = tmp_path / "t.json"
    path.write_text(json.dumps(otlp(raw_span("01"))))
    assert main(["analyze", str(path), "--budget", "total"]) == 2
    assert main(["analyze", str(path), "--budget", "total=fast"]) == 2
    assert main(["analyze"]) == 2
    err = capsys.readouterr().err
    assert "KEY=DURATION" in err and "Traceback" not in err


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(otlp(raw_span("01"))).encode())
    assert len(read_trace(str(path)).spans) == 1


def test_a_500_mb_single_document_is_refused_without_reading_it(tmp_path, capsys):
    path = tmp_path / "huge.json"
    with open(path, "wb") as handle:  # sparse: 500 MiB on paper, nothing on disk
        handle.write(b'{"resourceSpans": [')
        handle.truncate(500 * 2**20)
    assert main(["analyze", str(path)]) == 7
    err = capsys.readouterr().err
    assert "500 MiB is over the 256 MiB limit" in err and len(err.strip().splitlines()) == 1
