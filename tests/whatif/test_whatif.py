"""``whatif`` on hand-built records: each lever from the evidence it names, the levers
together without double counting, the JSON shape, start-ups that never became ready, and
the command's errors."""

from __future__ import annotations

import json

import pytest

from analyze_records import MS, aggregate, child, root, shard, write_otlp
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.render_whatif import whatif_document
from otel_coldstart.analyze.storage_floor import StorageFloor
from otel_coldstart.analyze.whatif import ALL, Options, default_keep, project
from otel_coldstart.cli import main

MB = 1_000_000


def _lever(result, name):
    return next(p for p in result.levers if p.lever == name)


def _startup(duration_ms, build, trace=None, **root_attrs):
    r = root(duration_ms, trace=trace or f"{abs(hash((duration_ms, str(build)))) % 16**32:032x}", **root_attrs)
    return [r, *build(r)]


def _cold_and_warm_shards(r):
    # 400 MB cold in 1000 ms, 400 MB warm in 10 ms (40 GB/s), 500 ms of other work
    return [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB),
            shard(r, 1, 1000, 1010, 400 * MB, "warm", read_bytes=0),
            child(r, "coldstart.import", semconv.PHASE_IMPORT, 1010, 1510)]


# --- the JSON shape --------------------------------------------------------------------------


def test_json_document_has_the_shape_issue_27_gives():
    result = project(breakdowns(_startup(1600, _cold_and_warm_shards)))
    doc = whatif_document(result)
    assert set(doc["baseline"]) == {"n", "p50_s", "p95_s", "phases"}
    assert set(doc["baseline"]["phases"]["deserialize"]) == {"p50_s", "p95_s"}
    lever = doc["levers"][0]
    assert {"lever", "p50_s", "p95_s", "saving_p50_s", "phases", "assumptions"} <= set(lever)
    assert lever["lever"] == "prewarm" and isinstance(lever["assumptions"], list) and lever["assumptions"]
    assert set(lever["phases"]["deserialize"]) == {"p50_s", "p95_s"}
    json.dumps(doc)  # plain data


# --- prewarm ---------------------------------------------------------------------------------


def test_prewarm_reads_cold_files_at_the_rate_of_the_startups_resident_files():
    result = project(breakdowns(_startup(1600, _cold_and_warm_shards)), ["prewarm"])
    lever = _lever(result, "prewarm")
    # the cold 400 MB at the warm files' 40 GB/s: 10 ms instead of 1000 ms
    assert lever.saving_p50_ns == pytest.approx(990 * MS, abs=1 * MS)
    assert lever.summary.phases["deserialize"].p50_ns == pytest.approx(20 * MS, abs=1 * MS)
    assert lever.summary.phases["import"].p50_ns == 500 * MS  # everything else as measured
    assert any("own resident files" in a and "37.3 GiB/s" in a for a in lever.assumptions), lever.assumptions


def _all_cold(r):
    return [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB),
            shard(r, 1, 1000, 2000, 400 * MB, "cold", read_bytes=400 * MB)]


def test_prewarm_without_a_resident_file_or_a_floor_says_why_instead_of_a_figure():
    result = project(breakdowns(_startup(2100, _all_cold)), ["prewarm"])
    lever = _lever(result, "prewarm")
    assert lever.summary is None and lever.saving_p50_ns is None
    assert "no resident file" in lever.not_estimated and "floor" in lever.not_estimated
    doc = whatif_document(result)["levers"][0]
    assert doc["p50_s"] is None and doc["not_estimated"] == lever.not_estimated


def test_prewarm_uses_the_storage_floor_where_no_file_was_resident():
    floor = StorageFloor("floor.json", cold_bytes_per_s=400 * MB, warm_bytes_per_s=8000 * MB)
    result = project(breakdowns(_startup(2100, _all_cold)), ["prewarm"], Options(floor=floor))
    lever = _lever(result, "prewarm")
    # 800 MB read from storage, now from the page cache at 8 GB/s: 100 ms instead of 2000 ms
    assert lever.summary.total.p50_ns == pytest.approx(200 * MS, abs=1 * MS)
    assert any("floor" in a and "floor.json" in a for a in lever.assumptions)


