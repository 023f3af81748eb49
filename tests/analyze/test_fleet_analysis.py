"""Issue 25.7, the analysis half: compare and capacity analyse each start-up slim from the
start (``breakdowns(spans, slim=True)``: no shards, spans, gaps, context or outline built to
be thrown away). Whatever the trace, that must be exactly the full analysis, slimmed: the
repo's real traces, vLLM's multi-process start-ups, the fleet benchmark's start-ups (killed
and SIGTERMed ones too) and generated traces with what real exports hold (duplicate ids,
parent loops, missing parents, spans outliving their parent, several roots and processes).
And the analysis of a trace leaves nothing behind that only the cyclic collector frees: the
fleet is read with it paused (cli/_inputs.paused_gc), so a cycle holding a trace's spans
held every trace's (capacity of 10,000 start-ups: 555 MiB)."""

from __future__ import annotations

import gc
import glob
import json
import os
import pickle
import random
import sys

import pytest

from otel_coldstart.analyze.assemble import analyse_trace
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import TraceReadError, read_trace_file

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
sys.path.insert(0, os.path.join(REPO, "tests", "explain"))
import fleet_scale  # noqa: E402
import vllm_trace  # noqa: E402
from analyzer_scale import _attr  # noqa: E402

del sys.path[:2]

MS = 1_000_000
PHASES = ("import", "runtime_init", "deserialize", "h2d", "d2h", "d2d", "cast", "compile", "graph_capture", "warmup")
SERVER = ("Overall Loading", "Load weights", "Load model", "Worker init", "Init device")


def _otlp_span(trace, span_id, parent, name, start, end, attrs, error=False) -> dict:
    span = {"traceId": trace, "spanId": span_id, "name": name, "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end), "attributes": [_attr(k, v) for k, v in attrs.items()],
            "status": {"code": 2} if error else {}}
    if parent is not None:
        span["parentSpanId"] = parent
    return span


def _random_trace(rng: random.Random, size: int) -> list[str]:
    """One trace as OTLP JSON lines (one per process): roots, our phases with bytes, copy
    aggregates and file reads, vLLM's spans and others', in several processes, with the
    hostile links real exports have."""
    trace = f"{rng.getrandbits(128):032x}"
    processes = [{"process.pid": 100 + i, "host.type": rng.choice("ab"),
                  **({"vllm.process_id": str(100 + i)} if rng.random() < 0.5 else {})}
                 for i in range(rng.choice((1, 1, 2, 3)))]
    spans: dict[int, list[dict]] = {i: [] for i in range(len(processes))}
    ids = [f"{i + 1:016x}" for i in range(size + 8)]
    rng.shuffle(ids)
    nodes = []  # (id, start, end, process)
    t0 = fleet_scale.T0
    for number in range(rng.choice((1, 1, 2, 0))):
        span_id, start = ids.pop(), t0 + rng.randint(0, 500) * MS
        end = start + rng.randint(1000, 9000) * MS
        ready = rng.random() < 0.8
        spans[number % len(processes)].append(_otlp_span(trace, span_id, None, "model.startup", start, end, {
            "coldstart.ready": ready, "coldstart.end_reason": "ready" if ready else "sigterm", "thread.id": 1}))
        nodes.append((span_id, start, end, number % len(processes)))
    for _ in range(size if nodes else 0):
        parent = rng.choice(nodes)
        span_id = ids.pop() if rng.random() > 0.03 else rng.choice(nodes)[0]  # an id used twice
        start = parent[1] + rng.randint(0, max(1, parent[2] - parent[1]))
        end = start + rng.randint(0, max(1, parent[2] - start))
        if rng.random() < 0.08:
            end = parent[2] + rng.randint(1, 2000) * MS  # outlives its parent (and maybe the start-up)
        attrs: dict = {"thread.id": rng.choice((1, 1, 2))} if rng.random() < 0.95 else {}
        kind = rng.random()
        if kind < 0.65:
            phase = rng.choice(PHASES)
            name = "coldstart." + phase
            attrs["coldstart.phase"] = phase
            if rng.random() < 0.7:
                attrs["coldstart.bytes"] = rng.choice((0, 1, 2 << 20, -5, 7 << 30))
            if phase in ("h2d", "d2h", "d2d", "cast") and rng.random() < 0.7:
                attrs.update({"coldstart.aggregate": True, "coldstart.calls": 4,
                              "coldstart.busy_s": rng.choice((0.0, 0.01, 5.0, -1.0))})
                for key, value in (("coldstart.copy.async_s", 0.01), ("coldstart.throughput", rng.choice((1e9, 0))),
                                   ("coldstart.copy.async_unresolved", True), ("coldstart.copy.untimed_calls", 2),
                                   ("coldstart.copy.non_blocking_calls", rng.choice((0, 3)))):
                    if rng.random() < 0.25:
                        attrs[key] = value
            if phase == "deserialize":
                attrs.update({"coldstart.file.path": f"/m/model-{rng.randint(1, 9)}.safetensors",
                              "coldstart.file.size": rng.choice((2 << 20, 0))})
                for key, value in (("coldstart.cache.state", rng.choice(("cold", "warm", "partial", "odd"))),
                                   ("coldstart.cache.storage_read_bytes", rng.choice((0, 1 << 20, 2 << 20))),
                                   ("coldstart.io.read_bytes", 1 << 19),
                                   ("coldstart.cache.storage_read_unknown", "filesystem:nfs4")):
                    if rng.random() < 0.4:
                        attrs[key] = value
        elif kind < 0.8:
            name = rng.choice(SERVER)
            attrs["code.namespace"] = "vllm.model_executor"
        else:
            name = rng.choice(("user.step", "Load something"))
        parent_id = parent[0] if rng.random() > 0.04 else rng.choice((f"{rng.getrandbits(64):016x}", span_id))
        process = parent[3] if rng.random() < 0.9 else rng.randrange(len(processes))
        spans[process].append(_otlp_span(trace, span_id, parent_id, name, start, end, attrs, rng.random() < 0.05))
        nodes.append((span_id, start, end, process))
    return [json.dumps({"resourceSpans": [{"resource": {"attributes": [_attr(k, v) for k, v in processes[p].items()]},
                                           "scopeSpans": [{"spans": rng.sample(found, len(found))}]}]})
            for p, found in spans.items() if found]


