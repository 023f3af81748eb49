"""Stand-ins that let the real graph-capture code paths of torch run on a CPU-only machine.

``torch.cuda.graph.__enter__/__exit__``, ``torch.accelerator.Graph.__enter__/__exit__`` and
``torch.cuda.make_graphed_callables`` are torch's own code, run unchanged; only what needs a
GPU under them is substituted: the graph class (whose capture_begin/capture_end record the
calls and can be told to fail), streams, synchronize and the cache flushes. Every
substitution is undone after the test, and the fixture checks that it was.
"""

from __future__ import annotations

import pytest
import torch

from otel_coldstart.patches._wrapping import ColdstartWrapper


class StandInGraph:
    """Takes the place of ``torch.cuda.CUDAGraph``: the real one needs a GPU to exist."""

    fail_on: set = set()  # "begin" / "end": raise there, as a failed capture does

    def __init__(self, keep_graph: bool = False) -> None:
        self.calls: list[str] = []

    def capture_begin(self, pool=None, capture_error_mode="global", check_input_liveness=False):
        self.calls.append("begin")
        if "begin" in self.fail_on:
            raise RuntimeError("stand-in capture_begin failed")

    def capture_end(self):
        self.calls.append("end")
        if "end" in self.fail_on:
            raise RuntimeError("stand-in capture_end failed")

    def replay(self):
        self.calls.append("replay")


def _stand_in_accelerator_graph():
    """``torch.accelerator.Graph`` with torch's own ``__enter__/__exit__`` and the stand-in's
    capture methods (the real base class refuses to exist without an accelerator)."""
    real = torch.accelerator.Graph
    return type("StandInAcceleratorGraph", (StandInGraph,), {
        "__enter__": vars(real)["__enter__"],
        "__exit__": vars(real)["__exit__"],
    })


class StandInStream:
    """Accepted by ``torch.cuda.stream``, which does nothing without a device."""


@pytest.fixture
def graph_standins(monkeypatch):
    """Request it before ``traced`` so instrument() patches the stand-ins, not the real classes."""
    real_graph = torch.cuda.CUDAGraph
    real_accelerator_graph = torch.accelerator.Graph
    real_enter = vars(torch.cuda.graph)["__enter__"]
    StandInGraph.fail_on = set()
    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    monkeypatch.setattr(torch.accelerator, "Graph", _stand_in_accelerator_graph())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "Stream", StandInStream)
    monkeypatch.setattr(torch.cuda.graph, "default_capture_stream", StandInStream())
    monkeypatch.setattr(torch.cuda.graphs, "graph_pool_handle", lambda: (0, 0))
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.accelerator, "empty_host_cache", lambda: None)
    yield StandInGraph
    StandInGraph.fail_on = set()
    monkeypatch.undo()
    assert torch.cuda.CUDAGraph is real_graph
    assert torch.accelerator.Graph is real_accelerator_graph
    assert vars(torch.cuda.graph)["__enter__"] is real_enter
    # The real classes were never wrapped: instrument() saw only the stand-ins.
    assert not isinstance(vars(real_graph)["capture_begin"], ColdstartWrapper)
    assert not isinstance(vars(real_accelerator_graph)["capture_begin"], ColdstartWrapper)
