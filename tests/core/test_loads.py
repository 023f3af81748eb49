"""Every patched load path: one deserialize span per file, tensors bit-identical, facts right."""

from __future__ import annotations

import concurrent.futures
import io
import os

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load, load_file, save_file

import otel_coldstart
from otel_coldstart import semconv


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape
        assert torch.equal(a[name].view(torch.uint8), b[name].view(torch.uint8)), name


def _uninstrumented(fn):
    otel_coldstart.uninstrument()
    return fn()


def _load_all_get_tensor(path):
    with safe_open(path, framework="pt") as handle:
        return {k: handle.get_tensor(k) for k in handle.keys()}


def _load_all_get_slice(path):
    with safe_open(path, framework="pt") as handle:
        return {k: handle.get_slice(k)[:] for k in handle.keys()}


def _load_get_tensors(path):
    with safe_open(path, framework="pt") as handle:
        return handle.get_tensors()


SAFETENSORS_PATHS = {
    "load_file": load_file,
    "get_tensor": _load_all_get_tensor,
    "get_slice": _load_all_get_slice,
    "get_tensors": _load_get_tensors,
}


@pytest.mark.parametrize("how", sorted(SAFETENSORS_PATHS))
def test_safetensors_paths_bit_identical_and_one_span_per_file(traced, small_checkpoint, how):
    path = small_checkpoint[1]
    loaded = SAFETENSORS_PATHS[how](path)
    spans = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert len(spans) == 1
    attrs = spans[0].attributes
    assert attrs[semconv.FILE_PATH] == path
    assert attrs[semconv.FILE_SIZE] == os.path.getsize(path)
    assert attrs[semconv.FILE_FORMAT] == "safetensors"
    assert attrs[semconv.SHARD_INDEX] == 1 and attrs[semconv.SHARD_COUNT] == 4
    assert attrs[semconv.BYTES] == sum(t.nbytes for t in loaded.values())
    baseline = _uninstrumented(lambda: SAFETENSORS_PATHS[how](path))
    _same(loaded, baseline)


def test_partial_slice_counts_only_the_bytes_read(traced, small_checkpoint):
    path = small_checkpoint[0]
    with safe_open(path, framework="pt") as handle:
        name = sorted(handle.keys())[0]
        part = handle.get_slice(name)[:2]
    # Only part of the file is read: if a page of it is out of the page cache (a busy machine
    # drops some), the span waits for the end of the start-up to settle its storage figure.
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.attributes[semconv.BYTES] == part.nbytes
    assert span.attributes[semconv.FILE_API] == "safetensors.safe_open"


def test_handle_opened_only_for_metadata_emits_nothing(traced, small_checkpoint):
    with safe_open(small_checkpoint[0], framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}
        assert handle.keys()
    assert traced.by_phase(semconv.PHASE_DESERIALIZE) == []


def test_handle_without_with_block_ends_at_last_read(traced, small_checkpoint):
    handle = safe_open(small_checkpoint[2], framework="pt")
    tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    del handle
    otel_coldstart.ready()
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.attributes[semconv.FILE_PATH] == small_checkpoint[2]
    assert span.attributes[semconv.BYTES] == sum(t.nbytes for t in tensors.values())
    (root,) = traced.named(semconv.SPAN_ROOT)
    assert span.end_time <= root.end_time


@pytest.mark.parametrize("bound_by_name", [False, True])
def test_safetensors_load_bytes(traced, small_checkpoint, bound_by_name):
    import safetensors.torch

    with open(small_checkpoint[3], "rb") as handle:
        data = handle.read()
    # ``load`` imported by name at the top of this file predates instrument(): it is still
    # traced, through the module global it calls.
    loaded = load(data) if bound_by_name else safetensors.torch.load(data)
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.attributes[semconv.FILE_SIZE] == len(data)
    assert semconv.FILE_PATH not in span.attributes
    assert semconv.CACHE_STATE not in span.attributes  # bytes in memory: no cache to speak of
    _same(loaded, _uninstrumented(lambda: load(data)))


@pytest.fixture
def torch_checkpoints(tmp_path):
    generator = torch.Generator().manual_seed(1)
    state = {f"layer{i}.weight": torch.randn(32, 16, generator=generator).to(torch.bfloat16) for i in range(5)}
    state["shared"] = state["layer0.weight"][:4]  # a view: storage sharing must survive
    zip_path = tmp_path / "pytorch_model.bin"
    legacy_path = tmp_path / "legacy.pt"
    torch.save(state, zip_path)
    torch.save(state, legacy_path, _use_new_zipfile_serialization=False)
    return {"zip": str(zip_path), "legacy": str(legacy_path)}


