"""Issue 25.3: span ids are unique only within a trace. A trace set copied or replayed, or
Zipkin/Jaeger 64-bit ids from several services, repeat them across traces; every start-up
keeps its own spans, and capacity over thousands of start-ups stays linear whatever the ids."""

from __future__ import annotations

import time

from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.capacity import capacity_summary
from otel_coldstart.analyze.model import Span

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _startup(trace: str, offset_ms: float, label: str, deserialize_ms: float, ids=None, shards: int = 4,
             host_type: str = "g5") -> list[Span]:
    """One start-up; ``ids`` gives span ids (the same for every trace when repeated)."""
    ids = ids or (lambda n: f"{n:016x}")
    start = T0 + int(offset_ms * MS)
    resource = {"service.name": "server", "host.type": host_type}
    root = Span(trace, ids(1), None, semconv.SPAN_ROOT, start, start + 1000 * MS,
                {semconv.READY: True, semconv.THREAD_ID: 1}, resource)
    spans = [root]
    cursor = start
    for index in range(shards):
        read = int(deserialize_ms / shards * MS)
        spans.append(Span(trace, ids(2 + index), root.span_id, "coldstart.deserialize", cursor, cursor + read, {
            semconv.PHASE: semconv.PHASE_DESERIALIZE, semconv.THREAD_ID: 1,
            semconv.FILE_PATH: f"/ckpt/{label}-{index:05d}.safetensors", semconv.FILE_SIZE: 1 << 20,
            semconv.SHARD_INDEX: index, semconv.CACHE_STATE: semconv.CACHE_WARM}, resource))
        cursor += read
    spans.append(Span(trace, ids(100), root.span_id, "coldstart.warmup", cursor, cursor + 100 * MS, {
        semconv.PHASE: semconv.PHASE_WARMUP, semconv.THREAD_ID: 1}, resource))
    return spans


def test_startups_overlapping_in_time_with_the_same_span_ids_keep_their_own_spans():
    a = _startup("a" * 32, 0, "alpha", 200)
    b = _startup("b" * 32, 50, "beta", 600)  # starts 50 ms later: the two windows overlap
    assert [s.span_id for s in a] == [s.span_id for s in b]
    for spans in (a + b, b + a):
        by_trace = {x.trace_id: x for x in breakdowns(spans)}
        assert set(by_trace) == {"a" * 32, "b" * 32}
        alpha, beta = by_trace["a" * 32], by_trace["b" * 32]
        assert [s.path for s in alpha.shards] == [f"/ckpt/alpha-{i:05d}.safetensors" for i in range(4)]
        assert [s.path for s in beta.shards] == [f"/ckpt/beta-{i:05d}.safetensors" for i in range(4)]
        assert alpha.phase("deserialize").busy_ns == 200 * MS and beta.phase("deserialize").busy_ns == 600 * MS
        assert alpha.phase("warmup").spans == beta.phase("warmup").spans == 1
        assert alpha.unattributed_ns == 700 * MS and beta.unattributed_ns == 300 * MS


def _fleet(count: int, repeated: bool) -> list[Span]:
    spans: list[Span] = []
    for number in range(count):
        ids = (lambda n: f"{n:016x}") if repeated else (lambda n, k=number: f"{k:08x}{n:08x}")
        spans += _startup(f"{number:032x}", number * 10, f"s{number}", 100 + number % 7, ids, shards=12,
                          host_type=("g5", "p4d")[number % 2])
    return spans


def _capacity_seconds(spans: list[Span]) -> tuple[float, list]:
    started = time.process_time()
    results = breakdowns(spans)
    summaries = capacity_summary(results)
    return time.process_time() - started, [results, summaries]


def test_capacity_over_2000_startups_is_linear_whatever_the_ids():
    unique_s, (unique, _) = _capacity_seconds(_fleet(2000, repeated=False))
    repeated_s, (results, summaries) = _capacity_seconds(_fleet(2000, repeated=True))
    assert len(results) == 2000
    assert all(len(b.shards) == 12 and b.phase("warmup").spans == 1 for b in results)
    assert [b.phase("deserialize").busy_ns for b in results] == [b.phase("deserialize").busy_ns for b in unique]
    assert summaries[0].count == 2000 and {s.value: s.count for s in summaries[1:]} == {"g5": 1000, "p4d": 1000}
    # Quadratic on main: 12x slower with repeated ids (7.4 s against 0.6 s). CPU time of this
    # process, and a bound generous enough for a loaded 2-core CI machine.
    assert repeated_s < 3 * unique_s + 0.5, (repeated_s, unique_s)
