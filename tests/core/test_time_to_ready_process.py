"""The live time-to-ready estimate, measured: repeated fresh demo start-ups, each one's
estimate (as its own progress records wrote it, while it ran) against the time it really
had left.

The start-up is the demo's (import torch, build the model, read the 4-shard checkpoint with
its first shard evicted, cast to fp16) with one deliberately slow, steady step in the middle
(``phase("download")``: a fetch that takes the same time whatever the machine's load), so
that half of it is long enough to judge on a loaded 2-core machine: the steps before it
(import, build: CPU, several seconds either way under load) decide where half falls, and
the estimate must know where it is, not how long it took to get there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from otel_coldstart import demo, semconv
from otel_coldstart._history import progress_of

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

STEADY_S = 12.0
HISTORY_RUNS = 2
MEASURED_RUNS = 2
SERVICE = "eta-demo-test"

CHILD = r"""
import json, sys, time
import otel_coldstart
otel_coldstart.instrument(summary=False)
from otel_coldstart import demo
directory, steady_s = sys.argv[1], float(sys.argv[2])
with otel_coldstart.phase("import_libraries"):
    import torch
    import safetensors
with otel_coldstart.phase("build_model"):
    model = demo.build_model(demo.LlamaShape())
with otel_coldstart.phase("download"):  # slow and steady: the same length under any load
    until = time.monotonic() + steady_s
    while time.monotonic() < until:
        time.sleep(0.02)
demo.load_weights(model, directory, "float16")
otel_coldstart.ready()
print(json.dumps({"trace": otel_coldstart.trace_file()}), flush=True)
"""


@pytest.fixture(scope="module")
def demo_checkpoint(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("demo-checkpoint"))
    return directory, demo.generate_checkpoint(directory)


def _env(out_dir, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k.lower() not in ("traceparent",
                                                                                                  "tracestate")}
    env.update({"OTEL_SERVICE_NAME": SERVICE, "OTEL_COLDSTART_OUTPUT_DIR": str(out_dir),
                "OTEL_COLDSTART_SUMMARY": "0", "OTEL_COLDSTART_PROGRESS_INTERVAL_S": "0.25"})
    env.update(extra)
    return env


def _run(script, args, env, timeout=300) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, done.stderr


@pytest.mark.timing  # an estimate against the time measured: alone, after the rest (make test)
def test_estimate_at_half_of_the_startup_is_within_20_percent(tmp_path, demo_checkpoint):
    directory, paths = demo_checkpoint
    out = tmp_path / "traces"
    env = _env(out)
    traces = []
    for _ in range(HISTORY_RUNS + MEASURED_RUNS):
        demo.set_cache_state(paths, cold={0})  # as `otel-coldstart demo` does: the first shard cold
        stdout, _ = _run(CHILD, [directory, str(STEADY_S)], env)
        traces.append(json.loads(stdout.strip().splitlines()[-1])["trace"])

    # The first start-up of the service has no history: no estimate, and its records say so.
    _, first = progress_of(traces[0])
    said = [a for _, a in first if semconv.PROGRESS_REMAINING_HISTORY in a]
    assert said, "the history was never read"
    assert all(a[semconv.PROGRESS_REMAINING_HISTORY] == 0 and semconv.PROGRESS_REMAINING_S not in a for a in said)
    assert "no earlier start-up of service 'eta-demo-test'" in said[-1][semconv.PROGRESS_REMAINING_BASIS]

    report, errors = [], []
    for path in traces[HISTORY_RUNS:]:
        (start, end), records = progress_of(path)
        total_s = (end - start) / 1e9
        half_ns = start + (end - start) // 2
        estimated = [(t, a) for t, a in records if semconv.PROGRESS_REMAINING_S in a]
        assert estimated, "no estimate was recorded"
        at, attributes = min(estimated, key=lambda r: abs(r[0] - half_ns))
        assert abs(at - half_ns) <= 0.5e9, "records come every 0.25 s: one is near half of the start-up"
        assert attributes[semconv.PROGRESS_REMAINING_HISTORY] >= HISTORY_RUNS
        truth = (end - at) / 1e9
        estimate = attributes[semconv.PROGRESS_REMAINING_S]
        error = (estimate - truth) / truth
        errors.append(error)
        report.append(f"total {total_s:.2f} s, at +{(at - start) / 1e9:.2f} s: estimated {estimate:.2f} s, "
                      f"really {truth:.2f} s ({error:+.0%}); {attributes[semconv.PROGRESS_REMAINING_BASIS]}")
    print("\n".join(report))  # shown with -s / -rP
    for error in errors:
        assert abs(error) <= 0.20, "\n".join(report)


HOSTILE_CHILD = r"""
import sys, time, json
started = time.perf_counter()
import otel_coldstart
otel_coldstart.instrument(summary=False, progress_interval_s=0.25)
instrument_s = time.perf_counter() - started
with otel_coldstart.phase("load"):
    time.sleep(1.5)
