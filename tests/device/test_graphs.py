"""CUDA graph capture through torch's real ``torch.cuda.graph``, ``torch.accelerator.Graph``
and ``make_graphed_callables`` code, with a stand-in graph class under them (tests/device/conftest.py)."""

from __future__ import annotations

import pytest
import torch

import otel_coldstart
from otel_coldstart import semconv
from otel_coldstart.patches import cuda_graphs


def _open_captures():
    from otel_coldstart import session as _session

    return cuda_graphs._open_graph_captures(_session.ACTIVE).by_graph


def _captures(traced):
    return traced.by_phase(semconv.PHASE_GRAPH_CAPTURE)


def test_one_capture_is_one_span_with_its_duration(graph_standins, traced):
    graph = torch.cuda.CUDAGraph()
    x = torch.ones(4)
    with torch.cuda.graph(graph):
        y = x * 2
    otel_coldstart.ready()
    assert graph.calls == ["begin", "end"]
    assert torch.equal(y, torch.full((4,), 2.0))
    (span,) = _captures(traced)
    assert span.name == "coldstart.graph_capture"
    assert span.attributes[semconv.CALLS] == 1
    assert span.attributes[semconv.GRAPH_API] == cuda_graphs.API_CUDA_GRAPH_CM
    assert span.end_time > span.start_time
    assert span.attributes[semconv.BUSY_S] == pytest.approx((span.end_time - span.start_time) / 1e9)
    assert not span.attributes.get(semconv.AFTER_READY)


def test_a_loop_over_batch_sizes_is_one_aggregate_with_count_and_sizes(graph_standins, traced):
    sizes = [1, 2, 4, 8, 16]
    graphs = {n: torch.cuda.CUDAGraph() for n in sizes}
    with otel_coldstart.phase("capture_all"):
        for n in sizes:
            with cuda_graphs.batch_size(n), torch.cuda.graph(graphs[n]):
                torch.zeros(n).add_(1)
        with cuda_graphs.batch_size(4), torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass  # a repeated size is counted, not listed twice
    otel_coldstart.ready()
    (span,) = _captures(traced)
    assert span.attributes[semconv.CALLS] == len(sizes) + 1
    assert list(span.attributes[semconv.GRAPH_BATCH_SIZES]) == sizes
    assert 0 < span.attributes[semconv.GRAPH_MAX_CAPTURE_S] <= span.attributes[semconv.BUSY_S]
    (phase,) = traced.named("coldstart.capture_all")
    assert span.parent.span_id == phase.context.span_id
    assert all(g.calls == ["begin", "end"] for g in graphs.values())


def test_exception_in_the_captured_block_reaches_the_host_and_marks_the_span(graph_standins, traced):
    graph = torch.cuda.CUDAGraph()
    error = ValueError("model raised during capture")
    with pytest.raises(ValueError) as raised:
        with torch.cuda.graph(graph):
            raise error
    assert raised.value is error
    assert graph.calls == ["begin", "end"]  # torch's __exit__ still ended the capture
    otel_coldstart.ready()
    (span,) = _captures(traced)
    assert span.status.status_code.name == "ERROR"
    assert span.attributes[semconv.GRAPH_FAILED] is True
    assert any(e.name == "exception" and "model raised" in e.attributes["exception.message"] for e in span.events)


