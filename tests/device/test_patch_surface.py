"""The device patch modules have the common surface, patch once however often asked, and
unpatch to the exact originals."""

from __future__ import annotations

import sys

import pytest
import torch

from otel_coldstart import patches
from otel_coldstart.patches import compile as compile_patch, cuda_graphs, pinning, runtime, tensor_ops
from otel_coldstart.patches._wrapping import ColdstartWrapper

DEVICE_MODULES = (tensor_ops, pinning, cuda_graphs, runtime, compile_patch)


@pytest.mark.parametrize("module", DEVICE_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_surface_and_registration(module):
    assert module in patches.ALL
    assert isinstance(module.TARGETS, tuple) and module.TARGETS
    assert isinstance(module.HOT_PATH, bool)
    for name in ("patch", "unpatch", "is_patched", "get_version"):
        assert callable(getattr(module, name)), name
    assert module.get_version() == torch.__version__


def _wrapped_attributes():
    owners = [torch.Tensor, torch.UntypedStorage, torch.nn.Module, torch, torch.cuda, torch.cuda.graph,
              torch.cuda.CUDAGraph, torch.accelerator.Graph, torch.cuda.graphs]
    return {(owner, name): value for owner in owners for name, value in vars(owner).items()
            if isinstance(value, ColdstartWrapper)}


def test_patching_twice_is_one_layer_and_unpatch_restores_everything():
    import torch._dynamo  # noqa: F401  (so the compile patch has something to register with)

    import otel_coldstart

    otel_coldstart.uninstrument()
    before = {(owner, name): vars(owner).get(name) for owner, name in
              [(torch.Tensor, "to"), (torch, "empty"), (torch.cuda.graph, "__enter__"),
               (torch.cuda, "make_graphed_callables")]}
    try:
        for _ in range(2):
            for module in DEVICE_MODULES:
                module.patch()
        wrapped = _wrapped_attributes()
        assert (torch.Tensor, "to") in wrapped and (torch.cuda.graph, "__enter__") in wrapped
        for (owner, name), wrapper in wrapped.items():
            assert not isinstance(wrapper.__wrapped__, ColdstartWrapper), (owner, name)
        from torch._dynamo.callback import callback_handler

        assert callback_handler.start_callbacks.count(compile_patch._on_compile_start) == 1
    finally:
        for module in DEVICE_MODULES:
            module.unpatch()
    assert _wrapped_attributes() == {}
    assert not any(module.is_patched() for module in DEVICE_MODULES)
    for (owner, name), value in before.items():
        assert vars(owner).get(name) is value, (owner, name)


def test_the_torch_build_is_reported_before_torch_is_imported_too(monkeypatch):
    """PyPI's CUDA wheel says 2.13.0 in its metadata and 2.13.0+cu130 in torch.__version__
    (issue 42): the version asked before ``import torch`` (from torch/version.py) is the build."""
    from otel_coldstart.patches._wrapping import installed_version

    monkeypatch.delitem(sys.modules, "torch")
    assert installed_version("torch") == str(torch.__version__)
    assert "+" in installed_version("torch")  # +cpu, +cu130: the build, not the release alone
