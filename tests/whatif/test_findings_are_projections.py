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


# --- one figure per lever: every finding whose saving is a lever's, on the same trace -------

# Each lever and the findings that state its projection. Together they state all of it:
# prewarm's is split between the cold files (cold_cache) and the storage reads hidden in
# copies and casts (hidden_mmap_reads). dominant_phase restates only its phase's part of a
# lever (above), serial/slow downloads and lazy weights have no lever.
LEVER_FINDINGS = {
    "prewarm": ("cold_cache", "hidden_mmap_reads"),
    "to-safetensors": ("pickle_checkpoints",),
    "pinned": ("pageable_h2d",),
    "compile-cache": ("compile_cache",),
    "fewer-captures": ("graph_captures",),
    "bytecode": ("imports_from_source",),
    "prewarm-imports": ("imports_from_storage",),
    "predownload": ("download_in_startup",),
    "offline": ("hub_metadata_cached",),
}
FLOOR = StorageFloor("floor.json", cold_bytes_per_s=500 * MB, warm_bytes_per_s=4000 * MB)


def _import(r, start, end, **causes):
    return child(r, "coldstart.import", semconv.PHASE_IMPORT, start, end, **{
        semconv.IMPORT_MODULE: "torch", semconv.IMPORT_MODULES: 900, **causes})


def _download(r, name, start, end, fetched, thread=1):
    return child(r, semconv.SPAN_DOWNLOAD_FILE, semconv.PHASE_DOWNLOAD, start, end, thread=thread, **{
        semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_HF, semconv.DOWNLOAD_REPO: "org/m",
        semconv.DOWNLOAD_FILENAME: name, semconv.DOWNLOAD_PATH: f"/ckpt/{name}", semconv.DOWNLOAD_HOST: "hub",
        semconv.DOWNLOAD_CACHE_HIT: not fetched, semconv.DOWNLOAD_BYTES: 100 * MB if fetched else 0,
        semconv.DOWNLOAD_CACHED_BYTES: 0 if fetched else 100 * MB})


def _head(r, start, end):
    return child(r, semconv.SPAN_DOWNLOAD_METADATA, semconv.PHASE_DOWNLOAD, start, end, **{
        semconv.DOWNLOAD_METHOD: "HEAD", semconv.DOWNLOAD_STATUS: 200, semconv.DOWNLOAD_HOST: "hub"})


def _compile(r, start, end, hits, misses, nested_import_ms=0):
    span = child(r, "coldstart.compile", semconv.PHASE_COMPILE, start, end, **{
        semconv.COMPILE_ID: "0/0", semconv.COMPILE_FRAME: "forward (model.py:10)",
        semconv.COMPILE_CACHE_HITS: hits, semconv.COMPILE_CACHE_MISSES: misses})
    nested = [child(span, "coldstart.import", semconv.PHASE_IMPORT, start, start + nested_import_ms)]
    return [span] + (nested if nested_import_ms else [])


