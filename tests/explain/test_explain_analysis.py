"""The analyzer's reading of imports, compilations and captures (analyze/explain.py, the
compile_cache rule, the import lever) on hand-built records: it fires on the evidence it
names, stays quiet without it, reads a wrong-typed attribute as unknown, never as zero."""

from __future__ import annotations

from analyze_records import MS, child, only, root
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.explain import compile_summary, import_summary
from otel_coldstart.analyze.findings import compile_cache, dominant_phase, find
from otel_coldstart.analyze.render_json import analysis_document
from otel_coldstart.analyze.report import Report

FRAME = "forward (/srv/model.py:42)"


def compilation(parent, start_ms, end_ms, hits, misses, frame=FRAME, **attrs):
    values = {semconv.COMPILE_ID: "0/0", semconv.COMPILE_FRAME: frame,
              semconv.COMPILE_CACHE_HITS: hits, semconv.COMPILE_CACHE_MISSES: misses,
              semconv.compile_cache_attribute("fx_graph", "hits"): hits,
              semconv.compile_cache_attribute("fx_graph", "misses"): misses,
              semconv.compile_stage_attribute("dynamo"): (end_ms - start_ms) / 1000,
              semconv.compile_stage_attribute("inductor"): (end_ms - start_ms) / 2000,
              semconv.COMPILE_CACHE_DIR: "/tmp/torchinductor_root"}
    values.update(attrs)
    return child(parent, "coldstart.compile", semconv.PHASE_COMPILE, start_ms, end_ms, **values)


def startup(trace: str, compile_ms: float, hits: int, misses: int, **attrs):
    r = root(1000, trace=trace)
    return [r, compilation(r, 100, 100 + compile_ms, hits, misses, **attrs)]


def test_a_cold_compile_is_a_compile_cache_finding_with_its_lever_and_no_estimate_alone():
    (b,) = breakdowns(startup("aa" * 16, 800, 0, 2))
    (f,) = compile_cache.check([b])
    assert f.rule == "compile_cache" and f.phase == "compile" and "80% of the start-up" in f.title
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated")
    assert "TORCHINDUCTOR_CACHE_DIR (now /tmp/torchinductor_root)" in f.lever and "save_cache_artifacts" in f.lever
    assert any("Inductor FX graph cache: 2 miss(es), 0 hit(s)" in line for line in f.evidence)


def test_the_fastest_hit_of_the_same_graph_in_another_start_up_is_the_estimate():
    spans = startup("aa" * 16, 800, 0, 2) + startup("bb" * 16, 300, 2, 0) + startup("cc" * 16, 200, 2, 0)
    findings = [f for f in find(breakdowns(spans)) if f.rule == "compile_cache"]
    (f,) = findings
    assert f.trace_id == "aa" * 16
    assert f.saving_ns == 600 * MS  # 800 ms missed, the fastest hit took 200 ms
    assert "compile-cache lever's projection" in f.estimate and "fastest compilation of the same frame" in f.estimate


def test_a_hit_of_another_graph_is_no_reference():
    spans = startup("aa" * 16, 800, 0, 2) + startup("bb" * 16, 200, 2, 0, **{semconv.COMPILE_FRAME: "other (x.py:1)"})
    (f,) = [f for f in find(breakdowns(spans)) if f.rule == "compile_cache"]
    assert f.saving_ns == 0 and f.estimate.startswith("not estimated")


def test_no_finding_when_every_compilation_hit_or_the_trace_cannot_tell():
    assert compile_cache.check(breakdowns(startup("aa" * 16, 300, 2, 0))) == []
    r = root(1000)
    unknown = child(r, "coldstart.compile", semconv.PHASE_COMPILE, 100, 900, **{semconv.COMPILE_ID: "0/0"})
    (b,) = breakdowns([r, unknown])
    assert compile_cache.check([b]) == []
    summary = compile_summary(b)
    assert summary.count == 1 and summary.cache_misses is None and summary.unknown == 1