otel_coldstart.ready()
from otel_coldstart import _errors
print(json.dumps({"instrument_s": instrument_s, "trace": otel_coldstart.trace_file(),
                  "internal_errors": list(_errors.INTERNAL_ERRORS)}), flush=True)
"""


def test_a_hostile_history_directory_never_breaks_or_holds_the_startup(tmp_path):
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    os.mkfifo(hostile / "startup-fifo.otlp.jsonl")  # opening it would block forever
    os.symlink("/dev/zero", hostile / "startup-zero.otlp.jsonl")
    with open(hostile / "startup-huge.otlp.jsonl", "wb") as handle:  # 1 TiB, sparse
        handle.truncate(1 << 40)
    (hostile / "startup-deep.otlp.jsonl").write_bytes(b'["coldstart.phase",' + b"[" * 500_000 + b"\n")
    (hostile / "startup-junk.otlp.jsonl").write_bytes(
        b"".join(b'{"resourceSpans":[{"resource":7,"scopeSpans":[{"spans":[1,"model.startup"]}]}],'
                 b'"coldstart.phase":%d}\n' % n for n in range(20_000)))
    for number in range(2000):
        (hostile / f"startup-{number}.otlp.json").write_bytes(b"\xff" * 64)
    started = time.monotonic()
    stdout, stderr = _run(HOSTILE_CHILD, [], _env(tmp_path / "traces", OTEL_COLDSTART_HISTORY_DIR=str(hostile)),
                          timeout=120)
    wall = time.monotonic() - started
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["internal_errors"] == [], result
    assert "Traceback" not in stderr and "otel-coldstart" not in stderr, stderr
    assert result["instrument_s"] < 1.0  # nothing of the history is read on the caller's thread
    assert wall < 60
    _, records = progress_of(result["trace"])
    said = [a for _, a in records if semconv.PROGRESS_REMAINING_HISTORY in a]
    assert said and said[-1][semconv.PROGRESS_REMAINING_HISTORY] == 0


KILLED = r"""
import sys, time
import otel_coldstart
otel_coldstart.instrument(summary=False)
with otel_coldstart.phase("load"):
    time.sleep(1.0)
with otel_coldstart.phase("warmup"):
    print("IN_WARMUP", flush=True)
    time.sleep(float(sys.argv[1]))
otel_coldstart.ready()
"""


def _killed_in_warmup(env, seconds_after: float) -> None:
    process = subprocess.Popen([sys.executable, "-c", KILLED, "120"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout.readline().strip() == "IN_WARMUP"
        time.sleep(seconds_after)
        process.kill()  # SIGKILL, as the kubelet's startup probe or the OOM killer: nothing runs
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        process.stdout.close()


def _analyze(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_coldstart", "analyze", *args], capture_output=True, text=True,
                          timeout=120)


def test_a_killed_startup_says_what_it_expected(tmp_path):
    """What the estimate expected against when it died, in the text, JSON and HTML reports."""
    first_out = tmp_path / "first"
    _killed_in_warmup(_env(first_out), 1.0)  # a first start-up: no history
    (first,) = first_out.glob("*.jsonl")
    text = _analyze(str(first)).stdout
    assert "no time-to-ready estimate: no earlier start-up of this service had reached ready()" in text

    out = tmp_path / "traces"
    env = _env(out)
    _run(KILLED, ["2.0"], env)  # an earlier start-up: load 1 s, warmup 2 s, ready
    _killed_in_warmup(env, 1.0)
    (killed,) = [p for p in out.glob("*.jsonl") if not _ended(p)]
    result = _analyze(str(killed), "--format", "json")
    assert result.returncode == 11, result.stderr
    (startup,) = json.loads(result.stdout)["startups"]
    item = startup["killed"]
    assert item["phase"] == "warmup" and item["remaining_history"] == 1
    # About 1 s of the earlier 2 s warmup was left at the last sign of life (~1 s in).
    assert 0.3 <= item["remaining_s"] <= 2.0, item
    assert item["expected_ready_s"] == pytest.approx(item["last_sign_of_life_s"] + item["remaining_s"], abs=1e-6)
    text = _analyze(str(killed)).stdout
    assert "expected ready at about +" in text and "from 1 earlier start-up(s)" in text, text
    html = _analyze(str(killed), "--format", "html").stdout
    assert "expected ready at about +" in html


def _ended(path) -> bool:
    """The file holds a root span (a killed start-up's has only progress records)."""
    with open(path, encoding="utf-8") as handle:
        return any('"name":"model.startup"' in line for line in handle)