def test_prewarm_takes_storage_reads_hidden_in_copies_at_the_files_cold_rate():
    def build(r):
        # the file read brought in 100 MB in 500 ms (200 MB/s); the copy faulted in 200 MB more
        return [shard(r, 0, 0, 500, 300 * MB, "cold", read_bytes=100 * MB),
                aggregate(r, semconv.PHASE_H2H, 500, 2500, 2000, 10, 300 * MB,
                          **{semconv.IO_READ_BYTES: 200 * MB})]

    floor = StorageFloor("f", cold_bytes_per_s=None, warm_bytes_per_s=10_000 * MB)
    result = project(breakdowns(_startup(2500, build)), ["prewarm"], Options(floor=floor))
    lever = _lever(result, "prewarm")
    # 200 MB at 200 MB/s = 1000 ms off the copy; the copying (1000 ms) stays
    assert lever.summary.phases["h2h"].p50_ns == pytest.approx(1000 * MS, abs=1 * MS)
    assert any("itself stays" in a for a in lever.assumptions)


def _copied_while_open(state, ms, copy_ms):
    """vLLM's pattern: each tensor copied while its file is open, so the copies (h2h here,
    h2d on a GPU) are the file span's children and wait for storage themselves."""
    def build(r):
        f = shard(r, 0, 0, ms, 1000 * MB, state, read_bytes=1000 * MB if state == "cold" else 0)
        return [f, aggregate(f, semconv.PHASE_H2H, 10, ms - 10, copy_ms, 300, 1000 * MB,
                             **{semconv.IO_READ_BYTES: 400 * MB if state == "cold" else 0})]
    return build


def test_prewarm_counts_copies_made_while_the_file_was_open_as_part_of_its_read():
    cold = breakdowns(_startup(4000, _copied_while_open("cold", 4000, 3900), trace="aa" * 16))
    warm = breakdowns(_startup(1000, _copied_while_open("warm", 1000, 900), trace="bb" * 16))
    lever = _lever(project(cold, ["prewarm"], Options(reference=warm)), "prewarm")
    # the resident file took 1000 ms, copies included: so does the cold one, projected
    assert lever.summary.total.p50_ns == pytest.approx(1000 * MS, abs=2 * MS)
    assert lever.summary.phases["h2h"].p50_ns < 3900 * MS
    assert any("other start-ups given" in a for a in lever.assumptions)
    # with the floor alone, read(2)'s rate takes the copying as free, and says so
    floor = StorageFloor("floor.json", 1000 * MB, 10_000 * MB)
    alone = _lever(project(cold, ["prewarm"], Options(floor=floor)), "prewarm")
    assert alone.summary.total.p50_ns == pytest.approx(100 * MS, abs=2 * MS)
    assert any("optimistic" in a and "--reference" in a for a in alone.assumptions)


def test_prewarm_does_not_apply_to_resident_startups():
    def build(r):
        return [shard(r, 0, 0, 10, 400 * MB, "warm", read_bytes=0)]

    result = project(breakdowns(_startup(100, build)))
    assert [p.lever for p in result.levers] == []  # nothing applies: nothing listed
    asked = project(breakdowns(_startup(100, build)), ["prewarm"])
    lever = _lever(asked, "prewarm")
    assert lever.saving_p50_ns == 0 and "already resident" in lever.assumptions[0]


# --- serving-dtype ---------------------------------------------------------------------------


def _cast_startup(r):
    to = child(r, "coldstart.module.to", semconv.PHASE_CAST, 100, 900, **{semconv.TENSORS: 50})
    return [shard(r, 0, 0, 100, 200 * MB, "warm", read_bytes=0), to,
            aggregate(to, semconv.PHASE_CAST, 110, 890, 770, 50, 200 * MB,
                      **{semconv.CAST_FROM: "bfloat16", semconv.CAST_TO: "float16"}),
            aggregate(r, semconv.PHASE_H2D, 900, 1000, 100, 50, 100 * MB,
                      **{semconv.CAST_FROM: "float32", semconv.CAST_TO: "float16"})]


