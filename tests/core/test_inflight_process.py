"""Start-ups that never end, and start-ups that stall, in fresh processes with real signals.

SIGKILL runs no handler: what a killed start-up leaves is what the progress records
(otel_coldstart/inflight.py) had already written. ``otel-coldstart analyze`` must read it as
killed, name the phase (and the shard) and the time in it, exit 11 and warn about nothing.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from _child import python_child
from _otlp_collector import TraceCollector
from otel_coldstart import semconv

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

KILLED_IN_PHASE = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
import safetensors.torch
with otel_coldstart.phase("load"):
    for p in sys.argv[1:]:
        safetensors.torch.load_file(p)
with otel_coldstart.phase("warmup"):
    print("IN_WARMUP", flush=True)
    time.sleep(120)
"""

KILLED_IN_SHARD = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
from safetensors import safe_open
with otel_coldstart.phase("load"):
    for index, p in enumerate(sys.argv[1:]):
        with safe_open(p, "pt") as handle:
            for number, name in enumerate(handle.keys()):
                handle.get_tensor(name)
                if index == 2 and number == 1:  # two tensors into the third shard
                    print("IN_SHARD", flush=True)
                    time.sleep(120)
"""

STALLED_DOWNLOAD = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument(stall_after_s=float(sys.argv[1]) if sys.argv[1] != "env" else None)

def fetch_weights_slowly():
    time.sleep(3.0)  # a download that hangs, then recovers

with otel_coldstart.phase("download"):
    fetch_weights_slowly()
otel_coldstart.ready()
"""


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path / "traces"), "OTEL_COLDSTART_SUMMARY": "0",
                "OTEL_COLDSTART_PROGRESS_INTERVAL_S": "0.25"})
    env.update(extra)
    return env


def _start_and_kill(tmp_path, script, args, marker, seconds_after, env=None):
    with python_child(script, *args, env=env or _env(tmp_path), cwd=str(tmp_path)) as process:
        ready, _, _ = select.select([process.stdout], [], [], 180)
        line = process.stdout.readline() if ready else ""
        assert line.strip() == marker, (line, process.stderr.read() if process.poll() is not None else "")
        marked = time.monotonic()
        time.sleep(seconds_after)
        process.send_signal(signal.SIGKILL)  # as the kubelet or the OOM killer does: no handler runs
        killed_after = time.monotonic() - marked
        assert process.wait(timeout=30) == -signal.SIGKILL
    if env is not None:
        return None, killed_after
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    return str(path), killed_after


def _analyze(*args):
    return subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", *args], capture_output=True, text=True,
                          timeout=120)


def _seconds(text: str) -> float:
    value, unit = re.match(r"([\d.]+) (ms|s|min)", text).groups()
    return float(value) * {"ms": 1e-3, "s": 1.0, "min": 60.0}[unit]


def test_sigkill_in_the_middle_of_a_phase(tmp_path, small_checkpoint):
    path, killed_after = _start_and_kill(tmp_path, KILLED_IN_PHASE, small_checkpoint, "IN_WARMUP", 2.0)
    result = _analyze(path)
    assert result.returncode == 11, result.stderr
    assert result.stderr == "", "no orphan (or any) warning for a killed start-up"
    out = result.stdout
    assert "KILLED: no end" in out
    match = re.search(r"killed \(no end\) during warmup at \+([\d.]+ (?:ms|s)): in coldstart\.warmup for "
                      r"([\d.]+ (?:ms|s|min))", out)
    assert match, out
    in_warmup = _seconds(match.group(2))
    # The last record is at most one interval (0.25 s, later on a loaded machine) before death.
    assert 0.5 <= in_warmup <= killed_after + 0.5, (in_warmup, killed_after, out)
    # What was done: the load phase and its four shards, every one finished.
    assert re.search(r"^  load\s", out, re.M) and re.search(r"^  warmup\s", out, re.M)
    for index in range(4):
        assert re.search(rf"#{index}\s+model-0000{index + 1}-of-00004\.safetensors", out), out
    assert "checkpoint bytes loaded:" in out and "(100%, per the checkpoint's index)" in out

    document = json.loads(_analyze(path, "--format", "json").stdout)
    (startup,) = document["startups"]
    assert startup["ready"] is False
    assert startup["end_reason"] == semconv.END_KILLED
    assert startup["killed"]["phase"] == "warmup" and startup["killed"]["running"]["name"] == "coldstart.warmup"
    assert startup["killed"]["running"]["elapsed_s"] == pytest.approx(in_warmup, abs=0.01)