def _fleet_startups(count: int) -> list[list[str]]:
    rng = random.Random(7)
    return [[fleet_scale._line(*fleet_scale.startup(number, rng))] for number in range(count)]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[tuple[str, list]]:
    """(name, spans) of every trace the checks below run on."""
    directory = tmp_path_factory.mktemp("traces")
    paths = sorted(glob.glob(os.path.join(REPO, "tests", "data", "traces", "*")))
    for launched in (True, False):
        for workers in (1, 2):
            where = directory / f"vllm-{launched}-{workers}"
            where.mkdir()
            paths.append(vllm_trace.write(str(where), launched=launched, workers=workers)[0])
    rng = random.Random(25)
    made = [(f"random-{i}", _random_trace(rng, rng.choice((5, 20, 60)))) for i in range(150)]
    made += [(f"fleet-{i}", lines) for i, lines in enumerate(_fleet_startups(80))]
    for name, lines in made:
        path = directory / f"{name}.otlp.jsonl"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    found = []
    for path in paths:
        try:
            found.append((os.path.basename(path), read_trace_file(path)))
        except TraceReadError:
            continue  # a response document of a search, not a trace
    assert len(found) > 200
    return found


def test_the_slim_analysis_is_the_full_one_slimmed(traces):
    startups = 0
    for name, spans in traces:
        full, slim = analyse_trace(list(spans)), analyse_trace(list(spans), slim=True)
        assert slim.startups == [b.slim() for b in full.startups], name
        assert slim.checks.lines() == full.checks.lines() and slim.repairs.lines() == full.repairs.lines(), name
        # Without the repairs too: duplicate ids and parent loops as they were read.
        assert breakdowns(list(spans), slim=True) == [b.slim() for b in breakdowns(list(spans))], name
        startups += len(full.startups)
    assert startups > 200


def test_a_slim_start_up_keeps_what_compare_and_capacity_read_and_little_else(traces):
    spans = dict(traces)["fleet-0.otlp.jsonl"]
    (full,) = analyse_trace(list(spans)).startups
    (slim,) = analyse_trace(list(spans), slim=True).startups
    assert slim.phases == full.phases and slim.unattributed_ns == full.unattributed_ns
    assert slim.cache == full.cache == "warm" and slim.root == full.root
    assert full.outline and full.shards and not (slim.outline or slim.shards or slim.spans or slim.gaps)
    # What a reading process hands back per start-up (a fleet of 10,000 crosses a pipe):
    # about 730 bytes today, where the full analysis with its spans is 20 times that.
    fleet = [spans for name, spans in traces if name.startswith("fleet-")]
    size = len(pickle.dumps([analyse_trace(list(s), slim=True) for s in fleet], pickle.HIGHEST_PROTOCOL)) / len(fleet)
    assert size < 1200 and len(pickle.dumps(analyse_trace(list(spans)), pickle.HIGHEST_PROTOCOL)) > 10 * size


@pytest.mark.parametrize("slim", [False, True])
def test_analysing_a_trace_leaves_no_reference_cycle(traces, slim):
    chosen = [spans for name, spans in traces if name.startswith(("vllm-", "fleet-1", "random-1"))]
    assert len(chosen) > 20
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for spans in chosen:
            analyse_trace(list(spans), slim)
        assert gc.collect() == 0  # nothing that reference counting did not free already
    finally:
        if enabled:
            gc.enable()