def test_serving_dtype_removes_casts_but_keeps_device_copies_that_cast():
    result = project(breakdowns(_startup(1000, _cast_startup)), ["serving-dtype"])
    lever = _lever(result, "serving-dtype")
    assert lever.summary.phases["cast"].p50_ns == 0  # the aggregate and the module.to span's own time
    assert lever.summary.phases["h2d"].p50_ns == 100 * MS  # a device copy that casts stays
    assert lever.saving_p50_ns == 800 * MS
    assert any("bfloat16 -> float16" in a for a in lever.assumptions)
    assert any("copies that also convert" in a for a in lever.assumptions)


# --- pinned ----------------------------------------------------------------------------------


def _pageable(r):
    return [aggregate(r, semconv.PHASE_H2D, 0, 1000, 1000, 10, 1000 * MB,
                      **{semconv.COPY_PAGEABLE_BYTES: 1000 * MB, semconv.COPY_PINNED_BYTES: 0})]


def test_pinned_without_pinned_copies_to_learn_from_says_so():
    lever = _lever(project(breakdowns(_startup(1000, _pageable)), ["pinned"]), "pinned")
    assert lever.summary is None and "no pinned host-to-device copy" in lever.not_estimated


def test_pinned_copies_pageable_bytes_at_the_pinned_rate_measured_in_the_input():
    def pinned(r):  # another start-up: 500 MB pinned, 0.2 s of device time (2.5 GB/s)
        return [aggregate(r, semconv.PHASE_H2D, 0, 100, 20, 10, 500 * MB,
                          **{semconv.COPY_PINNED_BYTES: 500 * MB, semconv.COPY_ASYNC_S: 0.2,
                             semconv.THROUGHPUT: 500 * MB / 0.2})]

    spans = _startup(1000, _pageable, trace="aa" * 16) + _startup(200, pinned, trace="bb" * 16)
    result = project(breakdowns(spans), ["pinned"])
    lever = _lever(result, "pinned")
    # the pageable start-up: 1000 MB at 2.5 GB/s = 400 ms instead of 1000 ms
    assert lever.changed == 1
    assert any("2.3 GiB/s" in a and "device time" in a for a in lever.assumptions), lever.assumptions
    alone = project(breakdowns(_startup(1000, _pageable, trace="aa" * 16)), ["pinned"],
                    Options(reference=breakdowns(_startup(200, pinned, trace="bb" * 16))))
    assert _lever(alone, "pinned").summary.total.p50_ns == pytest.approx(400 * MS, abs=1 * MS)


# --- compile-cache ---------------------------------------------------------------------------


def _compiles(*compilations):
    """(frame, hits, misses, ms) per compilation, one after another."""
    def build(r):
        spans, at = [], 0
        for frame, hits, misses, ms in compilations:
            attrs = {semconv.COMPILE_ID: "0/0"}
            if hits is not None:
                attrs.update({semconv.COMPILE_FRAME: frame, semconv.COMPILE_CACHE_HITS: hits,
                              semconv.COMPILE_CACHE_MISSES: misses})
            spans.append(child(r, "coldstart.compile", semconv.PHASE_COMPILE, at, at + ms, **attrs))
            at += ms
        return spans
    return build


def test_compile_cache_costs_each_miss_as_the_fastest_hit_of_the_same_frame():
    cold = _startup(30_000, _compiles(("model.py:10:forward", 0, 3, 25_000), ("head.py:1:f", 0, 1, 5_000)),
                    trace="aa" * 16)
    warm = _startup(3_000, _compiles(("model.py:10:forward", 3, 0, 2_000), ("head.py:1:f", 1, 0, 600)),
                    trace="bb" * 16)
    warmer = _startup(2_500, _compiles(("model.py:10:forward", 3, 0, 1_500)), trace="cc" * 16)
    result = project(breakdowns(cold), ["compile-cache"], Options(reference=breakdowns(warm + warmer)))
    lever = _lever(result, "compile-cache")
    assert lever.summary.total.p50_ns == pytest.approx((1_500 + 600) * MS, abs=1 * MS)