def test_wrong_typed_compile_attributes_read_as_unknown():
    r = root(1000)
    hostile = child(r, "coldstart.compile", semconv.PHASE_COMPILE, 100, 900, **{
        semconv.COMPILE_CACHE_MISSES: "2", semconv.COMPILE_CACHE_HITS: True, semconv.COMPILE_ID: "0/3",
        semconv.compile_stage_attribute("dynamo"): float("nan"), semconv.COMPILE_FRAME: 7})
    (b,) = breakdowns([r, hostile])
    (record,) = compile_summary(b).compilations
    assert record.misses is None and record.hits is None and record.frame is None
    assert record.stages == {} and record.recompile is True  # read from the id "0/3"
    assert compile_cache.check([b]) == []


def test_the_json_document_has_the_compile_summary():
    (b,) = breakdowns(startup("aa" * 16, 800, 0, 2, **{semconv.COMPILE_ID: "1/2",
                                                       semconv.COMPILE_RECOMPILE: True}))
    doc = analysis_document(Report.of([b]))
    compiled = doc["startups"][0]["compile"]
    assert compiled["compilations"] == 1 and compiled["recompilations"] == 1
    assert compiled["seconds"] == 0.8 and compiled["cache_hits"] == 0 and compiled["cache_misses"] == 2
    assert compiled["stages"] == {"dynamo": 0.8, "inductor": 0.4}
    assert doc["startups"][0]["imports"] is None and doc["startups"][0]["captures"] is None


def test_the_import_lever_names_the_slowest_import_and_what_it_pulls_in():
    r = root(1000)
    span = child(r, "coldstart.import", semconv.PHASE_IMPORT, 0, 700, **{
        semconv.IMPORT_MODULE: "transformers", semconv.IMPORT_MODULES: 900, semconv.IMPORT_SELF_S: 0.02,
        semconv.IMPORT_HEAVIEST: ["torch._C", "transformers"], semconv.IMPORT_HEAVIEST_S: [0.3, 0.02],
        semconv.IMPORT_PACKAGES: ["torch", "transformers"], semconv.IMPORT_PACKAGES_S: [0.5, 0.1]})
    b = only([r, span])
    (f,) = dominant_phase.check(b)
    assert f.lever.startswith("`import transformers` takes 700.0 ms, 500.0 ms of it importing torch: import it lazily")
    assert any("slowest imports after instrument(): transformers 700.0 ms (900 modules)" in e for e in f.evidence)
    summary = import_summary(b)
    assert summary.imports[0].packages == (("torch", 500 * MS), ("transformers", 100 * MS))


def test_an_import_the_library_makes_itself_is_named_with_where_it_happened_not_as_one_to_defer():
    """torch's meta-device init imports torch._dynamo (torch._compile:47) inside the user's
    build_model: no import statement of the user's makes it, so the lever points at the call."""
    r = root(3000)
    build = child(r, "coldstart.build_model", "build_model", 1400, 2900)
    own = child(build, "coldstart.import", semconv.PHASE_IMPORT, 1410, 2800, **{
        semconv.IMPORT_MODULE: "torch._dynamo", semconv.IMPORT_IMPORTER: "torch._compile:47",
        semconv.IMPORT_PACKAGES: ["torch", "sympy"], semconv.IMPORT_PACKAGES_S: [1.0, 0.3]})
    theirs = child(r, "coldstart.import", semconv.PHASE_IMPORT, 0, 1300, **{
        semconv.IMPORT_MODULE: "torch", semconv.IMPORT_IMPORTER: "__main__:3"})
    (f,) = dominant_phase.check(only([r, build, own, theirs]))
    assert "torch._dynamo was imported at torch._compile:47, during build_model" in f.evidence
    assert ("torch imports it itself (torch._compile:47, during build_model), so no import of yours moves it: "
            "change or avoid the call into torch there that needs it") in f.lever
    assert "import it lazily" not in f.lever
    assert import_summary(only([r, own])).imports[0].imported_by_itself is True


def test_a_library_s_own_late_import_listed_second_is_named_too():
    r = root(3000)
    build = child(r, "coldstart.build_model", "build_model", 1500, 2900)
    theirs = child(r, "coldstart.import", semconv.PHASE_IMPORT, 0, 1400, **{
        semconv.IMPORT_MODULE: "torch", semconv.IMPORT_IMPORTER: "__main__:3"})
    own = child(build, "coldstart.import", semconv.PHASE_IMPORT, 1510, 2800, **{
        semconv.IMPORT_MODULE: "torch._dynamo", semconv.IMPORT_IMPORTER: "torch._compile:47"})
    (f,) = dominant_phase.check(only([r, build, own, theirs]))
    assert "torch was imported at __main__:3" in f.evidence
    assert "torch._dynamo was imported by torch itself, at torch._compile:47, during build_model" in f.evidence
    assert "import it lazily where it is first used" in f.lever  # the biggest, torch, is the user's


