"""A real os.fork() in the middle of an instrumented start-up, black-box: the child starts
its own start-up and exports none of the parent's spans; the parent's are exported exactly
once; the parent's SIGTERM watcher stays the parent's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.readers import read_trace_file

pytestmark = [pytest.mark.process, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")]

FORK_WITH_OPEN_WORK = r"""
import json, os, sys
import otel_coldstart
otel_coldstart.instrument()
import torch
from safetensors import safe_open
from otel_coldstart.patches import cuda_graphs

shard = sys.argv[1]
with otel_coldstart.phase("load"):
    with safe_open(shard, framework="pt") as handle:
        names = list(handle.keys())
        handle.get_tensor(names[0]).to(torch.float16)
        # A capture in progress (simulated: no GPU here) when the process forks.
        capture = cuda_graphs._open_capture(object(), cuda_graphs.API_CUDA_GRAPH, "begin")
        pid = os.fork()
        if pid == 0:
            # The child: vLLM's plugin hook would call instrument() here.
            otel_coldstart.instrument()
            handle.get_tensor(names[1]).to(torch.float16)
            otel_coldstart.ready()
            print(json.dumps({"child_trace": otel_coldstart.trace_file()}), flush=True)
            # Give the parent's span processor, which the child inherits, time to export
            # whatever the child might wrongly end (OTEL_BSP_SCHEDULE_DELAY is 50 ms here).
            import atexit, time
            atexit.register(time.sleep, 0.5)
            sys.exit(0)  # leaves the with-blocks (the phase, the handle) it inherited
        _, status = os.waitpid(pid, 0)
        cuda_graphs._close_capture(capture, None)
        handle.get_tensor(names[2])
otel_coldstart.ready()
print(json.dumps({"parent_trace": otel_coldstart.trace_file(), "child_status": status}), flush=True)
"""


def _env(tmp_path, sdk: bool = True):
    """``sdk``: with OTEL_BSP_SCHEDULE_DELAY set the SDK records the spans (own_tracing.py
    steps aside for any SDK setting), its batch processor exporting every 50 ms; without, the
    plugin's own provider does, which exports only when flushed."""
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="0")
    env.pop("OTEL_BSP_SCHEDULE_DELAY", None)
    if sdk:
        env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    return env


@pytest.mark.parametrize("sdk", [True, False], ids=["sdk-spans", "own-spans"])
def test_forked_child_exports_none_of_the_parents_spans_and_the_parent_exports_each_once(tmp_path,
                                                                                        small_checkpoint, sdk):
    result = subprocess.run([sys.executable, "-c", FORK_WITH_OPEN_WORK, small_checkpoint[0]],
                            env=_env(tmp_path, sdk),
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "internal error" not in result.stderr
    reports = {}
    for line in result.stdout.splitlines():
        reports.update(json.loads(line))
    assert reports["child_status"] == 0
    parent = read_trace_file(reports["parent_trace"])
    child = read_trace_file(reports["child_trace"])
    assert len(list((tmp_path / "traces").iterdir())) == 2
    assert reports["parent_trace"] != reports["child_trace"]

    parent_ids = [s.span_id for s in parent]
    child_ids = [s.span_id for s in child]
    # The reader keeps a span id seen twice as "<id>#2".
    assert not [i for i in parent_ids + child_ids if "#" in i], "a span was exported twice"
    assert not set(parent_ids) & set(child_ids), "the child exported a parent span"

    # The parent's story is whole: its root, the shard read through the open handle, the
    # capture that was running across the fork, the phase.
    (parent_root,) = [s for s in parent if s.name == semconv.SPAN_ROOT]
    assert parent_root.attributes[semconv.READY] is True
    (shard,) = [s for s in parent if s.phase == semconv.PHASE_DESERIALIZE]
    assert shard.attributes[semconv.FILE_PATH] == small_checkpoint[0]
    assert not shard.attributes.get(semconv.INTERRUPTED)
    (capture,) = [s for s in parent if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    assert not capture.attributes.get(semconv.INTERRUPTED)
    assert [s.name for s in parent if s.name == "coldstart.load"] == ["coldstart.load"]

    # The child's is its own: a root from the fork, its own read and cast, no capture or
    # phase of the parent's (before the fix, the child's ready() ended the parent's open
    # handle and exported it under the parent's span id).
    (child_root,) = [s for s in child if s.name == semconv.SPAN_ROOT]
    assert child_root.attributes[semconv.READY] is True
    # It nests under the span that was current at the fork (as a vLLM worker nests under
    # the span that started it): same trace, a parent's span as its parent, none exported.
    assert child_root.parent_id in set(parent_ids)
    assert child_root.start_ns >= parent_root.start_ns
    assert not [s for s in child if s.phase == semconv.PHASE_GRAPH_CAPTURE]
    assert not [s for s in child if s.name == "coldstart.load"]
    assert [s for s in child if s.phase == semconv.PHASE_CAST]


FORK_THEN_SIGTERM_CHILD = r"""
import os, signal, sys, time
import otel_coldstart
otel_coldstart.instrument()
with otel_coldstart.phase("setup"):
    pid = os.fork()
    if pid == 0:
        # Before the child instruments: the host's disposition, no watcher of the parent's.
        print("CHILD", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.set_wakeup_fd(-1), flush=True)
        time.sleep(30)
        os._exit(0)
    print("PID", pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print("CHILD_STATUS", status, flush=True)
otel_coldstart.ready()
print("PARENT_READY", flush=True)
"""


def test_sigterm_to_a_forked_child_kills_only_the_child(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", FORK_THEN_SIGTERM_CHILD], env=_env(tmp_path), cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = {}
        while len(lines) < 2:
            line = proc.stdout.readline().split()
            assert line, proc.stderr.read()
            lines[line[0]] = line[1:]
        assert lines["CHILD"] == ["True", "-1"]
        child = int(lines["PID"][0])
        time.sleep(0.2)
        os.kill(child, signal.SIGTERM)
        rest = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    status = int(rest.split("CHILD_STATUS")[1].split()[0])
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert "PARENT_READY" in rest
    (trace,) = (tmp_path / "traces").glob("*.jsonl")
    spans = read_trace_file(str(trace))
    (root,) = [s for s in spans if s.name == semconv.SPAN_ROOT]
    assert root.attributes[semconv.END_REASON] == semconv.END_READY