def test_compile_cache_says_which_frames_never_hit_and_what_lacks_provenance():
    cold = _startup(30_000, _compiles(("model.py:10:forward", 0, 3, 25_000), ("x", None, None, 5_000)))
    lever = _lever(project(breakdowns(cold), ["compile-cache"]), "compile-cache")
    assert lever.summary is None
    assert "model.py:10:forward" in lever.not_estimated and "--reference" in lever.not_estimated
    assert "without cache provenance" in lever.not_estimated


# --- fewer-captures --------------------------------------------------------------------------


def _captures(times=True):
    sizes = [1, 2, 4, 8, 16, 24, 32]
    per = [0.1, 0.1, 0.1, 0.2, 0.3, 0.4, 0.5]

    def build(r):
        attrs = {semconv.GRAPH_BATCH_SIZES: tuple(sizes)}
        if times:
            attrs[semconv.GRAPH_CAPTURE_TIMES_S] = tuple(per)
        return [aggregate(r, semconv.PHASE_GRAPH_CAPTURE, 0, 1700, 1700, 7, 0, **attrs)]
    return build


def test_fewer_captures_removes_the_recorded_time_of_the_sizes_not_kept():
    result = project(breakdowns(_startup(2000, _captures())), ["fewer-captures"],
                     Options(keep_capture_sizes=frozenset({1, 2, 4, 8})))
    lever = _lever(result, "fewer-captures")
    assert lever.saving_p50_ns == pytest.approx(1200 * MS, abs=1 * MS)  # 16, 24, 32: 0.3 + 0.4 + 0.5 s
    assert any("1, 2, 4, 8" in a for a in lever.assumptions)


def test_fewer_captures_default_keeps_powers_of_two_and_falls_back_to_the_mean():
    assert default_keep([1, 2, 24, 32]) == {1, 2, 4, 8, 16, 32}
    assert default_keep([3]) == {1, 2, 4}
    lever = _lever(project(breakdowns(_startup(2000, _captures(times=False))), ["fewer-captures"]),
                   "fewer-captures")
    assert lever.saving_p50_ns == pytest.approx(1700 * MS // 7, abs=1 * MS)  # 24 goes: one of 7 sizes
    assert any("mean" in a for a in lever.assumptions) and any("powers of two" in a for a in lever.assumptions)


# --- all -------------------------------------------------------------------------------------


def test_all_claims_each_second_once():
    def build(r):
        # a cast that faulted 200 MB in from storage: prewarm and serving-dtype both act on it
        return [shard(r, 0, 0, 500, 300 * MB, "cold", read_bytes=100 * MB),
                aggregate(r, semconv.PHASE_CAST, 500, 2500, 2000, 10, 300 * MB,
                          **{semconv.IO_READ_BYTES: 200 * MB, semconv.CAST_FROM: "bfloat16",
                             semconv.CAST_TO: "float16"}),
                child(r, "coldstart.import", semconv.PHASE_IMPORT, 2500, 3000)]

    floor = StorageFloor("f", None, 10_000 * MB)
    result = project(breakdowns(_startup(3000, build)), None, Options(floor=floor))
    levers = {p.lever: p for p in result.levers}
    assert set(levers) == {"prewarm", "serving-dtype", ALL}
    # prewarm: 490 ms off the file, 1000 ms of storage off the cast; serving-dtype: the
    # cast's other 1000 ms (its reads stay); together: the file's 490 ms and the whole cast
    assert levers["prewarm"].saving_p50_ns == pytest.approx(1490 * MS, abs=1 * MS)
    assert levers["serving-dtype"].saving_p50_ns == pytest.approx(1000 * MS, abs=1 * MS)
    assert levers[ALL].saving_p50_ns == pytest.approx(2490 * MS, abs=1 * MS)
    assert levers[ALL].summary.total.p50_ns >= 500 * MS  # the import stays
    assert levers[ALL].assumptions[0] == "together: prewarm, serving-dtype"


def test_all_never_takes_more_than_a_spans_own_time():
    def build(r):  # the same cast, but the floor's cold rate says its reads were all of it
        return [shard(r, 0, 0, 500, 300 * MB, "cold", read_bytes=100 * MB),
                aggregate(r, semconv.PHASE_CAST, 500, 2500, 2000, 10, 300 * MB,
                          **{semconv.IO_READ_BYTES: 200 * MB})]

    floor = StorageFloor("f", 50 * MB, 10_000 * MB)
    lever = _lever(project(breakdowns(_startup(2500, build)), [ALL], Options(floor=floor)), ALL)
    assert lever.summary.phases["cast"].p50_ns == 0  # at most the span, not 2000 + 4000 ms
    assert lever.summary.total.p50_ns >= 0


def test_work_saved_on_other_threads_shortens_the_startup_over_the_parallelism():
    def build(r):  # two worker threads read a cold file each, in parallel, while the main thread waits
        return [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB) ,
                child(r, "coldstart.deserialize", semconv.PHASE_DESERIALIZE, 0, 1000, thread=2,
                      **{semconv.FILE_PATH: "/ckpt/b", semconv.FILE_SIZE: 400 * MB,
                         semconv.CACHE_STATE: "cold", semconv.CACHE_STORAGE_READ_BYTES: 400 * MB}),
                child(r, "coldstart.deserialize", semconv.PHASE_DESERIALIZE, 0, 1000, thread=3,
                      **{semconv.FILE_PATH: "/ckpt/c", semconv.FILE_SIZE: 400 * MB,
                         semconv.CACHE_STATE: "cold", semconv.CACHE_STORAGE_READ_BYTES: 400 * MB})]

    floor = StorageFloor("f", None, 4000 * MB)
    b = breakdowns(_startup(1000, build))[0]
    assert b.parallelism == pytest.approx(3.0)
    lever = _lever(project([b], ["prewarm"], Options(floor=floor)), "prewarm")
    # each read: 1000 ms -> 100 ms, side by side: the start-up takes 100 ms
    assert lever.summary.total.p50_ns == pytest.approx(100 * MS, abs=2 * MS)
    assert lever.summary.phases["deserialize"].p50_ns == pytest.approx(300 * MS, abs=2 * MS)
    assert any("threads busy" in a for a in lever.assumptions)


