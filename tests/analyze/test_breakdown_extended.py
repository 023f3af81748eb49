"""The breakdown beyond the basics: the same trace in OTLP and Jaeger form, ranks sharing a
trace, foreign spans as context, unattributed gaps, and linear cost on deep traces."""

from __future__ import annotations

import subprocess
import sys

import pytest

from analyze_records import MS, T0, child, data_file, only, root
from otel_coldstart.analyze.breakdown import breakdowns, by_trace
from otel_coldstart.analyze.model import Span
from otel_coldstart.analyze.readers import read_trace, read_trace_file

US = 1000


def test_same_trace_in_otlp_and_jaeger_gives_the_same_breakdown():
    [a] = breakdowns(read_trace_file(data_file("demo-cold-first-shard.otlp.jsonl")))
    [b] = breakdowns(read_trace_file(data_file("demo-cold-first-shard.jaeger.json")))
    assert read_trace(data_file("demo-cold-first-shard.jaeger.json")).format == "jaeger"
    assert [(p.phase, p.spans, p.bytes) for p in a.phases] == [(p.phase, p.spans, p.bytes) for p in b.phases]
    spans = len(a.spans) + 1
    # Jaeger keeps microseconds: each span's ends may move by under 1 us each
    for pa, pb in zip(a.phases, b.phases):
        assert abs(pa.busy_ns - pb.busy_ns) <= 2 * US * spans
    assert abs(a.unattributed_ns - b.unattributed_ns) <= 2 * US * spans
    assert abs(a.duration_ns - b.duration_ns) <= US
    assert [(s.path, s.index, s.size, s.read_bytes, s.cache_state) for s in a.shards] == \
        [(s.path, s.index, s.size, s.read_bytes, s.cache_state) for s in b.shards]
    assert a.ready and b.ready and a.dominant.phase == b.dominant.phase


@pytest.mark.process
def test_committed_jaeger_file_is_what_the_converter_writes():
    converted = subprocess.run(
        [sys.executable, data_file("otlp_to_jaeger.py"), data_file("demo-cold-first-shard.otlp.jsonl")],
        capture_output=True, text=True, check=True).stdout
    with open(data_file("demo-cold-first-shard.jaeger.json"), encoding="utf-8") as handle:
        assert handle.read() == converted


def test_real_demo_trace_single_thread_invariant():
    [b] = breakdowns(read_trace_file(data_file("demo-cold-first-shard.otlp.jsonl")))
    assert b.parallelism < 1.0001
    assert sum(p.busy_ns for p in b.phases) + b.unattributed_ns == b.duration_ns
    assert sum(g.duration_ns for g in b.gaps) == b.unattributed_ns
    assert [s.cache_state for s in b.shards] == ["cold", "warm", "warm", "warm"]


def test_ranks_sharing_a_trace_are_separate_breakdowns_in_rank_order():
    trace = "ef" * 16
    spans = []
    for rank in (1, 0):
        r = root(1000 + rank * 500, trace=trace, rank=rank, resource={"host.name": f"h{rank}"})
        spans += [r, child(r, "coldstart.deserialize", "deserialize", 0, 300 + rank * 500)]
    group = by_trace(breakdowns(spans))[trace]
    assert [b.rank for b in group] == [0, 1]
    assert [b.phase("deserialize").busy_ns for b in group] == [300 * MS, 800 * MS]


def test_foreign_spans_are_context_with_our_phases_inside():
    r = root(1000)
    load = child(r, "Load weights", None, 100, 900)
    inner = child(load, "coldstart.deserialize", "deserialize", 150, 500)
    b = only([r, load, inner, child(load, "coldstart.h2d", "h2d", 500, 850)])
    [context] = b.context
    assert context.name == "Load weights" and context.phases_inside == ("deserialize", "h2d")
    assert b.phase("deserialize").busy_ns == 350 * MS  # the foreign span is transparent
    assert sum(p.busy_ns for p in b.phases) + b.unattributed_ns == b.duration_ns


def test_a_span_enclosing_the_root_is_context_too():
    outer = Span("12" * 16, "00000000000000aa", None, "vllm.load_model", T0 - 500 * MS, T0 + 1500 * MS, {}, {})
    r = root(1000, trace="12" * 16)
    r = Span(r.trace_id, r.span_id, outer.span_id, r.name, r.start_ns, r.end_ns, r.attributes, {})
    b = only([outer, r, child(r, "coldstart.cast", "cast", 0, 100)])
    assert [(c.name, c.encloses_root) for c in b.context] == [("vllm.load_model", True)]


def test_deep_parent_chain_is_linear_and_needs_no_recursion():
    r = root(1000)
    spans = [r]
    parent = r
    for _ in range(30000):  # a chain deeper than Python's recursion limit
        parent = child(parent, "user.step", None, 0, 1000)
        spans.append(parent)
    spans.append(child(parent, "coldstart.cast", "cast", 100, 200))
    b = only(spans)
    assert b.phase("cast").busy_ns == 100 * MS


def test_real_two_rank_trace_gives_one_breakdown_per_rank_and_a_straggler():
    from otel_coldstart.analyze.findings import find

    result = read_trace(data_file("demo-two-ranks.otlp.jsonl"))
    assert any("not in the input" in w for w in result.warnings)  # the launcher's span
    group = by_trace(breakdowns(result.spans))["7a11c0de00000000000000000000beef"]
    assert [(b.rank, b.world_size) for b in group] == [(0, 2), (1, 2)]
    for b in group:
        assert sum(p.busy_ns for p in b.phases) + b.unattributed_ns == b.duration_ns
    [straggler] = [f for f in find(group) if f.rule == "straggler_rank"]
    assert straggler.rank == 0 and straggler.saving_ns == group[0].duration_ns - group[1].duration_ns
