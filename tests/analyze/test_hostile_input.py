"""Issue 16, analyzer side: hostile documents, unbounded inputs, hostile CLI values, a
closed or full stdout, and Markdown/terminal injection. Each case gets one line on stderr
and its documented exit code (docs/cli.md), never a traceback; the black-box cases run the
real command in a fresh process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import pytest

from otel_coldstart.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACE = "ab" * 16


def _otlp(child_attrs: dict, child_name: str = "coldstart.cast") -> dict:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [
        {"traceId": TRACE, "spanId": "1" * 16, "name": "model.startup", "startTimeUnixNano": "1000000000",
         "endTimeUnixNano": "9000000000", "attributes": []},
        {"traceId": TRACE, "spanId": "2" * 16, "parentSpanId": "1" * 16, "name": child_name,
         "startTimeUnixNano": "2000000000", "endTimeUnixNano": "3000000000",
         "attributes": [{"key": k, "value": v} for k, v in child_attrs.items()]}]}]}]}


def _jaeger(child_tags: list, process_id=("p1",)) -> dict:
    pid = process_id[0]
    return {"data": [{"traceID": TRACE, "processes": {"p1": {"serviceName": "s", "tags": []}}, "spans": [
        {"traceID": TRACE, "spanID": "1" * 16, "operationName": "model.startup", "startTime": 1000000,
         "duration": 8000000, "tags": [], "processID": pid},
        {"traceID": TRACE, "spanID": "2" * 16, "operationName": "coldstart.cast", "startTime": 2000000,
         "duration": 1000000, "tags": child_tags, "processID": pid,
         "references": [{"refType": "CHILD_OF", "traceID": TRACE, "spanID": "1" * 16}]}]}]}


CAST = {"coldstart.phase": {"stringValue": "cast"}}
HOSTILE_DOCUMENTS = {
    "otlp intValue Infinity": _otlp({**CAST, "coldstart.bytes": {"intValue": float("inf")}}),
    "otlp intValue NaN": _otlp({**CAST, "coldstart.bytes": {"intValue": float("nan")}}),
    "otlp 400-digit intValue string": _otlp({**CAST, "coldstart.bytes": {"intValue": "9" * 400}}),
    "otlp 400-digit intValue literal": _otlp({**CAST, "coldstart.io.read_bytes": {"intValue": 10**400},
                                              "coldstart.bytes": {"intValue": -10**400}}),
    "otlp empty phase with io.read_bytes": _otlp({"coldstart.phase": {"stringValue": ""},
                                                  "coldstart.io.read_bytes": {"intValue": "99999999"}}),
    "jaeger int64 Infinity": _jaeger([{"key": "coldstart.phase", "type": "string", "value": "cast"},
                                      {"key": "coldstart.bytes", "type": "int64", "value": float("inf")}]),
    "jaeger 400-digit int64": _jaeger([{"key": "coldstart.phase", "type": "string", "value": "cast"},
                                       {"key": "coldstart.bytes", "type": "int64", "value": "9" * 400}]),
    "jaeger untyped 400-digit tag": _jaeger([{"key": "coldstart.phase", "value": "cast"},
                                             {"key": "coldstart.bytes", "value": "9" * 400}]),
    "jaeger processID []": _jaeger([], process_id=([],)),
    "jaeger processID {}": _jaeger([], process_id=({},)),
}


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize("name", sorted(HOSTILE_DOCUMENTS))
@pytest.mark.parametrize("command", ["analyze", "analyze-json", "analyze-markdown", "compare", "capacity"])
def test_hostile_documents_never_raise(tmp_path, capsys, name, command):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(HOSTILE_DOCUMENTS[name], allow_nan=True))
    argv = {"analyze": ["analyze", str(path)], "analyze-json": ["analyze", "--format", "json", str(path)],
            "analyze-markdown": ["analyze", "--format", "markdown", str(path)],
            "compare": ["compare", str(path), str(path), "--include-unready"],  # these roots say no ready()
            "capacity": ["capacity", str(path), "--include-unready"]}[command]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    if command == "analyze-json":
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON output"))


def test_out_of_range_ints_are_dropped_not_kept(tmp_path):
    from otel_coldstart.analyze.readers import read_trace

    path = tmp_path / "t.json"
    path.write_text(json.dumps(HOSTILE_DOCUMENTS["otlp 400-digit intValue literal"]))
    (child,) = [s for s in read_trace(str(path)).spans if s.name == "coldstart.cast"]
    assert child.attributes["coldstart.io.read_bytes"] is None and child.attributes["coldstart.bytes"] is None


def _cli(*argv, timeout=60, stdout=subprocess.PIPE, **kwargs):
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=ROOT), **kwargs)


@pytest.mark.process
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_are_refused_without_reading(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    result = _cli("analyze", device, timeout=30)
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        f"otel-coldstart: error: {device}: not a regular file (a device, FIFO or socket); save the trace to a file"]


@pytest.mark.process
def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    for _ in range(5):
        result = _cli("analyze", str(fifo), timeout=30)  # a blocking open would hang here
        assert result.returncode == 3 and "not a regular file" in result.stderr


@pytest.mark.process
def test_a_fifo_is_refused_and_left_to_its_writer(tmp_path):
    fifo = str(tmp_path / "trace.json")
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # succeeds only if someone reads
        except OSError:
            return
        opened.set()
        os.close(fd)

    # The refusal does not depend on timing (a reader that opened the FIFO would block with no
    # writer, past the timeout): 3 runs show it, the 20 of before took a minute under load.
    for _ in range(3):
        result = _cli("analyze", fifo, timeout=30)
        assert result.returncode == 3
        thread = threading.Thread(target=writer)
        thread.start()
        thread.join(5)
        assert not opened.is_set()  # nobody holds the FIFO open for reading


@pytest.mark.process
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_floor_refuses_devices_and_fifos(tmp_path, kind):
    path = "/dev/zero" if kind == "device" else str(tmp_path / "fifo")
    if kind == "fifo":
        os.mkfifo(path)
    result = _cli("floor", "--repeat", "1", path, timeout=30)
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        f"otel-coldstart: error: {path}: not a regular file (a device, FIFO or socket)"]


@pytest.mark.process
def test_floor_block_size_is_bounded(tmp_path):
    data = tmp_path / "w.bin"
    data.write_bytes(b"\0" * 8192)
    result = _cli("floor", "--block-size", "99999999999999", str(data))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "--block-size" in result.stderr


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_otlp(CAST)))
    return str(path)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "0"])
def test_max_input_mb_values(capsys, trace_file, value):
    code, _, err = _run(capsys, "analyze", f"--max-input-mb={value}", trace_file)
    assert code == 2 and "--max-input-mb" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1"])
def test_timeout_values(capsys, value):
    code, _, err = _run(capsys, "analyze", "--jaeger", "http://127.0.0.1:9", "--service", "s", f"--timeout={value}")
    assert code == 2 and "--timeout" in err and len(err.strip().splitlines()) == 1


def test_deeply_nested_budget_file(capsys, tmp_path, trace_file):
    budget = tmp_path / "budget.json"
    budget.write_text('{"a":' * 100000 + "1" + "}" * 100000)
    code, _, err = _run(capsys, "analyze", "--budget-file", str(budget), trace_file)
    assert code == 2 and "nested too deeply" in err


def test_budget_file_that_is_a_device_is_refused(capsys, trace_file):
    code, _, err = _run(capsys, "analyze", "--budget-file", "/dev/zero", trace_file)
    assert code == 3 and "not a regular file" in err


@pytest.mark.process
@pytest.mark.parametrize("command", ["analyze", "compare", "capacity", "floor"])
def test_closed_stdout_is_one_line_and_exit_10(tmp_path, trace_file, command):
    # (the trace's root says no ready(): compare and capacity are asked to count it)
    argv = {"analyze": ["analyze", trace_file], "compare": ["compare", trace_file, trace_file, "--include-unready"],
            "capacity": ["capacity", trace_file, "--include-unready"],
            "floor": ["floor", "--repeat", "1", "--only", "warm", trace_file]}
    result = _cli(*argv[command], stdout=subprocess.DEVNULL, pass_fds=())
    assert result.returncode == 0  # the control: an open stdout works
    closed = subprocess.run(
        ["sh", "-c", 'exec "$0" -m otel_coldstart "$@" >&-', sys.executable, *argv[command]],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert closed.returncode == 10, closed.stderr
    assert closed.stderr.strip().splitlines() == ["otel-coldstart: error: cannot write the output: stdout is closed"]


@pytest.mark.process
@pytest.mark.parametrize("command", ["analyze", "compare", "capacity"])
def test_full_stdout_is_one_line_and_exit_10(trace_file, command):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    argv = {"analyze": ["analyze", trace_file], "compare": ["compare", trace_file, trace_file, "--include-unready"],
            "capacity": ["capacity", trace_file, "--include-unready"]}
    with open("/dev/full", "w") as full:
        result = _cli(*argv[command], stdout=full)
    assert result.returncode == 10, result.stderr
    assert result.stderr.strip().splitlines() == [
        "otel-coldstart: error: cannot write the output: No space left on device"]


HOSTILE_PHASE = "<script>alert(1)</script> [link](http://evil) | `x` \x1b[31mred\x1b]0;title\x07 \u202eevil"


def test_markdown_escapes_everything_from_the_trace(capsys, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_otlp({"coldstart.phase": {"stringValue": HOSTILE_PHASE}},
                                     child_name="<img src=x onerror=alert(1)>")))
    code, out, _ = _run(capsys, "analyze", "--format", "markdown", str(path))
    assert code == 0
    assert "<script>" not in out and "<img" not in out
    assert re.search(r"(?<!\\)\]\(", out) is None and "\\[link\\](http://evil)" in out  # no link forms
    assert "&lt;script&gt;" in out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    row = next(line for line in out.splitlines() if "alert(1)" in line and line.startswith("| &lt;"))
    assert row.count(" | ") == 5  # the pipe in the name did not add a column


def test_terminal_text_has_no_control_characters(capsys, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_otlp({"coldstart.phase": {"stringValue": HOSTILE_PHASE}},
                                     child_name="x\x1b[2J\x1bc")))
    for argv in (["analyze", str(path)], ["compare", str(path), str(path), "--include-unready"],
                 ["capacity", str(path), "--include-unready"]):
        code, out, err = _run(capsys, *argv)
        assert code == 0
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, argv


def test_a_code_fence_cannot_be_closed_by_trace_text():
    from otel_coldstart.analyze.escape import markdown_fence

    assert markdown_fence("plain") == "```"
    assert markdown_fence("frame ``` evil") == "````"
    assert markdown_fence("`````") == "``````"