@pytest.mark.parametrize("kind,mmap", [("zip", False), ("zip", True), ("legacy", False)])
def test_torch_load_bit_identical_with_storage_sharing(traced, torch_checkpoints, kind, mmap):
    path = torch_checkpoints[kind]
    kwargs = {"mmap": True} if mmap else {}
    loaded = torch.load(path, weights_only=True, **kwargs)
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    attrs = span.attributes
    assert attrs[semconv.FILE_FORMAT] == ("torch_zip" if kind == "zip" else "torch_legacy")
    assert attrs[semconv.FILE_API] == "torch.load"
    assert attrs[semconv.TORCH_LOAD_MMAP] is mmap
    if kind == "zip" and not mmap:
        assert attrs[semconv.TORCH_LOAD_STORAGE_READS] >= 1
        assert 0 <= attrs[semconv.TORCH_LOAD_STORAGE_READ_S] <= (span.end_time - span.start_time) / 1e9
    if mmap:
        # The bytes are read later, on first touch: this span's reads say nothing of the cache.
        assert attrs.get(semconv.CACHE_EVIDENCE) != "read_bytes"
    assert loaded["shared"].untyped_storage().data_ptr() == loaded["layer0.weight"].untyped_storage().data_ptr()
    baseline = _uninstrumented(lambda: torch.load(path, weights_only=True, **kwargs))
    _same(loaded, baseline)


def test_torch_serialization_load_name_is_patched_too(traced, torch_checkpoints):
    torch.serialization.load(torch_checkpoints["zip"], weights_only=True)
    assert len(traced.by_phase(semconv.PHASE_DESERIALIZE)) == 1


def test_torch_load_from_file_object_and_buffer(traced, torch_checkpoints):
    with open(torch_checkpoints["zip"], "rb") as handle:
        torch.load(handle, weights_only=True)
    with open(torch_checkpoints["zip"], "rb") as handle:
        buffer = io.BytesIO(handle.read())
    torch.load(buffer, weights_only=True)
    first, second = sorted(traced.by_phase(semconv.PHASE_DESERIALIZE), key=lambda s: s.start_time)
    assert first.attributes[semconv.FILE_PATH] == torch_checkpoints["zip"]
    assert semconv.FILE_PATH not in second.attributes


def test_thread_pool_shards_nest_under_the_submitting_span(traced, small_checkpoint):
    import threading

    # The barrier makes the pool run all four loads at once, on four threads: without it a
    # fast worker may take every task and the test would prove nothing about threads.
    together = threading.Barrier(4, timeout=60)

    def load_on_its_own_thread(path):
        together.wait()
        return load_file(path)

    with otel_coldstart.phase("load_weights"):
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(load_on_its_own_thread, small_checkpoint))
    assert len(results) == 4
    (parent,) = traced.named("coldstart.load_weights")
    shards = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert len(shards) == 4
    assert {s.attributes[semconv.SHARD_INDEX] for s in shards} == {0, 1, 2, 3}
    for shard in shards:
        assert shard.parent.span_id == parent.context.span_id
        assert shard.context.trace_id == parent.context.trace_id
    assert len({s.attributes[semconv.THREAD_ID] for s in shards}) == 4


def test_spans_nest_under_the_users_current_span(traced, small_checkpoint):
    from opentelemetry import trace

    tracer = trace.get_tracer("user")
    user_provider_tracer = traced  # the user's own span comes from the same provider here
    del user_provider_tracer
    from otel_coldstart.instrumentor import ColdstartInstrumentor

    provider_tracer = ColdstartInstrumentor().session.tracer
    with provider_tracer.start_as_current_span("Load weights") as user_span:
        load_file(small_checkpoint[0])
    (shard,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert shard.parent.span_id == user_span.get_span_context().span_id
    assert tracer is not None


def test_casts_inside_a_shard_nest_under_it_and_are_aggregated(traced, small_checkpoint):
    with safe_open(small_checkpoint[0], framework="pt") as handle:
        casted = {k: handle.get_tensor(k).to(torch.float16) for k in handle.keys()}
    (shard,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    casts = traced.by_phase(semconv.PHASE_CAST)
    assert len(casts) == 1
    (cast,) = casts
    assert cast.parent.span_id == shard.context.span_id
    assert cast.attributes[semconv.CALLS] == len(casted)
    assert cast.attributes[semconv.CAST_FROM] == "bfloat16" and cast.attributes[semconv.CAST_TO] == "float16"
    assert cast.attributes[semconv.BYTES] == sum(t.nbytes for t in casted.values())


def test_saved_file_round_trip_through_instrumented_save_is_untouched(traced, tmp_path):
    # save_file is not patched; a save during start-up must not produce a read span.
    save_file({"x": torch.ones(3)}, str(tmp_path / "x.safetensors"))
    assert traced.by_phase(semconv.PHASE_DESERIALIZE) == []