# Per lever: (the start-up the findings are about, the other start-ups given, the floor).
SCENARIOS = {
    "prewarm": lambda: (lambda r: [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB),
                                   shard(r, 1, 1000, 1010, 400 * MB, "warm", read_bytes=0),
                                   aggregate(r, semconv.PHASE_CAST, 1010, 1810, 800, 10, 400 * MB,
                                             **{semconv.IO_READ_BYTES: 100 * MB})], 2000, (), None),
    "to-safetensors": lambda: (lambda r: [shard(r, 0, 0, 990, 2000 * MB, "warm", 0, "torch_zip")], 1100, (), FLOOR),
    "pinned": lambda: (lambda r: [aggregate(r, semconv.PHASE_H2D, 0, 1000, 1000, 10, 1000 * MB, **{
        semconv.COPY_PAGEABLE_BYTES: 1000 * MB, semconv.COPY_PINNED_BYTES: 0})], 1100,
        _startup(200, lambda r: [aggregate(r, semconv.PHASE_H2D, 0, 100, 20, 10, 500 * MB, **{
            semconv.COPY_PINNED_BYTES: 500 * MB, semconv.COPY_ASYNC_S: 0.2, semconv.THROUGHPUT: 500 * MB / 0.2})],
                  "bb" * 16), None),
    # The warm start-up's hit ran an import inside it: a hit costs its self time (200 ms), not
    # its 500 ms of wall time (the finding once said the one, the projection the other).
    "compile-cache": lambda: (lambda r: _compile(r, 0, 8000, 0, 2), 9000,
                              _startup(1500, lambda r: _compile(r, 0, 500, 2, 0, nested_import_ms=300), "bb" * 16),
                              None),
    "fewer-captures": lambda: (lambda r: [aggregate(r, semconv.PHASE_GRAPH_CAPTURE, 0, 1800, 1800, 9, 0, **{
        semconv.GRAPH_BATCH_SIZES: (1, 2, 4, 8, 16, 24, 32, 40, 48),
        semconv.GRAPH_CAPTURE_TIMES_S: (0.2,) * 9})], 3000, (), None),
    "bytecode": lambda: (lambda r: [_import(r, 10, 2510, **{semconv.IMPORT_COMPILED_MODULES: 937,
                                                             semconv.IMPORT_COMPILE_S: 1.4,
                                                             semconv.IMPORT_STORAGE_READ_BYTES: 0,
                                                             semconv.IMPORT_CPU_S: 2.4})], 3000, (), None),
    "prewarm-imports": lambda: (lambda r: [_import(r, 10, 2010, **{semconv.IMPORT_COMPILED_MODULES: 0,
                                                                    semconv.IMPORT_COMPILE_S: 0.0,
                                                                    semconv.IMPORT_STORAGE_READ_BYTES: 200 << 20,
                                                                    semconv.IMPORT_CPU_S: 1.0})], 3000, (), FLOOR),
    # Four shards fetched by worker threads, each with its HEAD, then read from the cache.
    "predownload": lambda: (lambda r: [_head(r, 0, 50)] + [
        span for i in range(4) for span in (_download(r, f"m-{i}.safetensors", 50, 1050, True, thread=10 + i),
                                            _head(r, 50, 100))], 3000, (), None),
    "offline": lambda: (lambda r: [_head(r, 0, 300), _download(r, "m-0.safetensors", 300, 301, False),
                                   shard(r, 0, 310, 410, 100 * MB, "warm", 0)], 1000, (), None),
}


@pytest.mark.parametrize("lever", sorted(LEVER_FINDINGS))
def test_each_findings_saving_is_the_what_if_cut_of_its_lever_on_the_same_trace(lever):
    spans_of, duration_ms, others, floor = SCENARIOS[lever]()
    one = _startup(duration_ms, spans_of, "aa" * 16)
    found = [f for f in find(one + list(others), floor) if f.trace_id == "aa" * 16 and f.rule in LEVER_FINDINGS[lever]]
    assert found, f"the scenario for {lever} gives none of {LEVER_FINDINGS[lever]}"
    stated = sum(f.saving_ns for f in found)
    assert stated > 0 and stated == _projected(one, lever, floor, others)
    assert all(f"{lever} lever's projection" in f.estimate for f in found)


def test_the_compile_cache_findings_reference_is_the_hit_the_lever_subtracts():
    spans_of, duration_ms, others, _ = SCENARIOS["compile-cache"]()
    one = _startup(duration_ms, spans_of, "aa" * 16)
    f = _finding(find(one + list(others)), "compile_cache", "aa" * 16)
    assert "served by a cache in trace bbbbbbbbbbbbbbbb: 200.0 ms" in " ".join(f.evidence)
    assert f.saving_ns == 7800 * MS == _projected(one, "compile-cache", others=others)


@pytest.mark.parametrize("name", ["demo-cold-first-shard.otlp.jsonl", "demo-warm.otlp.jsonl",
                                  "demo-two-ranks.otlp.jsonl"])
def test_on_traces_the_plugin_wrote_each_lever_is_stated_once_at_its_projection(name):
    """The same rule over the plugin's own demo traces (tests/data/traces/ORIGIN.md): every
    lever a finding states, at the figure ``whatif --lever`` projects for that start-up."""
    from analyze_records import data_file
    from otel_coldstart.analyze.readers import read_trace_file

    startups = breakdowns(read_trace_file(data_file(name)))
    found = find(startups)
    checked = 0
    for b in startups:
        others = [o for o in startups if o is not b]
        for lever, rules in LEVER_FINDINGS.items():
            mine = [f for f in found if f.rule in rules and (f.trace_id, f.rank) == (b.trace_id, b.rank)]
            if not mine or any("no saving of its own" in f.estimate for f in mine):
                continue
            checked += 1
            assert sum(f.saving_ns for f in mine) == _projected([b], lever, None, others), (lever, mine)
    if name.startswith("demo-cold"):
        assert checked  # the cold demo reads its first shard from storage: cold_cache, prewarm
