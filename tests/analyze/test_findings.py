"""Each findings rule on hand-built records: it fires on the evidence it names, stays quiet
without it, and estimates a saving; ``find`` ranks by that estimate."""

from __future__ import annotations

from analyze_records import MS, aggregate, child, only, root, shard
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.findings import (
    cold_cache,
    dominant_phase,
    find,
    graph_captures,
    hidden_mmap_reads,
    pageable_h2d,
    pickle_checkpoints,
    runtime_init,
    straggler_rank,
    unattributed,
)

MiB = 1 << 20


def four_shards(first_state="cold", first_ms=400.0, fmt="safetensors"):
    r = root(1000)
    spans = [r, shard(r, 0, 0, first_ms, 100 * MiB, first_state, 100 * MiB if first_state == "cold" else 0, fmt)]
    t = first_ms
    for index in (1, 2, 3):
        spans.append(shard(r, index, t, t + 50, 100 * MiB, "warm", 0, fmt))
        t += 50
    return spans


def test_dominant_phase_names_phase_share_and_lever():
    r = root(1000)
    b = only([r, child(r, "coldstart.h2d", "h2d", 0, 600), child(r, "coldstart.cast", "cast", 600, 700)])
    [f] = dominant_phase.check(b)
    assert f.phase == "h2d" and "60%" in f.title and "pinned" in f.lever
    # no flat half: the pinned lever does not apply (no pageable copy recorded), so no saving
    assert f.saving_ns == 0 and "no saving: the pinned lever does not apply" in f.estimate
    assert any("next: cast" in line for line in f.evidence)


def test_dominant_cast_names_the_dtypes():
    r = root(1000)
    spans = [r, aggregate(r, "cast", 0, 800, 700, 300, 100 * MiB, **{
        semconv.CAST_FROM: "torch.bfloat16", semconv.CAST_TO: "torch.float16"})]
    [f] = dominant_phase.check(only(spans))
    assert "casts: torch.bfloat16 -> torch.float16" in f.evidence and "serving dtype" in f.lever


def test_dominant_phase_quiet_when_nothing_dominates():
    r = root(1000)
    assert dominant_phase.check(only([r, child(r, "coldstart.cast", "cast", 0, 100)])) == []


def test_cold_cache_asymmetry_first_shard_slower_per_byte():
    [f] = cold_cache.check(only(four_shards()))
    assert "bottleneck" in f.title and "40% of the start-up" in f.title  # 400 ms of 1 s
    assert any("8.0x slower per byte" in line for line in f.evidence)
    assert any("100.0 MiB read from storage" in line for line in f.evidence)
    assert "pre-warm" in f.lever and "NVMe" in f.lever
    assert f.saving_ns == 350 * MS  # 400 ms spent, 50 ms at the warm rate


def test_cold_cache_title_scales_with_share():
    r = root(40_000)  # the same 400 ms cold shard in a 40 s start-up: 1%
    spans = [r, shard(r, 0, 0, 400, 100 * MiB, "cold", 100 * MiB)] + \
        [shard(r, i, 400 + 50 * i, 450 + 50 * i, 100 * MiB, "warm", 0) for i in (1, 2, 3)]
    [f] = cold_cache.check(only(spans))
    assert "bottleneck" not in f.title and "1% of the start-up" in f.title and f.share == 0.01


def test_cold_cache_uses_real_reads_and_the_storage_floor():
    from otel_coldstart.analyze.storage_floor import StorageFloor
    r = root(1000)
    # the warm shard "reads" 100 MiB in 1 ms (mapped, never read): 100 GiB/s is no reference
    spans = [r, shard(r, 0, 0, 400, 100 * MiB, "cold", 50 * MiB), shard(r, 1, 400, 401, 100 * MiB, "warm", 0)]
    floor = StorageFloor("floor.json", cold_bytes_per_s=500 * MiB, warm_bytes_per_s=5000 * MiB)
    [f] = cold_cache.check(only(spans), floor)
    text = " ".join(f.evidence)
    assert "50.0 MiB read from storage" in text and "storage floor" in text and "mapped, not read" in text
    # The prewarm lever's projection: the same loader's resident file of the same size took 1 ms
    # (mapped), so the pre-warmed shard would too; the floor's read(2) rate is its last resort.
    assert f.saving_ns == 399 * MS and "prewarm lever's projection" in f.estimate


def test_cold_cache_quiet_when_all_warm_or_rates_close():
    assert cold_cache.check(only(four_shards(first_state="warm"))) == []
    assert cold_cache.check(only(four_shards(first_ms=60))) == []


def test_cold_cache_uses_read_bytes_when_state_missing():
    r = root(1000)
    spans = [r, shard(r, 0, 0, 400, 100 * MiB, None, 100 * MiB), shard(r, 1, 400, 450, 100 * MiB, None, 0)]
    assert len(cold_cache.check(only(spans))) == 1


