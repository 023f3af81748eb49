"""first_request() in fresh processes, from outside: a real start-up (safetensors shards read,
ready()), then the first request doing real torch work; the trace file as written, read by
``otel-coldstart analyze`` and ``capacity --until first-token``. Also: an exception inside
the first request ends the process as it would without us, and a SIGKILL during it leaves
the record that it had begun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace_file

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

SERVER = r"""
import json, sys, time
import otel_coldstart
otel_coldstart.instrument()
import torch, safetensors.torch
mode, paths = sys.argv[1], sys.argv[2:]
weights = {}
for path in paths:
    weights.update(safetensors.torch.load_file(path))
otel_coldstart.ready()

@otel_coldstart.first_request()
def generate(prompt):
    if mode == "raise":
        raise RuntimeError("CUDA out of memory while generating " + prompt)
    if mode == "sigkill":
        print("IN_FIRST_REQUEST", flush=True)
        time.sleep(60)
    x = torch.ones(64)
    for name in sorted(weights):
        w = weights[name].float()
        if w.dim() == 2 and w.shape[1] == x.shape[0]:
            x = torch.tanh(w @ x)[:64] if w.shape[0] >= 64 else x
    return float(x.sum())

first = generate("hello")
second = generate("again")
print(json.dumps({"first": first, "second": second, "trace": otel_coldstart.trace_file()}), flush=True)
"""


def _env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = str(tmp_path / "traces")
    env["OTEL_COLDSTART_SUMMARY"] = "0"
    return env


def _server(tmp_path, mode, paths, timeout=120):
    return subprocess.run([sys.executable, "-c", SERVER, mode, *paths], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=timeout, cwd=str(tmp_path))


def _traces(tmp_path):
    return sorted(str(p) for p in (tmp_path / "traces").glob("startup-*.otlp.jsonl"))


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "otel_coldstart", *args], capture_output=True, text=True,
                          timeout=timeout)


def _analysis(path):
    done = _cli("analyze", path, "--format", "json")
    assert done.returncode == 0, done.stderr
    [startup] = json.loads(done.stdout)["startups"]
    return startup


def test_ready_then_first_request(tmp_path, small_checkpoint):
    done = _server(tmp_path, "ok", small_checkpoint)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["first"] == out["second"]  # the host's results, whichever call was recorded
    [path] = _traces(tmp_path)
    [b] = breakdowns(read_trace_file(path))
    request = b.first_request
    assert b.ready and request is not None and request.status == "ok"
    assert request.start_ns >= b.root.end_ns  # after ready(), outside the start-up's window
    assert request.time_to_first_token_ns == request.end_ns - b.root.start_ns
    spans = [s for s in read_trace_file(path) if s.name == semconv.SPAN_FIRST_REQUEST]
    assert len(spans) == 1 and spans[0].parent_id == b.root.span_id  # one, though generate() ran twice
    startup = _analysis(path)
    doc = startup["first_request"]
    assert doc["status"] == "ok" and doc["source"] == "first_request()"
    assert doc["time_to_first_token_s"] == pytest.approx(request.time_to_first_token_ns / 1e9, abs=1e-6)
    assert doc["time_to_first_token_s"] > startup["duration_s"]  # the first token comes after ready()
    text = _cli("analyze", path)
    assert "first request: " in text.stdout and "time to first token" in text.stdout


def test_an_exception_in_the_first_request_ends_the_process_as_without_us(tmp_path, small_checkpoint):
    done = _server(tmp_path, "raise", small_checkpoint)
    assert done.returncode == 1
    assert "RuntimeError: CUDA out of memory while generating hello" in done.stderr
    assert "otel-coldstart" not in done.stderr  # nothing of ours in the host's traceback
    [path] = _traces(tmp_path)
    doc = _analysis(path)["first_request"]
    assert doc["status"] == "failed" and doc["error_type"] == "RuntimeError"
    assert doc["time_to_first_token_s"] is None and doc["seconds"] is not None


def test_sigkill_during_the_first_request_leaves_that_it_had_begun(tmp_path, small_checkpoint):
    child = subprocess.Popen([sys.executable, "-c", SERVER, "sigkill", *small_checkpoint], env=_env(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        line = child.stdout.readline()
        assert line.strip() == "IN_FIRST_REQUEST", child.stderr.read()
        [path] = _traces(tmp_path)
        deadline = time.monotonic() + 5  # the begun record is flushed, not waited for: within moments
        while semconv.SPAN_FIRST_REQUEST_BEGUN not in open(path).read() and time.monotonic() < deadline:
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
        child.stderr.close()
    startup = _analysis(path)
    assert startup["ready"] is True
    doc = startup["first_request"]
    assert doc["status"] == "not ended" and doc["time_to_first_token_s"] is None and doc["seconds"] is None
    assert "never ended" in _cli("analyze", path).stdout


def test_capacity_until_first_token(tmp_path, small_checkpoint):
    for mode in ("ok", "ok", "ok", "raise"):
        _server(tmp_path, mode, small_checkpoint)
    paths = _traces(tmp_path)
    assert len(paths) == 4
    # per start-up: ready() plus its first request (the wait between them left out)
    to_token = []
    for path in paths:
        [b] = breakdowns(read_trace_file(path))
        if b.first_request.status == "ok":
            assert b.first_request.serving_ns > b.duration_ns  # the first token comes after ready()
            to_token.append(b.first_request.serving_ns)
    to_token.sort()
    done = _cli("capacity", *paths, "--until", "first-token", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["until"] == "first-token"
    group = report["groups"][0]
    assert group["counted"] == 3 and group["not_ready"] == 1
    assert group["not_ready_reasons"] == {"first request failed": 1}
    assert group["total"]["p50_s"] == pytest.approx(to_token[1] / 1e9, abs=1e-6)
    assert group["total"]["max_s"] == pytest.approx(to_token[2] / 1e9, abs=1e-6)
    assert "first_request" in group["phases"] and group["wait_for_first_request"]["p50_s"] >= 0
    text = _cli("capacity", *paths, "--until", "first-token")
    assert "to first token p50" in text.stdout and "no first token: 1 (1 first request failed)" in text.stdout
    whatif = _cli("whatif", *paths, "--until", "first-token", "--format", "json")
    assert whatif.returncode == 0, whatif.stderr
    projected = json.loads(whatif.stdout)
    assert projected["baseline"]["n"] == 3
    assert projected["baseline"]["p50_s"] == pytest.approx(to_token[1] / 1e9, abs=1e-6)


LAZY_SERVER = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument()
import torch
from safetensors.torch import load_file
tensors = load_file(sys.argv[1])  # mapped: pages are read on first touch
float(tensors["first"].sum())
otel_coldstart.ready()
time.sleep(0.6)  # the follow-up of the mapped file takes its first sample

@otel_coldstart.first_request()
def generate():
    value = float(tensors["rest"].sum())  # the request reads the weights the start-up left on storage
    time.sleep(0.8)  # decoding: the follow-up samples while the request runs
    return value

generate()
time.sleep(1.2)  # one more record; the exit ends the following
"""


def test_weights_first_read_during_the_first_request_are_shown_inside_it(tmp_path):
    import torch
    from safetensors.torch import save_file

    from otel_coldstart.floor import evict

    path = str(tmp_path / "model.safetensors")
    generator = torch.Generator().manual_seed(3)
    save_file({"first": torch.randn(256, 1024, generator=generator),
               "rest": torch.randn(4096, 1024, generator=generator)}, path)
    evicted, _ = evict([path])
    if not evicted:
        pytest.skip("the page cache cannot be evicted here")
    done = subprocess.run([sys.executable, "-c", LAZY_SERVER, path], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=180, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    [trace] = _traces(tmp_path)
    doc = _analysis(trace)["first_request"]
    assert doc["status"] == "ok"
    [inside] = doc["first_use_inside"]
    assert inside["file"] == "model.safetensors"
    assert inside["bytes"] >= 8 << 20  # most of the 16 MiB tensor came from storage during the request
    assert doc["after_ready_s"] <= inside["first_seen_after_ready_s"] <= doc["after_ready_s"] + doc["seconds"] + 0.25
    assert "first read from storage" in _cli("analyze", trace).stdout
