"""Tensor moves and casts: classified, aggregated into a few spans whose bytes add up, no-ops
silent, results bit-identical, and every per-tensor patch gone after ready()."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

import otel_coldstart
from otel_coldstart import semconv
from otel_coldstart.patches import tensor_ops
from otel_coldstart.patches._wrapping import ColdstartWrapper

LAYERS = 100  # weight + bias each: 200 tensors


def _model(dtype=torch.bfloat16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(LAYERS)]).to(dtype)


@pytest.fixture
def checkpoint(tmp_path):
    """A real 200-tensor bf16 safetensors file written by safetensors itself."""
    path = tmp_path / "model.safetensors"
    state = {k: v.contiguous() for k, v in _model().state_dict().items()}
    save_file(state, str(path))
    return str(path)


def _raw_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().view(torch.uint8).numpy().tobytes()


def test_cast_of_200_tensors_is_a_handful_of_spans_with_exact_bytes(traced, checkpoint):
    state = load_file(checkpoint)
    assert len(state) == 2 * LAYERS
    expected_bytes = sum(t.nbytes for t in state.values())
    model = _model(torch.bfloat16)
    model.load_state_dict(state)
    traced.exporter.clear()

    model.to(torch.float16)
    otel_coldstart.ready()

    spans = traced.spans()
    casts = traced.by_phase(semconv.PHASE_CAST)
    assert len(spans) <= 5, [s.name for s in spans]
    leaves = [s for s in casts if s.attributes.get(semconv.AGGREGATE)]
    assert sum(s.attributes[semconv.BYTES] for s in leaves) == expected_bytes
    assert sum(s.attributes[semconv.CALLS] for s in leaves) == 2 * LAYERS
    assert {(s.attributes[semconv.CAST_FROM], s.attributes[semconv.CAST_TO]) for s in leaves} == {
        ("bfloat16", "float16")}
    (parent,) = traced.named(semconv.SPAN_MODULE_TO)
    assert parent.attributes[semconv.PHASE] == semconv.PHASE_CAST
    assert parent.attributes[semconv.TENSORS] == 2 * LAYERS
    assert all(s.parent.span_id == parent.context.span_id for s in leaves)


def test_load_state_dict_copies_are_one_h2h_aggregate(traced, checkpoint):
    state = load_file(checkpoint)
    model = _model(torch.bfloat16)
    traced.exporter.clear()
    model.load_state_dict(state)  # param.copy_(saved) per tensor
    otel_coldstart.ready()
    (copies,) = traced.by_phase(semconv.PHASE_H2H)
    assert copies.attributes[semconv.CALLS] == 2 * LAYERS
    assert copies.attributes[semconv.BYTES] == sum(t.nbytes for t in state.values())
    # Host copies are not device copies: no pinned/pageable split, no queued count.
    assert semconv.COPY_PINNED_BYTES not in copies.attributes
    assert semconv.COPY_NON_BLOCKING_CALLS not in copies.attributes


def test_results_are_bit_identical_to_uninstrumented(traced, checkpoint):
    def run():
        state = load_file(checkpoint)
        model = _model(torch.bfloat16)
        model.load_state_dict(state)
        model.half()
        first = next(iter(state.values()))
        extra = {
            "to_float": first.to(torch.float32),
            "to_dtype_positional_nb": first.to(torch.float16, True),
            "float": first.float(),
            "bfloat16": first.float().bfloat16(),
            "copy": first.to(torch.float16, copy=True),
        }
        return {**{f"p.{k}": v for k, v in model.state_dict().items()}, **extra}

    instrumented = run()
    otel_coldstart.uninstrument()
    plain = run()
    assert instrumented.keys() == plain.keys()
    for name in plain:
        a, b = instrumented[name], plain[name]
        assert (a.dtype, a.device, a.shape, a.stride()) == (b.dtype, b.device, b.shape, b.stride()), name
        assert _raw_bytes(a) == _raw_bytes(b), name


def test_no_ops_emit_nothing_and_keep_identity_and_storage(traced):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    model = _model(torch.float32)
    params_before = [p.data_ptr() for p in model.parameters()]
    traced.exporter.clear()

    assert t.to(torch.float32) is t
    assert t.to("cpu") is t
    assert t.float() is t
    assert t.to(t) is t
    storage = t.untyped_storage()
    assert storage.to(device="cpu") is storage
    assert model.to("cpu") is model and model.float() is model
    assert [p.data_ptr() for p in model.parameters()] == params_before
    view = t[1:]
    assert view.to(torch.float32) is view and view.untyped_storage().data_ptr() == storage.data_ptr()
    otel_coldstart.ready()
    assert [s.name for s in traced.spans()] == [semconv.SPAN_ROOT]


def test_tensor_subclass_with_torch_function_is_counted_once(traced):
    calls = []

    class Tracked(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(getattr(func, "__name__", func))
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(64, dtype=torch.float32).as_subclass(Tracked)
    traced.exporter.clear()
    y = x.to(torch.float16)
    otel_coldstart.ready()
    assert type(y) is Tracked and y.dtype == torch.float16
    assert calls, "the subclass hook did not run: the test would prove nothing"
    (cast,) = traced.by_phase(semconv.PHASE_CAST)
    assert cast.attributes[semconv.CALLS] == 1
    assert cast.attributes[semconv.BYTES] == 64 * 4


def test_non_blocking_host_cast_is_not_a_queued_copy(traced):
    t = torch.randn(32)
    t.to(torch.float16, non_blocking=True)
    t.to(torch.bfloat16, True)
    otel_coldstart.ready()
    for span in traced.by_phase(semconv.PHASE_CAST):
        assert semconv.COPY_NON_BLOCKING_CALLS not in span.attributes
        assert semconv.COPY_ASYNC_S not in span.attributes


@pytest.mark.parametrize("method,args,kwargs,expected", [
    ("to", (torch.float16,), {}, False),
    ("to", (torch.float16, True), {}, True),
    ("to", ("cuda", torch.float16, True), {}, True),
    ("to", ("cuda", torch.float16, False, True), {}, False),  # the True is copy=
    ("to", ("cuda",), {"non_blocking": True}, True),
    ("to", (torch.zeros(1), True), {}, True),
    ("cuda", (0, True), {}, True),
    ("cuda", (), {"non_blocking": True}, True),
    ("cuda", (0,), {}, False),
    ("half", (), {}, False),
])
def test_non_blocking_flag_is_read_from_every_call_form(method, args, kwargs, expected):
    assert tensor_ops._move_is_non_blocking(method, args, kwargs) is expected


@pytest.mark.parametrize("src,dst,cast,phase", [
    ("cpu", "cpu", True, semconv.PHASE_CAST),
    ("cpu", "cpu", False, semconv.PHASE_H2H),
    ("cpu", "cuda", False, semconv.PHASE_H2D),
    ("cpu", "cuda", True, semconv.PHASE_H2D),  # transferred as the source dtype, cast on the device
    ("cuda", "cpu", False, semconv.PHASE_D2H),
    ("cuda", "cuda", False, semconv.PHASE_D2D),
    ("cuda", "cuda", True, semconv.PHASE_CAST),
    ("meta", "cpu", False, None),
    ("cpu", "meta", True, None),
])
def test_classification(src, dst, cast, phase):
    assert tensor_ops._phase_for(src, dst, cast) == phase


def _per_tensor_targets():
    from otel_coldstart.patches import pinning

    targets = [(torch.Tensor, n) for n in tensor_ops._TENSOR_METHODS + ("copy_", "pin_memory")]
    targets += [(torch.UntypedStorage, "to"), (torch.UntypedStorage, "pin_memory")]
    targets += [(torch.nn.Module, n) for n, _ in tensor_ops._MODULE_METHODS]
    targets += [(torch, n) for n in pinning._ALLOCATORS]
    return targets


def test_after_ready_every_per_tensor_patch_is_the_original_object():
    from opentelemetry.sdk.trace import TracerProvider

    from otel_coldstart.patches import cuda_graphs

    otel_coldstart.uninstrument()
    originals = {(owner, name): (name in vars(owner), vars(owner).get(name), getattr(owner, name))
                 for owner, name in _per_tensor_targets()}
    otel_coldstart.instrument(tracer_provider=TracerProvider(), start_at="instrument", summary=False,
                              handle_sigterm=False)
    try:
        assert isinstance(vars(torch.Tensor)["to"], ColdstartWrapper)
        from otel_coldstart.patches import pinning

        if not pinning._compiled_already():  # else dynamo's guards hold the originals: left alone
            assert torch.empty is not originals[(torch, "empty")][2]
        otel_coldstart.ready()
        for (owner, name), (own, stored, _) in originals.items():
            assert (name in vars(owner)) == own, (owner, name)
            assert vars(owner).get(name) is stored, (owner, name)
        assert torch.Tensor.to is originals[(torch.Tensor, "to")][2]
        assert torch.Tensor.copy_ is originals[(torch.Tensor, "copy_")][2]
        assert torch.empty is originals[(torch, "empty")][2]
        # Graph capture patches are rare calls and stay, to see lazy captures after ready.
        assert cuda_graphs.is_patched()
    finally:
        otel_coldstart.uninstrument()
    for (owner, name), (_, stored, _) in originals.items():
        assert vars(owner).get(name) is stored, (owner, name)


def test_non_blocking_host_copy_is_recorded_without_device_timing(traced):
    source = torch.randn(8, 8)
    target = torch.empty(8, 8)
    target.copy_(source, non_blocking=True)
    target.copy_(source, True)
    otel_coldstart.ready()
    assert torch.equal(target, source)
    (copies,) = traced.by_phase(semconv.PHASE_H2H)
    assert copies.attributes[semconv.CALLS] == 2
    assert semconv.COPY_ASYNC_S not in copies.attributes
