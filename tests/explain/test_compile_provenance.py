"""Compile provenance on coldstart.compile spans (patches/compile.py), in process, with the
eager backends (no Inductor: a second, not ten): the compiled frame, torch's stage times and
recompilation reason from its CompilationMetrics, the cache counters; and a torch that
publishes no metrics leaves them unknown, never wrong."""

from __future__ import annotations

import pytest

import otel_coldstart
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import compute_breakdown
from otel_coldstart.analyze.explain import compile_summary


def _scaled(x):
    return x * 3 + 1


def _breakdown(traced):
    records = traced.records()
    root = next(r for r in records if r.is_root)
    return compute_breakdown(root, [r for r in records if not r.is_root])


def test_a_compilation_and_its_recompilation_carry_frame_stages_reason_and_cache_counts(traced):
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(_scaled, backend="aot_eager")
    assert torch.equal(compiled(torch.ones(4)), _scaled(torch.ones(4)))
    assert torch.equal(compiled(torch.ones(2, 3)), _scaled(torch.ones(2, 3)))  # rank changed: recompiles
    otel_coldstart.ready()

    first, second = sorted(traced.by_phase(semconv.PHASE_COMPILE), key=lambda s: s.start_time)
    frame = f"_scaled ({__file__}:{_scaled.__code__.co_firstlineno})"
    assert first.attributes[semconv.COMPILE_FRAME] == frame
    assert second.attributes[semconv.COMPILE_FRAME] == frame + " #1"
    assert first.attributes[semconv.COMPILE_RECOMPILE] is False
    assert second.attributes[semconv.COMPILE_RECOMPILE] is True
    assert "rank" in second.attributes[semconv.COMPILE_RECOMPILE_REASON]
    for span in (first, second):
        attrs = span.attributes
        dynamo_s = attrs[semconv.compile_stage_attribute("dynamo")]
        assert 0 < attrs[semconv.compile_stage_attribute("aot_autograd")] <= dynamo_s
        assert dynamo_s <= (span.end_time - span.start_time) / 1e9 * 1.05 + 0.01
        # aot_eager uses no cache: the counters say so (zero, known), not "unknown"
        assert attrs[semconv.COMPILE_CACHE_HITS] == 0 and attrs[semconv.COMPILE_CACHE_MISSES] == 0
        assert semconv.COMPILE_EVIDENCE_UNAVAILABLE not in attrs

    summary = compile_summary(_breakdown(traced))
    assert summary.count == 2 and summary.recompilations == 1
    assert summary.cache_hits == 0 and summary.cache_misses == 0 and summary.unknown == 0
    assert summary.stages["dynamo"] > 0


def test_without_compilation_metrics_the_span_says_unknown_and_ends_at_the_compilation_end(traced):
    import torch._dynamo
    import torch._dynamo.config

    torch._dynamo.reset()
    with torch._dynamo.config.patch(log_compilation_metrics=False):  # torch publishes none
        compiled = torch.compile(_scaled, backend="eager")
        assert torch.equal(compiled(torch.ones(3)), _scaled(torch.ones(3)))
    otel_coldstart.ready()

    (span,) = traced.by_phase(semconv.PHASE_COMPILE)
    assert list(span.attributes[semconv.COMPILE_EVIDENCE_UNAVAILABLE]) == ["compilation_metrics"]
    assert semconv.COMPILE_FRAME not in span.attributes
    assert span.attributes[semconv.COMPILE_CACHE_MISSES] == 0  # the counters still answer
    summary = compile_summary(_breakdown(traced))
    assert summary.count == 1 and summary.stages == {}


def test_an_exception_while_compiling_reaches_the_host_and_the_span_ends(traced):
    import torch._dynamo

    torch._dynamo.reset()

    def broken_backend(graph, example_inputs):
        raise ValueError("backend refused")

    compiled = torch.compile(_scaled, backend=broken_backend, fullgraph=True)
    with pytest.raises(Exception) as raised:
        compiled(torch.ones(2))
    assert "backend refused" in str(raised.value)
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_COMPILE)
    assert not span.attributes.get(semconv.INTERRUPTED)
    assert span.attributes[semconv.COMPILE_FAILURE] == "BackendCompilerFailed"
