"""The time-to-ready estimate (otel_coldstart/time_to_ready.py) and its history reader
(otel_coldstart/_history.py): real trace files written by real start-ups in this process,
hand-built earlier start-ups for the estimator's rules, and hostile history directories.

The accuracy on repeated fresh demo start-ups is tests/core/test_time_to_ready_process.py.
"""

from __future__ import annotations

import gc
import json
import os
import time
from types import SimpleNamespace

import pytest

import otel_coldstart
from otel_coldstart import _history, semconv, session as _session, time_to_ready
from otel_coldstart._history import STEP_END_S, STEP_KEY, STEP_START_S, EarlierStartup, History, Identity, read_history
from otel_coldstart.inflight import Snapshot

SERVICE = "eta-unit-test"
IDENTITY = Identity(SERVICE, None, None)
S = 1_000_000_000  # ns


@pytest.fixture
def service_env(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", SERVICE)
    for name in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_COLDSTART_HISTORY_DIR", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    otel_coldstart.uninstrument()
    yield
    otel_coldstart.uninstrument()


def _startup(directory, load_s=0.2, warmup_s=0.1, **options) -> None:
    """One real start-up writing its trace file to ``directory``: two phases, then ready()."""
    otel_coldstart.instrument(output_dir=str(directory), start_at="instrument", summary=False,
                              handle_sigterm=False, **options)
    with otel_coldstart.phase("load"):
        time.sleep(load_s)
    with otel_coldstart.phase("warmup"):
        time.sleep(warmup_s)
    otel_coldstart.ready()
    otel_coldstart.uninstrument()


# --- the history reader on real files ------------------------------------------------------

def test_history_reads_earlier_startups_of_the_same_service_newest_first(tmp_path, service_env):
    for load_s in (0.1, 0.2, 0.3):
        _startup(tmp_path, load_s=load_s)
    history = read_history([str(tmp_path)], IDENTITY)
    assert len(history.startups) == 3 and history.files_read == 3
    loads = [next(s for s in h.steps if s[STEP_KEY][0] == "coldstart.load") for h in history.startups]
    assert [round(step[STEP_END_S] - step[STEP_START_S], 1) for step in loads] == [0.3, 0.2, 0.1]
    newest = history.startups[0]
    keys = [step[STEP_KEY] for step in newest.steps]
    assert ("coldstart.load", "load", "") in keys and ("coldstart.warmup", "warmup", "") in keys
    assert newest.total_s >= 0.3 + 0.1
    # Another service's start-ups, or one of another model, are not this one's history.
    assert read_history([str(tmp_path)], Identity("other-service", None, None)).startups == ()
    assert read_history([str(tmp_path)], Identity(SERVICE, "llama", None)).startups == ()
    # This start-up's own file is never its history.
    files = sorted(str(p) for p in tmp_path.iterdir())
    assert len(read_history([str(tmp_path)], IDENTITY, skip_paths=files[:1]).startups) == 2


def test_the_kept_history_leaves_the_garbage_collectors_lists(tmp_path, service_env):
    # The history is held for the whole start-up: its steps must not be objects the host's
    # full collections count and traverse (a NamedTuple, a list per key would be, for good).
    for load_s in (0.01, 0.02):
        _startup(tmp_path, load_s=load_s)
    live = time_to_ready.LiveEstimate.load(time_to_ready.Sources((str(tmp_path),), IDENTITY, None, None, 0))
    assert live.startups == 2
    gc.collect()
    kept = [step for h in live.history.startups for step in h.steps]
    kept += [read for h in live.history.startups for read in h.reads]
    kept += [steps for index in live._by_key for steps in index.values()]
    assert kept and all(step for step in kept)
    assert [item for item in kept if gc.is_tracked(item)] == []
    # ... and the estimate still reads them.
    assert live.history.startups[0].steps[0][STEP_KEY][0].startswith("coldstart.")


def test_history_keeps_checkpoint_reads(tmp_path, service_env, small_checkpoint):
    from safetensors.torch import load_file

    otel_coldstart.instrument(output_dir=str(tmp_path), start_at="instrument", summary=False, handle_sigterm=False)
    with otel_coldstart.phase("load"):
        for path in small_checkpoint:
            load_file(path)
    otel_coldstart.ready()
    otel_coldstart.uninstrument()
    (earlier,) = read_history([str(tmp_path)], IDENTITY).startups
    assert len(earlier.reads) == 4
    assert earlier.checkpoint_bytes == sum(os.path.getsize(p) for p in small_checkpoint) - sum(
        _header_bytes(p) for p in small_checkpoint)
    ends = [end for _, end, _ in earlier.reads]
    assert ends == sorted(ends)
    files = {step[STEP_KEY][2] for step in earlier.steps if step[STEP_KEY][1] == semconv.PHASE_DESERIALIZE}
    assert files == {os.path.basename(p) for p in small_checkpoint}


def _header_bytes(path: str) -> int:
    with open(path, "rb") as handle:
        return 8 + int.from_bytes(handle.read(8), "little")


def test_history_prefers_the_same_host_type(tmp_path, service_env, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "host.type=small")
    _startup(tmp_path, load_s=0.1)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "host.type=large")
    _startup(tmp_path, load_s=0.2)
    same = read_history([str(tmp_path)], Identity(SERVICE, None, "small"))
    assert len(same.startups) == 1 and same.same_host_type and same.startups[0].host_type == "small"
    other = read_history([str(tmp_path)], Identity(SERVICE, None, "gpu-xl"))
    assert len(other.startups) == 2 and not other.same_host_type


