"""Start-ups in the shapes the plugin writes, as OTLP JSON lines, with the variations the
ClickHouse reduction must get right: nested phases on one thread (self time), aggregates
(busy_s, one above its duration), work on other threads, an orphan (parent not exported),
a phase that outlives ready(), failed reads, cache verdicts recorded or from read counters,
unready start-ups; and the shapes it must leave to the file path: two ranks in one trace, a
user's span around phases, a server's own span (vLLM), a killed start-up's progress record.
"""

from __future__ import annotations

import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
from analyzer_scale import _attr as attr  # noqa: E402  (one OTLP attribute encoder for generated traces)

T0 = 1_790_000_000_000_000_000
MS = 1_000_000
MAIN, WORKER = 140000000000001, 140000000000777
HOSTS = ("g5.12xlarge", "p4d.24xlarge", "g6e.xlarge")


def span(trace, span_id, parent, name, start, end, attrs, error=False):
    item = {"traceId": trace, "spanId": f"{span_id:016x}", "name": name, "kind": 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [attr(k, v) for k, v in attrs.items()], "status": {"code": 2} if error else {}}
    if parent is not None:
        item["parentSpanId"] = f"{parent:016x}"
    return item


def startup(number: int, rng: random.Random, shape: str = "plain", version: str = "1.0") -> list[str]:
    """JSON lines of one start-up (one resource per process)."""
    trace = f"{number + 1:08x}" + f"{rng.getrandbits(96):024x}"
    start = T0 + number * 30_000 * MS
    host = HOSTS[number % 3]
    resource = {"service.name": "llm-server", "host.type": host, "process.pid": 1000 + number,
                "k8s.cluster.name": "staging" if number % 5 == 0 else "prod", "service.version": version}
    spans, ids = [], iter(range(2, 10_000))
    cursor = start + int(rng.uniform(1, 30) * MS)
    slow = 1.5 if version == "2.0" else 1.0

    def phase(name, ms, parent=1, thread=MAIN, gap=True, error=False, **attrs):
        nonlocal cursor
        sid = next(ids)
        parent = sid if parent == "self" else parent
        begin = cursor
        end = begin + int(ms * MS)
        spans.append(span(trace, sid, parent, f"coldstart.{name}", begin, end,
                          {"coldstart.phase": name, "thread.id": thread, **attrs}, error))
        cursor = end + (int(rng.uniform(0, 20) * MS) if gap else 0)
        return sid, begin, end

    phase("import", rng.uniform(200, 400) * slow)
    phase("import_libraries", rng.uniform(800, 1600))
    build, b0, b1 = phase("build_model", rng.uniform(300, 900))
    if number % 3 == 0:  # a worker thread's read inside build_model: busy, never subtracted from it
        spans.append(span(trace, next(ids), build, "coldstart.deserialize", b0 + 5 * MS, b0 + 50 * MS,
                          {"coldstart.phase": "deserialize", "thread.id": WORKER, "coldstart.cache.state": "warm"}))
    for index in range(rng.randint(1, 4)):
        cold = rng.random() < 0.4
        size = 1 << 30
        evidence = ({"coldstart.cache.state": "cold" if cold else "warm"} if index % 2 == 0 else
                    {"coldstart.cache.storage_read_bytes": size if cold else 1 << 20} if number % 2 else
                    {"coldstart.io.read_bytes": size // 3})
        phase("deserialize", rng.uniform(50, 3000 if cold else 120), error=(number % 7 == 3 and index == 0),
              **{"coldstart.file.size": size, "coldstart.bytes": size, **evidence})
    to_id, t0, t1 = phase("cast", rng.uniform(300, 700), gap=False)  # module.to, with its cast inside
    spans[-1]["name"] = "coldstart.module.to"
    spans.append(span(trace, next(ids), to_id, "coldstart.cast", t0 + 10 * MS, t1 - 10 * MS,
                      {"coldstart.phase": "cast", "thread.id": MAIN, "coldstart.aggregate": True,
                       "coldstart.busy_s": (t1 - t0) / 1e9 * rng.uniform(0.3, 0.9), "coldstart.calls": 40}))
    busy = rng.uniform(0.05, 0.3) if number % 11 else 99.0  # one in 11: busy_s above the duration
    phase("h2d", rng.uniform(100, 400), thread=WORKER if number % 4 == 1 else MAIN,
          **{"coldstart.aggregate": True, "coldstart.busy_s": busy, "coldstart.calls": 80})
    if number % 6 == 2:  # an orphan: its parent was never exported
        phase("compile", rng.uniform(100, 500), parent=0xdead)
    if number % 9 == 4:  # a span that is its own parent: top level, as an orphan
        phase("compile", rng.uniform(50, 150), parent="self")
    if shape == "user_span":  # a user's span around phases: the nearest phased ancestor needs a walk
        user = next(ids)
        u0 = cursor
        phase("warmup", rng.uniform(100, 300), parent=user)
        spans.append(span(trace, user, 1, "my-user-step", u0, cursor, {"thread.id": MAIN}))
    if shape == "server":  # vLLM's own span: one start-up over the server's processes
        spans.append(span(trace, next(ids), 1, "Load weights", start + MS, cursor, {"thread.id": MAIN}))
    ending = ("sigterm" if number % 13 == 5 else "exception" if number % 17 == 8 else "ready")
    if ending == "ready":
        phase("graph_capture", rng.uniform(500, 1500), **{"coldstart.aggregate": True, "coldstart.busy_s": 0.4})
    end = cursor + int(rng.uniform(5, 100) * MS)
    if number % 8 == 6:  # a warm-up that outlives ready(): not in the window
        spans.append(span(trace, next(ids), 1, "coldstart.warmup", end - 5 * MS, end + 400 * MS,
                          {"coldstart.phase": "warmup", "thread.id": MAIN}))
    root = {"coldstart.ready": ending == "ready", "coldstart.end_reason": ending, "thread.id": MAIN,
            "coldstart.rank": 0, "coldstart.world_size": 1}
    if ending != "ready":
        root["coldstart.end.phase"] = "cast"
    if shape == "killed":  # SIGKILL: no root, a progress record to rebuild it from
        record = {"start_ns": start, "attributes": {"coldstart.rank": 0, "thread.id": MAIN}}
        spans.append(span(trace, next(ids), 1, "coldstart.progress", cursor, cursor, {
            "coldstart.progress.seq": 3, "coldstart.progress.phase": "deserialize",
            "coldstart.progress.root": json.dumps(record), "coldstart.progress.open": "[]"}))
    else:
        spans.append(span(trace, 1, None, "model.startup", start, end, root))
    lines = [_line(resource, spans)]
    if shape == "two_ranks":  # a second process in the same trace
        other = [span(trace, 0x5000, None, "model.startup", start, end, {**root, "coldstart.rank": 1}),
                 span(trace, 0x5001, 0x5000, "coldstart.import", start + MS, start + 300 * MS,
                      {"coldstart.phase": "import", "thread.id": MAIN})]
        lines.append(_line({**resource, "process.pid": 9000 + number}, other))
    return lines


def _line(resource: dict, spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [attr(k, v) for k, v in resource.items()]},
                                          "scopeSpans": [{"scope": {"name": "otel_coldstart"}, "spans": spans}]}]})


SHAPES = ("user_span", "server", "killed", "two_ranks")


def write(path: str, count: int, seed: int = 7, version: str = "1.0", first: int = 0) -> None:
    """``count`` start-ups; one in 10 in a shape the SQL leaves to the file path."""
    rng = random.Random(seed)
    with open(path, "w") as out:
        for number in range(first, first + count):
            shape = SHAPES[(number // 10) % len(SHAPES)] if number % 10 == 9 else "plain"
            for line in startup(number, rng, shape, version):
                out.write(line + "\n")
