"""safe_open slices as transformers takes them: 4.x builds its meta state dict from slices'
dtype and shape only (no data read: no shard span), 5.x reads them later on a thread pool."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import otel_coldstart  # noqa: E402
from framework_checks import assert_no_orphans, attrs, by_phase  # noqa: E402
from otel_coldstart import semconv  # noqa: E402


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({f"t{i}": torch.full((64, 64), float(i)) for i in range(8)}, str(path))
    return str(path)


def test_slices_taken_for_shape_only_read_nothing_and_emit_no_span(traced, shard):
    with safe_open(shard, framework="pt") as handle:
        shapes = {k: handle.get_slice(k).get_shape() for k in handle.keys()}
    assert shapes == {f"t{i}": [64, 64] for i in range(8)}
    assert by_phase(traced.spans(), semconv.PHASE_DESERIALIZE) == []


def test_slices_read_on_a_pool_make_one_shard_span(traced, shard):
    handle = safe_open(shard, framework="pt")  # transformers 5 keeps it open, no with-block
    slices = {k: handle.get_slice(k) for k in handle.keys()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        tensors = dict(zip(slices, pool.map(lambda s: s[...], slices.values())))
    handle.__exit__(None, None, None)
    otel_coldstart.ready()
    assert all(torch.equal(t, torch.full((64, 64), float(k[1:]))) for k, t in tensors.items())
    shards = by_phase(traced.spans(), semconv.PHASE_DESERIALIZE)
    assert len(shards) == 1
    assert attrs(shards[0])[semconv.FILE_PATH] == shard
    assert attrs(shards[0])[semconv.BYTES] == 8 * 64 * 64 * 4
    assert_no_orphans(traced.spans())