def test_an_import_made_by_the_users_code_keeps_the_defer_lever_and_a_bad_importer_is_unknown():
    r = root(1000)
    mine = child(r, "coldstart.import", semconv.PHASE_IMPORT, 0, 700, **{
        semconv.IMPORT_MODULE: "transformers", semconv.IMPORT_IMPORTER: "server.app:12"})
    (f,) = dominant_phase.check(only([r, mine]))
    assert "transformers was imported at server.app:12" in f.evidence
    assert "import it lazily where it is first used" in f.lever
    for hostile in (7, ["torch._compile:47"], "", ":47", "no line"):
        span = child(r, "coldstart.import", semconv.PHASE_IMPORT, 0, 700, **{
            semconv.IMPORT_MODULE: "torch._dynamo", semconv.IMPORT_IMPORTER: hostile})
        (record,) = import_summary(only([r, span])).imports
        assert record.imported_by_itself is False, hostile
        (f,) = dominant_phase.check(only([r, span]))
        assert "imports it itself" not in f.lever, hostile


def test_misaligned_import_lists_are_dropped_not_misread():
    r = root(1000)
    span = child(r, "coldstart.import", semconv.PHASE_IMPORT, 0, 700, **{
        semconv.IMPORT_MODULE: "torch", semconv.IMPORT_PACKAGES: ["torch", 3, "numpy"],
        semconv.IMPORT_PACKAGES_S: [0.5, 0.1, "x"]})
    (record,) = import_summary(only([r, span])).imports
    assert record.packages == (("torch", 500 * MS),)


def test_fast_import_batches_count_as_import_time_and_in_the_summary():
    r = root(1000)
    batch = child(r, "coldstart.import", semconv.PHASE_IMPORT, 10, 30, **{
        semconv.AGGREGATE: True, semconv.CALLS: 3, semconv.BUSY_S: 0.012, semconv.IMPORT_MODULES: 5})
    b = only([r, batch])
    assert b.phase("import").busy_ns == 12 * MS
    summary = import_summary(b)
    assert summary.imports == () and summary.batched_calls == 3 and summary.batched_ns == 12 * MS


def test_every_per_cache_and_per_stage_attribute_is_documented():
    import os

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "conventions.md"), encoding="utf-8") as f:
        text = f.read()
    for cache in semconv.COMPILE_CACHES:
        assert f"`{semconv.compile_cache_attribute(cache, 'hits')}`" in text or \
            f"`{semconv.compile_cache_attribute(cache, 'hits')} " in text
    for stage in semconv.COMPILE_STAGES:
        assert semconv.compile_stage_attribute(stage) in text or f"`.{stage}_s`" in text


def test_a_bypassed_compilation_quotes_torch_and_gives_the_lever_that_lifts_the_reason():
    """Issue 39: torch bypassed both caches (no hit, no miss): compiled from scratch at every
    start-up. The finding quotes torch's reason, and the lever lifts it instead of asking to
    persist a directory torch writes nothing to; on main there was no finding at all."""
    reason = "Cannot cache a graph with freezing enabled"
    (b,) = breakdowns(startup("aa" * 16, 800, 0, 0, **{
        semconv.compile_cache_attribute("fx_graph", "bypasses"): 1,
        semconv.compile_cache_attribute("aot_autograd", "hits"): 0,
        semconv.compile_cache_attribute("aot_autograd", "misses"): 0,
        semconv.compile_cache_attribute("aot_autograd", "bypasses"): 1,
        semconv.compile_cache_attribute("fx_graph", "bypass_reason"): "mkldnn tensors unpickleable",
        semconv.compile_cache_attribute("aot_autograd", "bypass_reason"): reason}))
    (f,) = compile_cache.check([b])
    assert any(f'AOTAutograd cache: "{reason}"' in line for line in f.evidence), f.evidence
    assert any("1 bypass(es)" in line for line in f.evidence), f.evidence
    assert f'("{reason}")' in f.lever and "torch._inductor.config.freezing" in f.lever
    assert "cannot help" in f.lever and "save_cache_artifacts" not in f.lever