# --- start-ups that did not reach ready() ----------------------------------------------------


def test_startups_that_never_became_ready_are_left_out_with_a_note():
    ready = _startup(1600, _cold_and_warm_shards, trace="aa" * 16)
    killed = _startup(9000, _cold_and_warm_shards, trace="bb" * 16,
                      **{semconv.READY: False, semconv.END_REASON: semconv.END_SIGTERM})
    result = project(breakdowns(ready + killed))
    assert result.baseline.n == 1 and result.baseline.total.p50_ns == 1600 * MS
    assert len(result.left_out) == 1 and "bb" * 16 in result.left_out[0] and "SIGTERM" in result.left_out[0]
    assert any("did not reach ready()" in n for n in result.notes)
    with pytest.raises(ValueError, match="ready"):
        project(breakdowns(killed))


# --- the command -----------------------------------------------------------------------------


@pytest.fixture
def traces(tmp_path):
    ready = _startup(1600, _cold_and_warm_shards, trace="aa" * 16)
    cast = _startup(1000, _cast_startup, trace="cc" * 16)
    killed = _startup(9000, _cold_and_warm_shards, trace="bb" * 16,
                      **{semconv.READY: False, semconv.END_REASON: semconv.END_EXCEPTION})
    return write_otlp(tmp_path / "t.jsonl", ready + cast + killed)