# --- hostile history directories -----------------------------------------------------------

def _otlp_line(trace_id: str, spans: list, service: str = SERVICE) -> bytes:
    document = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"spans": spans}]}]}
    return json.dumps(document).encode() + b"\n"


def _span(trace_id, name, start_ns, end_ns, **attributes):
    values = []
    for key, value in attributes.items():
        key = key.replace("__", ".")
        if isinstance(value, bool):
            values.append({"key": key, "value": {"boolValue": value}})
        elif isinstance(value, int):
            values.append({"key": key, "value": {"intValue": str(value)}})
        else:
            values.append({"key": key, "value": {"stringValue": value}})
    return {"traceId": trace_id, "spanId": "1" * 16, "name": name, "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(end_ns), "attributes": values}


def _good_file(path, trace_id="ab" * 16, total_s=10.0):
    start = 1_700_000_000 * S
    spans = [_span(trace_id, "coldstart.load", start + 1 * S, start + 9 * S, coldstart__phase="load"),
             _span(trace_id, "model.startup", start, start + int(total_s * S), coldstart__ready=True)]
    path.write_bytes(_otlp_line(trace_id, spans))


def test_hostile_history_is_bounded_and_never_raises(tmp_path):
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    os.mkfifo(hostile / "fifo.otlp.jsonl")  # opening it would block forever
    os.symlink("/dev/zero", hostile / "zero.jsonl")  # a device: endless
    os.symlink(hostile / "loop.jsonl", hostile / "loop.jsonl")  # a symlink loop
    (hostile / "dir.jsonl").mkdir()
    with open(hostile / "sparse.jsonl", "wb") as handle:  # 1 TiB of zeros (sparse: no disk used)
        handle.truncate(1 << 40)
    (hostile / "deep.jsonl").write_bytes(b'{"coldstart.phase":' + b"[" * 200_000 + b"\n")
    (hostile / "binary.jsonl").write_bytes(b'\xff\xfe"coldstart.phase"' + os.urandom(4096) + b"\n")
    (hostile / "long.jsonl").write_bytes(b'{"model.startup":"' + b"x" * (3 << 20) + b'"}\n')
    (hostile / "numbers.jsonl").write_bytes(b'{"resourceSpans":[{"x":"coldstart.phase"}], "n": '
                                            + b"9" * 100_000 + b"}\n")
    shapes = [{"resourceSpans": 3}, {"resourceSpans": [None, 1, "x", {"resource": 5, "scopeSpans": {}}]},
              {"resourceSpans": [{"resource": {"attributes": [
                  {"key": "service.name", "value": {"stringValue": SERVICE}}]},
                                  "scopeSpans": [{"spans": [None, {"traceId": 1}, {
                                      "traceId": "cd" * 16, "name": "model.startup", "startTimeUnixNano": "-5",
                                      "endTimeUnixNano": "1e99",
                                      "attributes": [{"key": "coldstart.ready", "value": {"boolValue": True}}]},
                                      {"traceId": "cd" * 16, "name": "coldstart.x", "startTimeUnixNano": 2,
                                       "endTimeUnixNano": 1, "attributes": [
                                           {"key": "coldstart.phase", "value": {"intValue": "12345678901234567890123"}},
                                           {"key": None}, 7]}]}]}]}]
    # Each line passes the reader's filters (our key and the service's name are in it) and parses.
    (hostile / "shapes.jsonl").write_bytes(b"".join(json.dumps({"coldstart.phase": SERVICE, **s}).encode() + b"\n"
                                                    for s in shapes))
    (hostile / "pretty.json").write_text('{\n  "resourceSpans": [\n  "coldstart.phase"\n')  # truncated document
    for number in range(300):  # many names that are not trace files
        (hostile / f"junk-{number}.txt").write_bytes(b"")
    _good_file(hostile / "zz-good.otlp.jsonl")  # one real earlier start-up among them

    started = time.monotonic()
    history = read_history([str(hostile), str(tmp_path / "missing"), "\0bad"], IDENTITY)
    elapsed = time.monotonic() - started
    assert elapsed < _history.DEADLINE_S + 1.0
    (earlier,) = history.startups
    assert earlier.trace_id == "ab" * 16 and earlier.total_s == 10.0
    assert earlier.steps[0][STEP_KEY] == ("coldstart.load", "load", "")


def test_history_reads_only_the_newest_files_and_the_end_of_a_large_one(tmp_path, monkeypatch):
    monkeypatch.setattr(_history, "MAX_FILES", 3)
    for number in range(6):
        path = tmp_path / f"startup-{number}.otlp.jsonl"
        _good_file(path, trace_id=f"{number:032x}", total_s=10.0 + number)
        os.utime(path, ns=(number * S, number * S))
    history = read_history([str(tmp_path)], IDENTITY)
    assert history.files_read == 3
    assert sorted(h.total_s for h in history.startups) == [13.0, 14.0, 15.0]

    # A file over the per-file budget: its end is read (where the newest start-ups are).
    big = tmp_path / "collector.jsonl"
    monkeypatch.setattr(_history, "FILE_BUDGET", 4096)
    with open(big, "wb") as handle:
        handle.write(b"{}\n" * 100_000)
        start = 1_700_000_000 * S
        handle.write(_otlp_line("ee" * 16, [_span("ee" * 16, "model.startup", start, start + 7 * S,
                                                  coldstart__ready=True)]))
    os.utime(big, ns=(10 * S, 10 * S))
    history = read_history([str(tmp_path)], IDENTITY)
    assert "ee" * 16 in [h.trace_id for h in history.startups]


# --- the estimator's rules on hand-built earlier start-ups -----------------------------------

def _earlier(total_s, steps, reads=(), host_type=None, trace="t"):
    return EarlierStartup(trace, 0, total_s, tuple(tuple(s) for s in steps), tuple(reads), host_type)


def _live(startups, same_host_type=True):
    sources = time_to_ready.Sources((), IDENTITY, None, None, 0)
    return time_to_ready.LiveEstimate(History(tuple(startups), (), len(startups), same_host_type), sources)


def _open(name, phase, start_s, thread=1, path=None, size=None, read_bytes=None):
    attributes = {}
    if path:
        attributes[semconv.FILE_PATH] = path
    if size:
        attributes[semconv.FILE_SIZE] = size
    read = SimpleNamespace(bytes=read_bytes) if read_bytes is not None else None
    return SimpleNamespace(name=name, phase=phase, start_ns=int(start_s * S), thread_id=thread, attributes=attributes,
                           file_read=read)


def _snap(now_s, open_spans=(), loaded=0, expected=None, source=None, last_done=None):
    return Snapshot(int(now_s * S), now_s, "x", 0.0, None, tuple(open_spans), loaded, expected, 0, 0, source,
                    last_done)


# An earlier start-up: import 0-2 s, build 2-5 s, load 5-8 s (two files read inside it), ready at 10 s.
DOWNLOAD = ("coldstart.build", "build", "")
EARLIER = _earlier(10.0, [
    (("coldstart.import_libraries", "import_libraries", ""), 0.0, 2.0, 0),
    (DOWNLOAD, 2.0, 5.0, 0),
    (("coldstart.load", "load", ""), 5.0, 8.0, 0),
    (("coldstart.deserialize", "deserialize", "a.safetensors"), 5.0, 6.0, 100),
    (("coldstart.deserialize", "deserialize", "b.safetensors"), 6.5, 7.5, 100),
], reads=[(5.0, 6.0, 100), (6.5, 7.5, 100)])


def test_inside_a_step_what_is_left_of_it_plus_the_time_after_it():
    live = _live([EARLIER])
    # 1 s into build (3 s long, ends at 5 s; the earlier start-up took 5 s more): 2 + 5.
    estimate = live.estimate(_snap(4.5, [_open("coldstart.build", "build", 3.5)]))
    assert estimate.remaining_s == pytest.approx(7.0)
    assert estimate.basis.startswith("in coldstart.build") and "1 earlier start-up" in estimate.basis
    # A slower start so far changes nothing: where it is, not how long it took to get there.
    assert live.estimate(_snap(9.0, [_open("coldstart.build", "build", 8.0)])).remaining_s == pytest.approx(7.0)
    # Overran the earlier step (5 s in a 3 s step): the overrun so far (2 s) is expected again,
    # then what comes after it; the estimate says so (issue 39).
    overrun = live.estimate(_snap(9.0, [_open("coldstart.build", "build", 4.0)]))
    assert overrun.remaining_s == pytest.approx(2.0 + 5.0) and overrun.overrun_s == pytest.approx(2.0)
    assert "overrunning the earlier start-ups by 2.0 s" in overrun.basis
    assert estimate.overrun_s == 0.0


def test_an_overrun_is_marked_and_the_estimate_grows_with_it_instead_of_reaching_zero():
    """Issue 39: a step running twice its history dropped the estimate to ~0 s and left it
    there, nothing marking it. The last step before ready() (warmup, 2 s, then ready at once)."""
    earlier = _earlier(10.0, [(("coldstart.warmup", "warmup", ""), 8.0, 10.0, 0)])
    live = _live([earlier])
    warmup = _open("coldstart.warmup", "warmup", 8.0)
    seen = [live.estimate(_snap(8.0 + t, [warmup])) for t in (1.0, 2.0, 3.0, 4.0, 6.0)]
    assert [round(e.remaining_s, 3) for e in seen] == [1.0, 0.0, 1.0, 2.0, 4.0]
    assert [round(e.overrun_s, 3) for e in seen] == [0.0, 0.0, 1.0, 2.0, 4.0]
    record = live.record_attributes(_snap(12.0, [warmup]))
    assert record[semconv.PROGRESS_OVERRUN_S] == 2.0 and record[semconv.PROGRESS_REMAINING_S] == 2.0
    assert semconv.PROGRESS_OVERRUN_S not in live.record_attributes(_snap(9.0, [warmup]))
    # After the last span, and past the whole earlier start-up, the same rule.
    done = ("coldstart.warmup", {semconv.PHASE: "warmup"}, int(10.0 * S))
    after = live.estimate(_snap(13.0, last_done=done))
    assert after.remaining_s == pytest.approx(3.0) and after.overrun_s == pytest.approx(3.0)


def test_after_the_span_that_ended_last_counts_down():
    live = _live([EARLIER])
    done = ("coldstart.build", {semconv.PHASE: "build"}, int(5.5 * S))
    estimate = live.estimate(_snap(6.0, last_done=done))
    assert estimate.remaining_s == pytest.approx(5.0 - 0.5)
    assert estimate.basis.startswith("after coldstart.build")
    # A span that ended after the innermost open one started is the fresher evidence.
    inside = ("coldstart.deserialize", {semconv.PHASE: "deserialize", semconv.FILE_PATH: "/x/a.safetensors"},
              int(7.0 * S))
    estimate = live.estimate(_snap(7.5, [_open("coldstart.load", "load", 6.0)], last_done=inside))
    assert estimate.remaining_s == pytest.approx(10.0 - 6.0 - 0.5)


def test_a_file_read_goes_at_its_own_pace():
    live = _live([EARLIER])
    # The earlier start-up read a.safetensors in 1 s; this one has read a quarter in 1 s (cold):
    # 3 s more for the file, then 4 s after it.
    reading = _open("coldstart.deserialize", "deserialize", 5.0, path="/ckpt/a.safetensors", size=1000,
                    read_bytes=250)
    estimate = live.estimate(_snap(6.0, [_open("coldstart.load", "load", 5.0), reading]))
    assert estimate.remaining_s == pytest.approx(3.0 + 4.0)
    assert "by its bytes read at its pace" in estimate.basis
    # Too little read to trust a pace: the earlier file's length.
    reading.file_read.bytes = 10
    assert live.estimate(_snap(5.5, [reading])).remaining_s == pytest.approx(0.5 + 4.0)


def test_a_step_that_reads_the_checkpoint_goes_by_bytes_loaded_against_expected():
    live = _live([EARLIER])
    load = _open("coldstart.load", "load", 5.0)
    # Between the two files, half the checkpoint loaded (the index says 200 bytes): the earlier
    # start-up was there at 6 s, 1 s into its load; this one took 2 s: twice as slow, so the
    # earlier 2 s left of the load take 4 s, then the 2 s after it.
    estimate = live.estimate(_snap(7.0, [load], loaded=100, expected=200, source=semconv.EXPECTED_FROM_INDEX))
    assert estimate.remaining_s == pytest.approx(4.0 + 2.0)
    assert "checkpoint bytes (50%)" in estimate.basis
    # Expected from the files opened so far says nothing of the whole: the earlier total is used.
    same = live.estimate(_snap(7.0, [load], loaded=100, expected=100, source=semconv.EXPECTED_FROM_FILES_OPENED))
    assert same.remaining_s == pytest.approx(6.0)


def test_nothing_matched_falls_back_to_bytes_then_elapsed():
    live = _live([EARLIER])
    unknown = _open("coldstart.other", "other", 1.0)
    # A quarter of the checkpoint: the earlier start-up had read that at 5.5 s.
    estimate = live.estimate(_snap(6.0, [unknown], loaded=50, expected=200, source=semconv.EXPECTED_FROM_INDEX))
    assert estimate.remaining_s == pytest.approx(4.5) and estimate.basis.startswith("by checkpoint bytes")
    estimate = live.estimate(_snap(6.0, [unknown]))
    assert estimate.remaining_s == pytest.approx(4.0) and estimate.basis.startswith("by elapsed time")
    late = live.estimate(_snap(60.0, [unknown]))  # 50 s past the earlier total: marked, not 0
    assert late.remaining_s == pytest.approx(50.0) and late.overrun_s == pytest.approx(50.0)


def test_the_median_of_the_earlier_startups():
    fast = _earlier(6.0, [(DOWNLOAD, 2.0, 3.0, 0)])
    slow = _earlier(30.0, [(DOWNLOAD, 2.0, 20.0, 0)])
    live = _live([fast, EARLIER, slow])
    estimate = live.estimate(_snap(2.5, [_open("coldstart.build", "build", 2.0)]))
    assert estimate.remaining_s == pytest.approx(7.5)  # 3.5, 7.5, 27.5
    assert "3 earlier start-up(s)" in estimate.basis
    assert "other host types" in _live([EARLIER], same_host_type=False).estimate(_snap(1.0)).basis


def test_no_history_no_estimate_and_the_record_says_why(tmp_path):
    sources = time_to_ready.sources_for([str(tmp_path)], {"service.name": SERVICE}, None, None, 0)
    live = time_to_ready.LiveEstimate.load(sources)
    assert live.estimate(_snap(1.0)) is None
    attributes = live.record_attributes(_snap(1.0))
    assert attributes[semconv.PROGRESS_REMAINING_HISTORY] == 0
    assert semconv.PROGRESS_REMAINING_S not in attributes
    assert "no earlier start-up" in attributes[semconv.PROGRESS_REMAINING_BASIS]
    assert "first start-up has no history" in attributes[semconv.PROGRESS_REMAINING_BASIS]


# --- in a start-up: the records and the gauge ---------------------------------------------------

def _remaining_points(reader, name=semconv.METRIC_INFLIGHT_REMAINING) -> list:
    data = reader.get_metrics_data()
    points = []
    for resource_metrics in data.resource_metrics if data else ():
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    points.extend(metric.data.data_points)
    return points


def _wait_for_estimate(board, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while board.time_to_ready is None:
        assert time.monotonic() < deadline, "the monitor thread never read the history"
        time.sleep(0.02)
    return board.time_to_ready


def test_gauge_and_records_with_and_without_history(tmp_path, service_env):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    def watched(reader):
        otel_coldstart.instrument(output_dir=str(tmp_path), start_at="instrument", summary=False,
                                  handle_sigterm=False, progress_interval_s=0.25,
                                  meter_provider=MeterProvider(metric_readers=[reader]))
        return _session.ACTIVE.progress

    # The first start-up of the service: no history, so no gauge, and the records say so.
    reader = InMemoryMetricReader()
    board = watched(reader)
    live = _wait_for_estimate(board)
    assert live.startups == 0
    with otel_coldstart.phase("load"):
        time.sleep(0.3)
        assert _remaining_points(reader) == []
        board.tick(first=True)  # a record now, with what the estimate says
    with otel_coldstart.phase("warmup"):
        time.sleep(0.1)
    first_file = otel_coldstart.trace_file()
    otel_coldstart.ready()
    otel_coldstart.uninstrument()
    records = _progress_records(first_file)
    said = [r for r in records if semconv.PROGRESS_REMAINING_HISTORY in r]
    assert said and all(r[semconv.PROGRESS_REMAINING_HISTORY] == 0 for r in said)
    assert all(semconv.PROGRESS_REMAINING_S not in r for r in records)

    # The second: the first is its history.
    reader = InMemoryMetricReader()
    board = watched(reader)
    assert _wait_for_estimate(board).startups == 1
    with otel_coldstart.phase("load"):
        time.sleep(0.1)
        (point,) = _remaining_points(reader)
        assert 0.1 < point.value < 5.0
        assert point.attributes[semconv.PHASE] == "load"
        (overrun,) = _remaining_points(reader, semconv.METRIC_INFLIGHT_OVERRUN)
        assert overrun.value == 0.0  # not past the first start-up's load
        board.tick(first=True)
    with otel_coldstart.phase("warmup"):
        time.sleep(0.6)  # the first start-up's warmup took 0.1 s: 0.5 s past it
        (overrun,) = _remaining_points(reader, semconv.METRIC_INFLIGHT_OVERRUN)
        (point,) = _remaining_points(reader)
        assert overrun.value >= 0.3 and point.value >= 0.3, (overrun.value, point.value)  # not ~0: the overrun
        board.tick(first=True)
    second_file = otel_coldstart.trace_file()
    otel_coldstart.ready()
    assert _remaining_points(reader) == []  # gone at ready()
    otel_coldstart.uninstrument()
    estimated = [r for r in _progress_records(second_file) if semconv.PROGRESS_REMAINING_S in r]
    assert estimated and estimated[-1][semconv.PROGRESS_REMAINING_HISTORY] == 1
    assert any(r[semconv.PROGRESS_REMAINING_BASIS].startswith("in coldstart.load") for r in estimated)
    assert estimated[-1][semconv.PROGRESS_REMAINING_BASIS].startswith("in coldstart.warmup")
    assert estimated[-1][semconv.PROGRESS_OVERRUN_S] >= 0.3


def test_history_off_and_bad_option(tmp_path, service_env, monkeypatch):
    _startup(tmp_path)
    monkeypatch.setenv("OTEL_COLDSTART_HISTORY_DIR", "off")
    otel_coldstart.instrument(output_dir=str(tmp_path), start_at="instrument", summary=False, handle_sigterm=False)
    board = _session.ACTIVE.progress
    assert board.history_sources is None
    otel_coldstart.uninstrument()
    with pytest.raises(ValueError, match="history_dir"):
        otel_coldstart.instrument(history_dir=3)
    with pytest.raises(ValueError, match="history_dir"):
        otel_coldstart.instrument(history_dir=[])
    # Another directory named by the option: the history is there, not in the output directory.
    other = tmp_path / "elsewhere"
    otel_coldstart.instrument(output_dir=str(other), start_at="instrument", summary=False, handle_sigterm=False,
                              history_dir=str(tmp_path))
    assert _wait_for_estimate(_session.ACTIVE.progress).startups == 1
    otel_coldstart.uninstrument()


def _progress_records(path) -> list[dict]:
    return [attributes for _, attributes in _history.progress_of(path)[1]]