def test_pickle_checkpoints_compared_with_safetensors_rate():
    r = root(1000)
    spans = [r, shard(r, 0, 0, 500, 100 * MiB, "warm", 0, "torch_zip"),
             shard(r, 1, 500, 550, 100 * MiB, "warm", 0, "safetensors")]
    [f] = pickle_checkpoints.check(only(spans))
    assert "torch_zip" in f.title and "safetensors" in f.lever
    assert f.saving_ns == 450 * MS
    assert pickle_checkpoints.check(only(four_shards())) == []


def test_pageable_h2d_with_lever_pinned_memory():
    r = root(1000)
    spans = [r, aggregate(r, "h2d", 0, 500, 400, 200, 1000 * MiB, **{
        semconv.COPY_PAGEABLE_BYTES: 900 * MiB, semconv.COPY_PINNED_BYTES: 100 * MiB})]
    [f] = pageable_h2d.check(only(spans))
    assert "90%" in f.title and "pin" in f.lever
    # the pinned lever's projection needs a pinned copy to learn the rate from: no flat half
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated")


def test_pageable_h2d_quiet_when_mostly_pinned():
    r = root(1000)
    spans = [r, aggregate(r, "h2d", 0, 500, 400, 200, 1000 * MiB, **{
        semconv.COPY_PAGEABLE_BYTES: 100 * MiB, semconv.COPY_PINNED_BYTES: 900 * MiB})]
    assert pageable_h2d.check(only(spans)) == []


def test_mmap_reads_hiding_in_cast_aggregates():
    r = root(1000)
    spans = [r, shard(r, 0, 0, 5, 200 * MiB, "warm", 0),
             aggregate(r, "cast", 10, 600, 500, 300, 200 * MiB, **{semconv.IO_READ_BYTES: 100 * MiB})]
    [f] = hidden_mmap_reads.check(only(spans))
    assert f.phase == "cast" and "100.0 MiB" in f.title and "storage" in f.lever
    # prewarm's projection: no cold read in the start-up and no floor give no cold rate
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated")
    from otel_coldstart.analyze.storage_floor import StorageFloor
    [f] = hidden_mmap_reads.check(only(spans), StorageFloor("floor.json", cold_bytes_per_s=400 * MiB,
                                                             warm_bytes_per_s=4000 * MiB))
    assert f.saving_ns == 250 * MS  # 100 MiB at the floor's cold 400 MiB/s: the copy itself stays
    quiet = [r, aggregate(r, "cast", 10, 600, 500, 300, 200 * MiB, **{semconv.IO_READ_BYTES: 4096})]
    assert hidden_mmap_reads.check(only(quiet)) == []


def test_many_graph_captures_suggest_powers_of_two_or_lazy():
    r = root(10_000)
    spans = [r] + [child(r, "coldstart.graph_capture", "graph_capture", 1000 + i * 100, 1090 + i * 100)
                   for i in range(40)]
    [f] = graph_captures.check(only(spans))
    assert "40 CUDA graph captures" in f.title
    assert "powers of two" in f.lever and "lazily" in f.lever
    # fewer-captures without the batch sizes cannot tell which captures a keep-list removes
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated")
    assert graph_captures.check(only(spans[:4])) == []


def test_graph_captures_counted_from_calls_on_an_aggregate_with_batch_sizes():
    r = root(10_000)
    sizes = [1, 2, 4] + list(range(8, 520, 8))  # vLLM's default capture list up to 512: 67 sizes
    spans = [r, aggregate(r, "graph_capture", 0, 6700, 6700, len(sizes), 0, **{
        semconv.GRAPH_BATCH_SIZES: tuple(sizes), semconv.GRAPH_MAX_CAPTURE_S: 0.2})]
    [f] = graph_captures.check(only(spans))
    assert f.title.startswith("67 ")
    assert any("batch sizes: 1, 2, 4, 8" in line for line in f.evidence)
    assert any("longest capture 200.0 ms" in line for line in f.evidence)
    assert f.saving_ns == 6700 * MS * (67 - 10) // 67  # 10 powers of two cover 1..512


def test_runtime_init_dominating_a_small_model():
    r = root(1000)
    spans = [r, child(r, "coldstart.runtime_init", "runtime_init", 0, 600), shard(r, 0, 600, 650, 50 * MiB, "warm", 0)]
    [f] = runtime_init.check(only(spans))
    assert "60%" in f.title and "CUDA_MODULE_LOADING" in f.lever
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated")  # no lever projects it: no flat half
    big = [r, child(r, "coldstart.runtime_init", "runtime_init", 0, 600),
           shard(r, 0, 600, 650, 20 << 30, "warm", 0)]
    assert runtime_init.check(only(big)) == []


def _rank(trace, rank, deserialize_ms, total_ms):
    r = root(total_ms, trace=trace, rank=rank, resource={"host.name": f"node-{rank}"})
    return [r, child(r, "coldstart.deserialize", "deserialize", 0, deserialize_ms),
            child(r, "coldstart.h2d", "h2d", deserialize_ms, deserialize_ms + 100)]