def test_cli_json_text_and_markdown(traces, capsys):
    assert main(["whatif", traces, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "otel-coldstart.whatif/1" and doc["baseline"]["n"] == 2
    assert [lever["lever"] for lever in doc["levers"]] == ["prewarm", "serving-dtype", "all"]
    assert len(doc["left_out"]) == 1 and "uncaught" in doc["left_out"][0]
    assert main(["whatif", traces]) == 0
    text = capsys.readouterr().out
    assert "left out: trace " + "bb" * 16 in text and "serving-dtype" in text and "assumptions" not in text
    assert main(["whatif", traces, "--format", "markdown", "--lever", "pinned"]) == 0
    md = capsys.readouterr().out
    assert "| pinned |" in md and "no pageable host-to-device copy" in md


def test_cli_floor_document_among_the_paths_is_the_reference(tmp_path, capsys):
    cold = write_otlp(tmp_path / "cold.jsonl", _startup(2100, _all_cold))
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps({"format": "otel-coldstart.floor", "version": 1, "files": [],
                                 "cold": {"bytes_per_s": 4e8, "evicted": True}, "warm": {"bytes_per_s": 8e9}}))
    assert main(["whatif", cold, "--lever", "prewarm", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["levers"][0]["not_estimated"]
    assert main(["whatif", cold, str(floor), "--lever", "prewarm", "--format", "json"]) == 0
    lever = json.loads(capsys.readouterr().out)["levers"][0]
    assert lever["p50_s"] == pytest.approx(0.2, abs=0.001) and lever["not_estimated"] is None


@pytest.mark.parametrize("argv, code, message", [
    (["--keep-capture-sizes", "1,x"], 2, "--keep-capture-sizes: 'x' is not a positive batch size"),
    (["--keep-capture-sizes", "0"], 2, "not a positive batch size"),
    (["--lever", "warp-drive"], 2, "invalid choice"),
    (["--max-input-mb", "nan"], 2, "--max-input-mb"),
])
def test_cli_usage_errors_are_one_line(traces, capsys, argv, code, message):
    assert main(["whatif", traces, *argv]) == code
    err = capsys.readouterr().err
    assert message in err
    assert err.count("otel-coldstart") <= 2 and "Traceback" not in err  # argparse adds its usage block


def test_cli_input_errors_have_their_codes(tmp_path, capsys):
    assert main(["whatif", str(tmp_path / "missing.jsonl")]) == 3
    assert capsys.readouterr().err.strip().count("\n") == 0
    (tmp_path / "no.json").write_text('{"resourceSpans": []}')
    assert main(["whatif", str(tmp_path / "no.json")]) == 5
    killed = write_otlp(tmp_path / "killed.jsonl", _startup(
        9000, _cold_and_warm_shards, trace="bb" * 16, **{semconv.READY: False, semconv.END_REASON: "exit"}))
    capsys.readouterr()
    assert main(["whatif", killed]) == 5
    err = capsys.readouterr().err
    assert "no start-up reached ready()" in err and err.count("\n") == 1
    out = tmp_path / "report.txt"
    out.write_text("keep me")
    assert main(["whatif", killed, "-o", str(out)]) in (5, 6)


def test_cli_would_not_overwrite(traces, tmp_path, capsys):
    out = tmp_path / "report.html"
    out.write_text("keep me")
    assert main(["whatif", traces, "--format", "html", "-o", str(out)]) == 6
    assert out.read_text() == "keep me"


def test_untrusted_phase_names_are_escaped(tmp_path, capsys):
    def build(r):
        return [shard(r, 0, 0, 1000, 400 * MB, "cold", read_bytes=400 * MB),
                shard(r, 1, 1000, 1010, 400 * MB, "warm", read_bytes=0),
                child(r, "x", "<script>alert(1)</script>\x1b[2J|*", 1010, 1510)]

    path = write_otlp(tmp_path / "evil.jsonl", _startup(1600, build))
    assert main(["whatif", path, "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert main(["whatif", path]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_cli_reference_startups_teach_without_being_projected(tmp_path, capsys):
    def pinned(r):
        return [aggregate(r, semconv.PHASE_H2D, 0, 100, 20, 10, 500 * MB,
                          **{semconv.COPY_PINNED_BYTES: 500 * MB, semconv.COPY_ASYNC_S: 0.2,
                             semconv.THROUGHPUT: 500 * MB / 0.2})]

    cold = write_otlp(tmp_path / "pageable.jsonl", _startup(1000, _pageable, trace="aa" * 16))
    reference = write_otlp(tmp_path / "pinned.jsonl", _startup(200, pinned, trace="bb" * 16))
    # --trace-id chooses what is projected; the reference is learned from whatever its trace id
    assert main(["whatif", cold, "--reference", reference, "--trace-id", "aaaa", "--lever", "pinned",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"]["n"] == 1 and doc["levers"][0]["p50_s"] == pytest.approx(0.4, abs=0.002)
    assert main(["whatif", cold, "--reference", str(tmp_path / "nope.jsonl")]) == 3