def test_sigkill_in_the_middle_of_a_shard_read(tmp_path, small_checkpoint):
    path, killed_after = _start_and_kill(tmp_path, KILLED_IN_SHARD, small_checkpoint, "IN_SHARD", 1.5)
    result = _analyze(path)
    assert result.returncode == 11, result.stderr
    assert result.stderr == ""
    out = result.stdout
    match = re.search(r"killed \(no end\) during deserialize at \+[\d.]+ (?:ms|s): in coldstart\.deserialize "
                      r"\(shard #2 model-00003-of-00004\.safetensors\) for ([\d.]+ (?:ms|s|min))", out)
    assert match, out
    assert 0.3 <= _seconds(match.group(1)) <= killed_after + 0.5, out
    assert re.search(r"open at the last sign of life: coldstart\.load [\d.]+ (?:ms|s) > coldstart\.deserialize "
                     r"\(shard #2 model-00003-of-00004\.safetensors\)", out), out
    # The shards done before it are there, finished, with their cache evidence.
    for index in (0, 1):
        assert re.search(rf"#{index}\s+model-0000{index + 1}-of-00004\.safetensors.*(warm|cold|partial|cache \?)",
                         out), out
    loaded = re.search(r"checkpoint bytes loaded: ([\d.]+ \w+) of ([\d.]+ \w+) \((\d+)%, per the checkpoint's index\)",
                       out)
    assert loaded and 50 <= int(loaded.group(3)) < 100, out  # two shards and two tensors of four shards


