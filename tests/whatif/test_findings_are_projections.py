"""Every saving a finding states is a ``whatif`` lever's projection (issue 39, item 16): per
lever, the finding's figure on a trace is the one ``whatif --lever X`` projects for the same
trace (with the same floor and the same other start-ups to learn from); a lever that cannot
apply states no saving, and what is left after a larger finding's claim is none of its own."""

from __future__ import annotations

import pytest

from analyze_records import MS, aggregate, child, root, shard
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.findings import find, pickle_checkpoints
from otel_coldstart.analyze.storage_floor import StorageFloor
from otel_coldstart.analyze.whatif import Options, project

MB = 1_000_000


def _startup(duration_ms, spans_of, trace):
    r = root(duration_ms, trace=trace)
    return breakdowns([r, *spans_of(r)])


def _projected(startups, lever, floor=None, others=()):
    result = project(startups, [lever], Options(floor=floor, reference=tuple(others)))
    [projection] = result.levers
    return projection.saving_p50_ns


def _finding(found, rule, trace):
    return next(f for f in found if f.rule == rule and f.trace_id == trace)


def test_cold_cache_states_the_prewarm_projection():
    one = _startup(1600, lambda r: [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB),
                                    shard(r, 1, 1000, 1010, 400 * MB, "warm", read_bytes=0),
                                    child(r, "coldstart.import", semconv.PHASE_IMPORT, 1010, 1510)], "aa" * 16)
    f = _finding(find(one), "cold_cache", "aa" * 16)
    assert f.saving_ns == _projected(one, "prewarm") == pytest.approx(990 * MS, abs=1 * MS)
    assert "prewarm lever's projection" in f.estimate


def test_all_cold_shards_learn_the_warm_rate_from_the_other_startups_given():
    def cold(r):
        return [shard(r, i, i * 500, (i + 1) * 500, 200 * MB, "cold", read_bytes=200 * MB) for i in range(4)]

    def warm(r):
        return [shard(r, i, i * 20, (i + 1) * 20, 200 * MB, "warm", read_bytes=0) for i in range(4)]

    fresh, resident = _startup(2100, cold, "aa" * 16), _startup(200, warm, "bb" * 16)
    found = find(fresh + resident)
    f = _finding(found, "cold_cache", "aa" * 16)
    assert f.saving_ns == _projected(fresh, "prewarm", others=resident) == pytest.approx(1920 * MS, abs=1 * MS)
    assert any("resident files of the other start-ups given" in line for line in f.evidence)
    # ... and from --reference start-ups, the same figure
    assert _finding(find(fresh, reference=resident), "cold_cache", "aa" * 16).saving_ns == f.saving_ns


def test_a_warm_pickle_states_the_to_safetensors_projection_and_nothing_to_prewarm():
    """The issue's case: a warm pickle checkpoint and the storage floor. The pickle finding's
    saving is to-safetensors' projection; the dominant deserialize phase's lever (pre-warm)
    cannot apply to a resident file, so it states no saving, not the floor's leftover."""
    floor = StorageFloor("floor.json", cold_bytes_per_s=500 * MB, warm_bytes_per_s=4000 * MB)
    one = _startup(1100, lambda r: [shard(r, 0, 0, 990, 2000 * MB, "warm", 0, "torch_zip")], "aa" * 16)
    found = find(one, floor)
    pickle = _finding(found, "pickle_checkpoints", "aa" * 16)
    # resident, mapped by safetensors: the load reads nothing (pages are taken where first touched)
    assert pickle.saving_ns == _projected(one, "to-safetensors", floor) == pytest.approx(990 * MS, abs=1 * MS)
    assert "to-safetensors lever's projection" in pickle.estimate and "maps the file" in pickle.estimate
    dominant = _finding(found, "dominant_phase", "aa" * 16)
    assert dominant.phase == semconv.PHASE_DESERIALIZE
    assert dominant.saving_ns == 0 and "prewarm lever does not apply" in dominant.estimate


def test_to_safetensors_reads_pickles_at_the_rate_of_the_startups_own_safetensors_files():
    one = _startup(1200, lambda r: [shard(r, 0, 0, 1000, 400 * MB, "warm", 0, "torch_zip"),
                                    shard(r, 1, 1000, 1100, 400 * MB, "warm", 0, "safetensors")], "aa" * 16)
    f = _finding(find(one), "pickle_checkpoints", "aa" * 16)
    assert f.saving_ns == _projected(one, "to-safetensors") == pytest.approx(900 * MS, abs=1 * MS)


