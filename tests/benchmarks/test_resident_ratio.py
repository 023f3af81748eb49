"""The page-cache residency probe: cachestat(2) where the kernel has it, mincore otherwise.
Both must give the same answer on the same real file, warm and after eviction."""

from __future__ import annotations

import os

import pytest

from otel_coldstart import probes


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "shard.bin"
    path.write_bytes(os.urandom(8 * 1024 * 1024 + 123))
    return str(path)


def _both(path):
    size = os.path.getsize(path)
    pages = (size + 4095) // 4096
    cached = probes._cachestat_pages(path)
    if cached is None:
        pytest.skip("this kernel has no cachestat(2)")
    return min(cached, pages) / pages, probes._mincore_ratio(path, size, pages)


def test_cachestat_and_mincore_agree_warm_and_evicted(data_file):
    with open(data_file, "rb") as handle:
        handle.read()
    warm_cachestat, warm_mincore = _both(data_file)
    assert warm_cachestat == pytest.approx(warm_mincore, abs=0.02)
    assert warm_cachestat > 0.9
    probes.evict_from_page_cache(data_file)
    cold_cachestat, cold_mincore = _both(data_file)
    assert cold_cachestat == pytest.approx(cold_mincore, abs=0.02)
    assert probes.resident_ratio(data_file) == pytest.approx(cold_cachestat, abs=0.02)


def test_mincore_is_the_fallback_without_cachestat(data_file, monkeypatch):
    with open(data_file, "rb") as handle:
        handle.read()
    monkeypatch.setattr(probes, "_cachestat_pages", lambda path: None)
    assert probes.resident_ratio(data_file) > 0.9