def test_a_start_up_that_ends_ignores_its_progress_records(tmp_path, small_checkpoint):
    script = KILLED_IN_PHASE.replace("time.sleep(120)", "time.sleep(1.0)") + "\notel_coldstart.ready()\n"
    result = subprocess.run([sys.executable, "-c", script, *small_checkpoint], env=_env(tmp_path),
                            capture_output=True, text=True, timeout=180, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    text = path.read_text()
    assert f'"{semconv.SPAN_PROGRESS}"' in text  # records were written while it ran
    analyzed = _analyze(str(path))
    assert analyzed.returncode == 0 and analyzed.stderr == ""
    assert "(ready)" in analyzed.stdout and "killed" not in analyzed.stdout


def _raw_spans(path):
    for line in open(path, encoding="utf-8"):
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                yield from scope_spans["spans"]


def _stall_events(path):
    found = []
    for span in _raw_spans(path):
        for event in span.get("events", []):
            if event["name"] == semconv.EVENT_STALL:
                attrs = {a["key"]: next(iter(a["value"].values())) for a in event["attributes"]}
                found.append((span["name"], attrs))
    return found


@pytest.mark.parametrize("how", ["option", "env"])
def test_a_stalled_download_records_one_stall_with_the_waiting_stack(tmp_path, how):
    args = ["0.6"] if how == "option" else ["env"]
    extra = {"OTEL_COLDSTART_STALL_AFTER_S": "0.6"} if how == "env" else {}
    result = subprocess.run([sys.executable, "-c", STALLED_DOWNLOAD, *args], env=_env(tmp_path, **extra),
                            capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    logged = [line for line in result.stderr.splitlines() if "start-up stalled" in line]
    assert len(logged) == 1, result.stderr
    assert "phase download" in logged[0] and "fetch_weights_slowly" in logged[0]
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    events = _stall_events(path)
    on_spans = [(name, attrs) for name, attrs in events if name != semconv.SPAN_PROGRESS]
    assert len(on_spans) == 1, events  # once per stall, on the open span
    name, attrs = on_spans[0]
    assert name == "coldstart.download" and attrs[semconv.STALL_PHASE] == "download"
    stacks = attrs[semconv.STALL_STACKS]
    first_thread = stacks.split("\nthread ")[0]
    assert first_thread.startswith("thread MainThread") and "fetch_weights_slowly" in first_thread
    assert len(stacks) <= 8192 and "otel-coldstart-inflight" not in stacks  # the watchdog leaves itself out
    assert 0.6 <= float(attrs[semconv.STALL_IDLE_S]) < 3.0
    # The same stall is on the progress record written at once (kept if the process dies).
    assert [a[semconv.STALL_SPAN_ID] for n, a in events if n == semconv.SPAN_PROGRESS] == \
        [attrs[semconv.STALL_SPAN_ID]]

    analyzed = _analyze(str(path))
    assert analyzed.returncode == 0, analyzed.stderr
    stall_lines = [line for line in analyzed.stdout.splitlines() if line.strip().startswith("stalled at")]
    assert len(stall_lines) == 1, analyzed.stdout
    assert "in download (coldstart.download): no progress for" in stall_lines[0]
    after = analyzed.stdout.split(stall_lines[0], 1)[1].splitlines()
    assert after[1].strip().startswith("fetch_weights_slowly ("), analyzed.stdout  # the top frame
    (startup,) = json.loads(_analyze(str(path), "--format", "json").stdout)["startups"]
    (stall,) = startup["stalls"]
    assert stall["phase"] == "download" and stall["top_frames"][0].startswith("fetch_weights_slowly (")
    assert startup["killed"] is None


def test_the_watchdog_is_off_with_stall_after_s_0(tmp_path):
    result = subprocess.run([sys.executable, "-c", STALLED_DOWNLOAD, "0"], env=_env(tmp_path), capture_output=True,
                            text=True, timeout=120, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "stalled" not in result.stderr
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    assert _stall_events(path) == []


def test_sigkill_over_otlp_leaves_the_same_facts_at_the_collector(tmp_path, small_checkpoint):
    received = tmp_path / "collector.jsonl"
    collector = TraceCollector(received)
    try:
        env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_address[1]}",
                   OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_METRICS_EXPORTER="none")
        _, killed_after = _start_and_kill(tmp_path, KILLED_IN_PHASE, small_checkpoint, "IN_WARMUP", 2.0, env=env)
    finally:
        collector.shutdown()
        collector.server_close()
    assert not (tmp_path / "traces").exists()  # it went over OTLP, not to a file
    result = _analyze(str(received))
    assert result.returncode == 11, result.stderr
    assert result.stderr == ""
    match = re.search(r"killed \(no end\) during warmup at \+[\d.]+ (?:ms|s): in coldstart\.warmup for "
                      r"([\d.]+ (?:ms|s|min))", result.stdout)
    assert match, result.stdout
    assert 0.5 <= _seconds(match.group(1)) <= killed_after + 0.5
    # The shard table's rows (a cold first shard is also named in a finding, on a "- cold:" line).
    assert len(re.findall(r"^\s+#\d\s+model-0000\d-of-00004\.safetensors", result.stdout, re.MULTILINE)) == 4


EARLY = r"""
import os, signal, sys, time
import otel_coldstart
otel_coldstart.instrument()
with otel_coldstart.phase("download"):
    print("IN_DOWNLOAD", flush=True)
    time.sleep(120)
"""


def test_sigkill_half_a_second_after_start_leaves_one_killed_start_up(tmp_path):
    """Issue 21.2: the start-up is on disk from instrument() on. On main before this change the
    first record came 5 s in: a crash-loop that dies early left no file at all. Default
    settings (no shorter progress interval): what a user gets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(tmp_path / "traces"), "OTEL_COLDSTART_SUMMARY": "0"})
    process = subprocess.Popen([sys.executable, "-c", EARLY], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=str(tmp_path))
    try:
        assert process.stdout.readline().strip() == "IN_DOWNLOAD", process.stderr.read()
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.stderr.close()
    (path,) = (tmp_path / "traces").glob("startup-*.otlp.jsonl")
    result = _analyze(str(path))
    assert result.returncode == 11, result.stderr
    assert "killed (no end) during download" in result.stdout, result.stdout
    document = json.loads(_analyze(str(path), "--format", "json").stdout)
    (startup,) = document["startups"]
    assert startup["end_reason"] == semconv.END_KILLED and startup["killed"]["phase"] == "download"