def test_straggler_rank_names_rank_phase_and_host():
    trace = "cd" * 16
    spans = _rank(trace, 0, 200, 400) + _rank(trace, 1, 210, 410) + _rank(trace, 2, 900, 1100) + \
        _rank(trace, 3, 205, 405)
    group = breakdowns(spans)
    [f] = straggler_rank.check(group)
    assert f.rank == 2 and f.phase == "deserialize" and "node-2" in " ".join(f.evidence)
    assert f.saving_ns == 1100 * MS - 405 * MS


def test_straggler_quiet_for_even_ranks_and_single_process():
    trace = "cd" * 16
    even = breakdowns(_rank(trace, 0, 200, 400) + _rank(trace, 1, 210, 410))
    assert straggler_rank.check(even) == []
    assert straggler_rank.check(breakdowns(_rank(trace, 0, 200, 400))) == []


def test_unattributed_names_the_gap_and_the_foreign_span_for_phase():
    r = root(1000)
    spans = [r, child(r, "coldstart.import", "import", 0, 100),
             child(r, "Load weights", None, 150, 850),
             child(r, "coldstart.h2d", "h2d", 900, 1000)]
    [f] = unattributed.check(only(spans))
    assert "80%" in f.title
    assert any("between coldstart.import and coldstart.h2d" in line for line in f.evidence)
    assert any("'Load weights'" in line for line in f.evidence)
    assert "otel_coldstart.phase('load_weights')" in f.lever


def test_unattributed_without_foreign_span_names_the_next_phase():
    r = root(1000)
    [f] = unattributed.check(only([r, child(r, "coldstart.h2d", "h2d", 700, 1000)]))
    assert "before_h2d" in f.lever and "before coldstart.h2d" in " ".join(f.evidence)


def test_a_cold_pickle_is_saved_once_in_the_ranking():
    r = root(1000)
    spans = [r, shard(r, 0, 0, 600, 100 * MiB, "cold", 100 * MiB, "torch_zip"),
             shard(r, 1, 600, 650, 100 * MiB, "warm", 0, "torch_zip"),
             shard(r, 2, 650, 700, 100 * MiB, "warm", 0, "safetensors")]
    from otel_coldstart.analyze.storage_floor import StorageFloor
    ranked = find(breakdowns(spans), StorageFloor("f", cold_bytes_per_s=1000 * MiB, warm_bytes_per_s=4000 * MiB))
    by_rule = {f.rule: f for f in ranked}
    assert {"cold_cache", "pickle_checkpoints"} <= set(by_rule)
    alone = [f for f in pickle_checkpoints.check(only(spans), StorageFloor("f", 1000 * MiB, 4000 * MiB))][0]
    assert alone.saving_ns > by_rule["pickle_checkpoints"].saving_ns  # re-estimated on what was left
    cold_shard_ms = 600 * MS
    # both levers act on the cold .bin's 600 ms: together they never count it twice
    assert by_rule["cold_cache"].saving_ns + by_rule["pickle_checkpoints"].saving_ns <= cold_shard_ms + 50 * MS
    assert sum(f.saving_ns for f in ranked) <= 1000 * MS
    assert any("already counted" in f.estimate for f in ranked)


def test_find_ranks_by_estimated_saving():
    spans = four_shards()
    r = spans[0]
    spans.append(aggregate(r, "cast", 600, 990, 380, 10, 100 * MiB, **{semconv.IO_READ_BYTES: 50 * MiB}))
    ranked = find(breakdowns(spans))
    savings = [f.saving_ns for f in ranked]
    assert savings == sorted(savings, reverse=True)
    assert {f.rule for f in ranked} >= {"cold_cache", "hidden_mmap_reads"}


def test_dominant_import_keeps_the_plugins_own_import_out_of_lever_and_saving():
    r = root(1000)
    spans = [r, child(r, "coldstart.import", "import", 0, 600, **{semconv.IMPORT_OWN_S: 0.2}),
             child(r, "coldstart.cast", "cast", 600, 700)]
    [f] = dominant_phase.check(only(spans))
    assert f.phase == "import"
    # No flat half (issue 13): the dominant phase claims no saving without a reference, so
    # the plugin's own import is counted in none; it is named and kept out of the lever.
    assert f.saving_ns == 0 and "not estimated" in f.estimate
    assert any("otel-coldstart's own import and set-up: 200.0 ms" in line for line in f.evidence)
    assert "otel-coldstart itself takes excluded" in f.lever and f.lever.startswith("import less")


def test_dominant_import_without_the_attribute_is_as_before():
    r = root(1000)
    [f] = dominant_phase.check(only([r, child(r, "coldstart.import", "import", 0, 600)]))
    assert f.saving_ns == 0 and "excluded" not in f.lever


def test_a_hostile_own_import_share_never_exceeds_the_phase():
    for own in (float("nan"), float("inf"), -1.0, 5.0, True, "0.2"):
        r = root(1000)
        [f] = dominant_phase.check(only([r, child(r, "coldstart.import", "import", 0, 600,
                                                  **{semconv.IMPORT_OWN_S: own})]))
        assert 0 <= f.saving_ns <= 300 * MS, own