@pytest.mark.parametrize("where", ["begin", "end"])
def test_failed_capture_begin_or_end_reaches_the_host_unchanged(graph_standins, traced, where):
    graph_standins.fail_on = {where}
    with pytest.raises(RuntimeError, match=f"stand-in capture_{where} failed"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
    graph_standins.fail_on = set()
    # Nothing left open: the per-tensor patches record again on this thread.
    assert not _open_captures()
    torch.ones(3).to(torch.float16)
    otel_coldstart.ready()
    (span,) = _captures(traced)
    assert span.status.status_code.name == "ERROR"
    assert len(traced.by_phase(semconv.PHASE_CAST)) == 1


def test_capture_driven_by_hand_is_seen_through_capture_begin_and_end(graph_standins, traced):
    graph = torch.cuda.CUDAGraph()
    graph.capture_begin()
    graph.capture_end()
    graph_standins.fail_on = {"begin"}
    with pytest.raises(RuntimeError):
        torch.cuda.CUDAGraph().capture_begin()
    graph_standins.fail_on = set()
    otel_coldstart.ready()
    spans = _captures(traced)
    ok = [s for s in spans if s.status.status_code.name != "ERROR"]
    failed = [s for s in spans if s.status.status_code.name == "ERROR"]
    assert len(ok) == 1 and len(failed) == 1
    assert ok[0].attributes[semconv.GRAPH_API] == cuda_graphs.API_CUDA_GRAPH
    assert not _open_captures()


def test_accelerator_graph_context_manager(graph_standins, traced):
    graph = torch.accelerator.Graph()
    with graph:
        torch.ones(2).mul_(3)
    otel_coldstart.ready()
    assert graph.calls == ["begin", "end"]
    (span,) = _captures(traced)
    assert span.attributes[semconv.GRAPH_API] == cuda_graphs.API_ACCELERATOR_GRAPH
    assert span.attributes[semconv.CALLS] == 1


def test_make_graphed_callables_is_a_parent_of_its_captures_with_the_batch_size(graph_standins, traced):
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 4)
    sample = torch.randn(6, 8, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(module, (sample,), num_warmup_iters=1)
    otel_coldstart.ready()
    assert graphed is module  # torch returns the module with a graphed forward
    (parent,) = traced.named(semconv.SPAN_MAKE_GRAPHED_CALLABLES)
    captures = [s for s in _captures(traced) if s.attributes.get(semconv.AGGREGATE)]
    (aggregate,) = captures
    assert aggregate.parent.span_id == parent.context.span_id
    assert aggregate.attributes[semconv.CALLS] == 2  # forward and backward graphs
    assert list(aggregate.attributes[semconv.GRAPH_BATCH_SIZES]) == [6]


def test_work_inside_a_capture_is_not_a_copy_or_cast(graph_standins, traced):
    x = torch.randn(16)
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        x.to(torch.float16)
    otel_coldstart.ready()
    assert traced.by_phase(semconv.PHASE_CAST) == []


def test_capture_after_ready_is_written_at_once_and_marked(graph_standins, traced):
    otel_coldstart.ready()
    assert cuda_graphs.is_patched()
    with cuda_graphs.batch_size(32), torch.cuda.graph(torch.cuda.CUDAGraph()):
        pass
    (span,) = _captures(traced)
    assert span.attributes[semconv.AFTER_READY] is True
    assert span.attributes[semconv.GRAPH_BATCH_SIZE] == 32


def test_vllm_forward_context_gives_the_batch_size(graph_standins, traced, monkeypatch):
    """vLLM sets ``vllm.forward_context._forward_context.batch_descriptor.num_tokens`` around
    each capture; a module of that shape stands in for vLLM, which is not installed here."""
    import sys
    import types

    module = types.ModuleType("vllm.forward_context")
    monkeypatch.setitem(sys.modules, "vllm.forward_context", module)
    for tokens in (8, 16):
        module._forward_context = types.SimpleNamespace(batch_descriptor=types.SimpleNamespace(num_tokens=tokens))
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
    module._forward_context = None
    otel_coldstart.ready()
    (span,) = _captures(traced)
    assert list(span.attributes[semconv.GRAPH_BATCH_SIZES]) == [8, 16]


@pytest.mark.parametrize("api", ["torch.cuda.graph", "torch.accelerator.Graph"])
def test_capture_time_starts_at_capture_begin_and_the_pre_capture_sync_is_apart(
        graph_standins, traced, monkeypatch, api):
    """``__enter__`` first synchronises: it waits for GPU work queued before (vLLM's eager
    warm-up). That wait is not the capture's; it is reported as pre_capture_s."""
    import time

    from otel_coldstart.patches import _guard

    def slow_synchronize(device=None):
        time.sleep(0.2)  # the device finishing an earlier eager run

    if api == "torch.cuda.graph":
        monkeypatch.setattr(torch.cuda, "synchronize", slow_synchronize)
        context = torch.cuda.graph(torch.cuda.CUDAGraph())
        graph_class = graph_standins
    else:
        monkeypatch.setattr(torch.accelerator, "synchronize", slow_synchronize)
        context = torch.accelerator.Graph()
        graph_class = type(context)
    seen_open = []
    wrapped_begin = graph_class.capture_begin  # our wrapper around the stand-in's

    def capture_begin(self, *args, **kwargs):
        # Other threads' event calls must already be shut out when torch begins the capture.
        seen_open.append(_guard.any_capture_open())
        time.sleep(0.01)
        return wrapped_begin(self, *args, **kwargs)

    monkeypatch.setattr(graph_class, "capture_begin", capture_begin)
    with context:
        pass
    otel_coldstart.ready()
    (span,) = _captures(traced)
    assert seen_open == [True]
    assert span.attributes[semconv.GRAPH_PRE_CAPTURE_S] >= 0.19
    assert span.attributes[semconv.BUSY_S] < 0.15  # the capture alone: ~10 ms, not the 200 ms sync
    assert (span.end_time - span.start_time) / 1e9 < 0.15