def test_a_cold_pickle_without_any_rate_states_no_figure_and_with_the_floor_its_cold_bytes():
    one = _startup(1100, lambda r: [shard(r, 0, 0, 990, 200 * MB, "cold", 200 * MB, "torch_zip")], "aa" * 16)
    f = _finding(find(one), "pickle_checkpoints", "aa" * 16)
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated") and "floor" in f.estimate
    assert _projected(one, "to-safetensors") is None
    floor = StorageFloor("floor.json", cold_bytes_per_s=500 * MB, warm_bytes_per_s=4000 * MB)
    [f] = pickle_checkpoints.check(one[0], floor)
    # its 200 MB still come from storage: 400 ms at the floor's cold rate instead of 990 ms
    assert f.saving_ns == _projected(one, "to-safetensors", floor) == pytest.approx(590 * MS, abs=1 * MS)
    # ... and in the ranking, pre-warming (940 ms) counts that shard's time first: no saving of its own
    ranked = _finding(find(one, floor), "pickle_checkpoints", "aa" * 16)
    assert ranked.saving_ns == 0 and "already counted by cold_cache" in ranked.estimate


def test_a_dominant_cast_states_the_serving_dtype_projection():
    def cast(r):
        return [shard(r, 0, 0, 100, 200 * MB, "warm", read_bytes=0),
                aggregate(r, semconv.PHASE_CAST, 100, 900, 800, 50, 200 * MB,
                          **{semconv.CAST_FROM: "bfloat16", semconv.CAST_TO: "float16"})]

    one = _startup(1000, cast, "aa" * 16)
    f = _finding(find(one), "dominant_phase", "aa" * 16)
    assert f.phase == semconv.PHASE_CAST
    assert f.saving_ns == _projected(one, "serving-dtype") == pytest.approx(800 * MS, abs=1 * MS)


def test_pageable_copies_state_the_pinned_projection():
    def pageable(r):
        return [aggregate(r, semconv.PHASE_H2D, 0, 1000, 1000, 10, 1000 * MB,
                          **{semconv.COPY_PAGEABLE_BYTES: 1000 * MB, semconv.COPY_PINNED_BYTES: 0})]

    def pinned(r):
        return [aggregate(r, semconv.PHASE_H2D, 0, 100, 20, 10, 500 * MB,
                          **{semconv.COPY_PINNED_BYTES: 500 * MB, semconv.COPY_ASYNC_S: 0.2,
                             semconv.THROUGHPUT: 500 * MB / 0.2})]

    one, other = _startup(1100, pageable, "aa" * 16), _startup(200, pinned, "bb" * 16)
    found = find(one + other)
    f = _finding(found, "pageable_h2d", "aa" * 16)
    assert f.saving_ns == _projected(one, "pinned", others=other) == pytest.approx(600 * MS, abs=1 * MS)


def test_missed_compilations_state_the_compile_cache_projection():
    def compiles(hits, misses, ms):
        return lambda r: [child(r, "coldstart.compile", semconv.PHASE_COMPILE, 0, ms, **{
            semconv.COMPILE_ID: "0/0", semconv.COMPILE_FRAME: "forward (model.py:10)",
            semconv.COMPILE_CACHE_HITS: hits, semconv.COMPILE_CACHE_MISSES: misses})]

    cold, warm = _startup(9000, compiles(0, 2, 8000), "aa" * 16), _startup(1500, compiles(2, 0, 500), "bb" * 16)
    found = find(cold + warm)
    f = _finding(found, "compile_cache", "aa" * 16)
    assert f.saving_ns == _projected(cold, "compile-cache", others=warm) == pytest.approx(7500 * MS, abs=1 * MS)
    # the dominant compile phase names the same lever: the time is counted once, by compile_cache
    dominant = _finding(found, "dominant_phase", "aa" * 16)
    assert dominant.saving_ns == 0 and "already counted by compile_cache" in dominant.estimate


def test_many_captures_state_the_fewer_captures_projection():
    sizes = [1, 2, 4, 8, 16, 24, 32, 40, 48]
    one = _startup(3000, lambda r: [aggregate(r, semconv.PHASE_GRAPH_CAPTURE, 0, 1800, 1800, 9, 0, **{
        semconv.GRAPH_BATCH_SIZES: tuple(sizes), semconv.GRAPH_CAPTURE_TIMES_S: tuple([0.2] * 9)})], "aa" * 16)
    f = _finding(find(one), "graph_captures", "aa" * 16)
    # 24, 40, 48 are not powers of two (64 is kept for 48): 3 x 200 ms
    assert f.saving_ns == _projected(one, "fewer-captures") == pytest.approx(600 * MS, abs=1 * MS)


def test_prewarm_is_shared_between_the_cold_files_and_the_reads_hidden_in_casts():
    """One lever, two findings: cold_cache states prewarm's part on the cold files, and
    hidden_mmap_reads its part on the storage reads inside a later cast; together, the
    projection, never more."""
    def build(r):
        return [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB),
                shard(r, 1, 1000, 1010, 400 * MB, "warm", read_bytes=0),
                aggregate(r, semconv.PHASE_CAST, 1010, 1810, 800, 10, 400 * MB, **{semconv.IO_READ_BYTES: 100 * MB})]

    one = _startup(2000, build, "aa" * 16)
    found = find(one)
    cold, hidden = _finding(found, "cold_cache", "aa" * 16), _finding(found, "hidden_mmap_reads", "aa" * 16)
    assert cold.saving_ns > 0 and hidden.saving_ns > 0
    assert cold.saving_ns + hidden.saving_ns == _projected(one, "prewarm")
