"""accelerate: ``init_empty_weights`` + ``load_checkpoint_and_dispatch`` and
``set_module_tensor_to_device`` on a generated 3-shard safetensors checkpoint."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed")

from accelerate import init_empty_weights, load_checkpoint_and_dispatch  # noqa: E402
from accelerate.utils import set_module_tensor_to_device  # noqa: E402
from safetensors import safe_open  # noqa: E402

import otel_coldstart  # noqa: E402
from framework_checks import (  # noqa: E402
    EXAMPLES,
    assert_hot_path_restored,
    assert_no_orphans,
    assert_same_weights,
    attrs,
    by_phase,
    hot_path_originals,
    parent_id,
    safetensors_header,
    span_id,
    tensor_bytes,
)
from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.demo import LlamaShape, generate_checkpoint  # noqa: E402

sys.path.insert(0, EXAMPLES)
from tiny_llama import build_model  # noqa: E402

SHAPE = LlamaShape(vocab=1024, hidden=128, intermediate=256, layers=2, shards=3)


def _dispatch(directory):
    with init_empty_weights():
        model = build_model(SHAPE)
    assert next(model.parameters()).device.type == "meta"
    return load_checkpoint_and_dispatch(model, os.path.join(directory, "model.safetensors.index.json"),
                                        device_map={"": "cpu"}, dtype=torch.float16)


def _set_tensors(directory):
    with init_empty_weights():
        model = build_model(SHAPE)
    for path in _shards(directory):
        with safe_open(path, framework="pt") as shard:
            for name in shard.keys():
                set_module_tensor_to_device(model, name, "cpu", value=shard.get_tensor(name), dtype=torch.float16)
    return model


LOADERS = {"load_checkpoint_and_dispatch": _dispatch, "set_module_tensor_to_device": _set_tensors}


def _shards(directory):
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".safetensors"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The checkpoint, and each loader's result with no plugin at all."""
    otel_coldstart.uninstrument()
    directory = str(tmp_path_factory.mktemp("accelerate-ckpt"))
    generate_checkpoint(directory, SHAPE)
    originals = hot_path_originals()
    reference = {name: {k: v.detach().clone() for k, v in load(directory).state_dict().items()}
                 for name, load in LOADERS.items()}
    return directory, reference, originals


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_accelerate_load_traced_without_changing_the_weights(checkpoint, traced, loader):
    directory, reference, originals = checkpoint
    with otel_coldstart.phase("load"):
        model = LOADERS[loader](directory)
    otel_coldstart.ready()
    spans = traced.spans()

    # One span per shard, with the real file sizes and HF index positions.
    shards = by_phase(spans, semconv.PHASE_DESERIALIZE)
    by_path = {os.path.realpath(attrs(s)[semconv.FILE_PATH]): attrs(s) for s in shards}
    assert sorted(by_path) == [os.path.realpath(p) for p in _shards(directory)]
    for path, shard in by_path.items():
        assert shard[semconv.FILE_SIZE] == os.path.getsize(path)
        assert shard[semconv.SHARD_COUNT] == SHAPE.shards
    assert sorted(s[semconv.SHARD_INDEX] for s in by_path.values()) == list(range(SHAPE.shards))

    # Every bf16 tensor cast to fp16 once, summed into a few spans (one per parent), each
    # nested under the shard it came from or the load that asked for it.
    entries = [e for p in _shards(directory) for e in safetensors_header(p).values()]
    casts = by_phase(spans, semconv.PHASE_CAST)
    assert {(attrs(c)[semconv.CAST_FROM], attrs(c)[semconv.CAST_TO]) for c in casts} == {("bfloat16", "float16")}
    assert sum(attrs(c)[semconv.CALLS] for c in casts) == len(entries)
    assert sum(attrs(c)[semconv.BYTES] for c in casts) == sum(tensor_bytes(e) for e in entries)
    load_span = traced.named("coldstart.load")[0]
    allowed_parents = {span_id(load_span)} | {span_id(s) for s in shards}
    assert {parent_id(c) for c in casts} <= allowed_parents
    assert len(casts) <= len(allowed_parents)
    assert_no_orphans(spans)

    assert_same_weights(reference[loader], dict(model.state_dict()))
    assert_hot_path_restored(originals)
