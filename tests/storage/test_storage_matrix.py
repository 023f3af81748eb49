"""Bytes read from storage per checkpoint file, whichever thread read them and whenever.

The matrix of the issue, each case its own process: {safe_open, load_file, torch.load,
torch.load(mmap=True)} x {1, 2 intra-op threads} x {evicted, resident, last 40% evicted},
one ~26 MiB file of a generated bf16 checkpoint, loaded, then cast to fp16 outside the
loader's call (so a mapped file's pages are faulted by the cast, on torch's intra-op
threads when there are two). The file's span must give the right verdict and the share of
the file storage delivered; the printed summary must say the same; the weights must be
bit-identical to an uninstrumented load.

Two paths into the same child script (storage_case_child.py, which instruments before it
imports torch): one case per API (together: both thread counts, every cache state) is a
truly fresh process, where instrument() comes first and patches torch when it is imported;
the other 20 are forked from a server that imported torch and safetensors already (the
``fork_server`` fixture, tests/_forkserver.py), so there instrument() meets torch in memory:
the path of a host that imported torch before instrumenting, as legitimate a start-up.
What is measured, the checkpoint's reads, happens after the fork in both.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from otel_coldstart import semconv
from otel_coldstart.analyze.units import format_bytes
from storage_cases import file_span, run_child, set_state

pytestmark = [pytest.mark.process, pytest.mark.slow]  # fresh Python processes: not in `make test-fast`

torch = pytest.importorskip("torch")

APIS = ("safe_open", "load_file", "torch_load", "torch_load_mmap")
# state -> (verdict, lowest and highest share of the file read from storage)
EXPECTED = {
    "evicted": ("cold", 0.80, 1.0),
    "resident": ("warm", 0.0, 0.05),
    "tail_evicted": ("partial", 0.25, 0.55),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One ~26 MiB bf16 file as safetensors and the same tensors as a torch.save file, with
    the digest of their fp16 cast computed here without the plugin."""
    from safetensors.torch import load_file

    from otel_coldstart.demo import LlamaShape, generate_checkpoint

    directory = tmp_path_factory.mktemp("one-shard")
    (shard,) = generate_checkpoint(str(directory), LlamaShape(vocab=3072, hidden=1024, intermediate=1024,
                                                              layers=1, shards=1))
    state = load_file(shard)
    torch_file = os.path.join(str(directory), "pytorch_model.bin")
    torch.save(state, torch_file)
    hasher = hashlib.sha256()
    for name in sorted(state):
        hasher.update(name.encode())
        hasher.update(state[name].to(torch.float16).contiguous().view(torch.uint8).numpy().tobytes())
    assert 24 << 20 <= os.path.getsize(shard) <= 28 << 20
    return {"safetensors": str(shard), "torch": torch_file, "digest": hasher.hexdigest()}


# The cases run in a fresh process, one per API; between them both thread counts and every state.
FRESH = {("safe_open", 1, "evicted"), ("load_file", 2, "resident"), ("torch_load", 1, "tail_evicted"),
         ("torch_load_mmap", 2, "evicted")}


@pytest.mark.parametrize("state", list(EXPECTED))
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("api", APIS)
def test_bytes_from_storage_per_file(request, tmp_path, checkpoint, api, threads, state):
    path = checkpoint["torch" if api.startswith("torch_load") else "safetensors"]
    server = None if (api, threads, state) in FRESH else request.getfixturevalue("fork_server")
    set_state(path, state)
    spans, stderr, stdout = run_child(tmp_path, api, threads, path, server=server)
    span = file_span(spans, path)
    attrs = span.attributes
    size = os.path.getsize(path)
    verdict, lowest, highest = EXPECTED[state]

    assert attrs[semconv.CACHE_STATE] == verdict, attrs
    figure = attrs[semconv.CACHE_STORAGE_READ_BYTES]
    assert lowest * size <= figure <= highest * size, (figure / size, attrs)
    evidence = attrs[semconv.CACHE_EVIDENCE].split("+")
    assert "residency_delta" in evidence and "mincore" in evidence, attrs
    assert semconv.CACHE_STORAGE_READ_UNKNOWN not in attrs
    if api == "torch_load_mmap" and state == "evicted":
        # Nothing is read in the call: the cast after the span reads the file, and the span says so.
        assert attrs[semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES] >= 0.8 * size, attrs
    later = attrs.get(semconv.CACHE_STORAGE_READ_AFTER_SPAN_BYTES)
    assert later is None or 0 <= later <= figure
    # The weights are the ones an uninstrumented load gives, bit for bit.
    assert f'"digest": "{checkpoint["digest"]}"' in stdout
    # The printed summary says the same as the span.
    name = os.path.basename(path)
    # The shard's row (`#0 name ...`); the cold_cache finding's evidence names the file too.
    (line,) = [ln for ln in stderr.splitlines() if name in ln and "read from storage" in ln
               and ln.lstrip().startswith("#")]
    assert f"{verdict}, {format_bytes(figure)} read from storage" in line, line
