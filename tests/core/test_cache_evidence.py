"""Cold or warm is measured, not guessed: evict one shard, keep the rest warm, read the trace."""

from __future__ import annotations

import os

import pytest
import safetensors.torch
from safetensors import safe_open

import otel_coldstart
from otel_coldstart import probes, semconv, verdicts
from otel_coldstart.demo import set_cache_state


def _evict_first_or_skip(paths):
    set_cache_state(paths, cold={0})
    ratio = probes.resident_ratio(paths[0])
    if ratio is None or ratio > 0.5:
        pytest.skip(f"this filesystem keeps evicted pages resident (resident ratio {ratio})")
    if not probes.read_bytes_trusted(paths[0]):
        pytest.skip(f"no trustworthy per-thread read accounting for {probes.filesystem_type(paths[0])}")


@pytest.fixture(scope="module")
def sized_checkpoint(tmp_path_factory):
    """Shards of 20-40 MiB: safe_open reads the header when the handle is created, before any
    hook runs, and the kernel reads ahead a few MiB with it. On a tiny file that read is the
    whole file; on real shards (GBs) it is noise. Here it stays a minority."""
    from otel_coldstart.demo import LlamaShape, generate_checkpoint

    directory = tmp_path_factory.mktemp("sized")
    shape = LlamaShape(vocab=16384, hidden=1024, intermediate=1024, layers=2, shards=4)
    return [str(p) for p in generate_checkpoint(str(directory), shape)]


@pytest.mark.parametrize("api", ["load_file", "safe_open"])
def test_evicted_shard_is_cold_and_the_others_warm(traced, sized_checkpoint, api):
    small_checkpoint = sized_checkpoint
    _evict_first_or_skip(small_checkpoint)
    for path in small_checkpoint:
        if api == "load_file":
            safetensors.torch.load_file(path)
        else:
            with safe_open(path, framework="pt") as handle:
                for key in handle.keys():
                    handle.get_tensor(key)
    # The returned tensors map the file: pages nobody touched yet are not read, and the cold
    # file's span waits for the end of the start-up to settle how much of it storage delivered.
    otel_coldstart.ready()
    spans = sorted(traced.by_phase(semconv.PHASE_DESERIALIZE), key=lambda s: s.attributes[semconv.SHARD_INDEX])
    assert [s.attributes[semconv.SHARD_INDEX] for s in spans] == [0, 1, 2, 3]
    cold, *warm = spans
    size = os.path.getsize(small_checkpoint[0])
    assert cold.attributes[semconv.CACHE_STATE] == "cold"
    assert cold.attributes[semconv.CACHE_EVIDENCE] == "read_bytes+mincore+residency_delta"
    # What storage delivered for the file during the start-up, whoever read it: the pages the
    # loader and the readahead brought in (untouched pages of the mapping are still not read).
    assert 0.3 * size <= cold.attributes[semconv.CACHE_STORAGE_READ_BYTES] <= size
    assert cold.attributes[semconv.CACHE_STORAGE_READ_BYTES] >= cold.attributes[semconv.IO_READ_BYTES] - 8192
    # A lower bound: async readahead on mmap faults is not always charged to the thread.
    assert cold.attributes[semconv.IO_READ_BYTES] >= 0.3 * cold.attributes[semconv.BYTES]
    assert cold.attributes[semconv.CACHE_RESIDENT_RATIO] <= 0.5  # measured before the read
    assert cold.attributes[semconv.IO_READ_BYTES] <= size + 1024 * 1024  # readahead, not more
    for span in warm:
        assert span.attributes[semconv.CACHE_STATE] == "warm"
        assert span.attributes[semconv.CACHE_EVIDENCE] == "read_bytes+mincore+residency_delta"
        assert span.attributes[semconv.CACHE_STORAGE_READ_BYTES] < 0.05 * span.attributes[semconv.FILE_SIZE]
        assert span.attributes[semconv.IO_READ_BYTES] < 0.05 * span.attributes[semconv.BYTES]
        assert span.attributes[semconv.CACHE_RESIDENT_RATIO] == 1.0


def test_untrusted_filesystem_gives_no_read_evidence(traced, small_checkpoint, monkeypatch):
    monkeypatch.setattr(probes, "filesystem_type", lambda path: "nfs4")
    monkeypatch.setattr(probes, "file_residency", lambda path, size=None, ranges=None: None)
    safetensors.torch.load_file(small_checkpoint[0])
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    for key in (semconv.IO_READ_BYTES, semconv.CACHE_STATE, semconv.CACHE_EVIDENCE, semconv.CACHE_RESIDENT_RATIO):
        assert key not in span.attributes, key


def test_residency_stands_in_when_reads_cannot_be_counted(traced, small_checkpoint, monkeypatch):
    set_cache_state(small_checkpoint, cold=set())
    monkeypatch.setattr(probes, "filesystem_type", lambda path: "fuse")
    safetensors.torch.load_file(small_checkpoint[1])
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.attributes[semconv.CACHE_EVIDENCE] == "mincore"
    assert span.attributes[semconv.CACHE_STATE] == "warm"


def test_read_counter_alone_decides_where_residency_cannot_be_trusted(traced, sized_checkpoint, monkeypatch):
    _evict_first_or_skip(sized_checkpoint)
    monkeypatch.setattr(probes, "file_residency", lambda path, size=None, ranges=None: None)  # read-only volume
    safetensors.torch.load_file(sized_checkpoint[0])
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.attributes[semconv.CACHE_EVIDENCE] == "read_bytes"
    assert span.attributes[semconv.CACHE_STATE] == "cold"


@pytest.mark.parametrize(
    "reads,residency,state",
    [("cold", "warm", "cold"), ("partial", "cold", "cold"), ("warm", "warm", "warm"), ("warm", None, "warm"),
     (None, "partial", "partial"), ("warm", "partial", "partial"), (None, None, None)],
)
def test_combined_cache_verdict(reads, residency, state):
    assert verdicts.combine_cache_states(reads, residency) == state


@pytest.mark.parametrize(
    "read,expected,state",
    [(0, 100, "warm"), (4, 100, "warm"), (5, 100, "partial"), (49, 100, "partial"), (50, 100, "cold"),
     (130, 100, "cold"), (0, 0, None)],
)
def test_cache_state_thresholds(read, expected, state):
    assert verdicts.cache_state_from_reads(read, expected) == state


def test_resident_ratio_is_none_for_files_we_cannot_write(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 8192)
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    assert probes.resident_ratio(str(path)) is None
