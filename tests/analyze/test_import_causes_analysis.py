"""Why imports were slow (issue 38): the findings imports_from_source and imports_from_storage,
the import lever of dominant_phase, the what-if levers bytecode and prewarm-imports, the
summed figures of ``analyze --format json`` and the labels of import rows, over hand-built
records (the fresh-process measurements are in tests/core/test_import_causes_process.py)."""

from __future__ import annotations

import pytest

from analyze_records import MS, aggregate, child, only, root
from otel_coldstart import semconv
from otel_coldstart.analyze import waterfall
from otel_coldstart.analyze.findings import dominant_phase, find, imports_from_source, imports_from_storage
from otel_coldstart.analyze.render_explain import explain_document
from otel_coldstart.analyze.storage_floor import StorageFloor
from otel_coldstart.analyze.whatif import project


def _import(parent, module: str, start_ms: float, end_ms: float, *, compiled: int = 0, compile_ms: float = 0.0,
            read: int | None = 0, cpu_ms: float | None = None, **attrs):
    fields = {semconv.IMPORT_MODULE: module, semconv.IMPORT_CUMULATIVE_S: (end_ms - start_ms) / 1000,
              semconv.IMPORT_MODULES: 900, semconv.IMPORT_COMPILED_MODULES: compiled,
              semconv.IMPORT_COMPILE_S: compile_ms / 1000, **attrs}
    if read is not None:
        fields[semconv.IMPORT_STORAGE_READ_BYTES] = read
    if cpu_ms is not None:
        fields[semconv.IMPORT_CPU_S] = cpu_ms / 1000
    return child(parent, "coldstart.import", semconv.PHASE_IMPORT, start_ms, end_ms, **fields)


def _startup(*imports_of, duration_ms=3000.0, model_work=False):
    r = root(duration_ms)
    spans = [r] + [make(r) for make in imports_of]
    if model_work:
        spans.append(child(r, "coldstart.deserialize", semconv.PHASE_DESERIALIZE, 2900, 2950))
    return only(spans)


def _rules(b, floor=None):
    return {f.rule: f for f in find([b], floor)}


def test_no_bytecode_gives_imports_from_source_with_the_compile_time_as_its_saving():
    b = _startup(lambda r: _import(r, "torch", 10, 2510, compiled=937, compile_ms=1400, cpu_ms=2400))
    found = imports_from_source.check(b)
    assert len(found) == 1
    f = found[0]
    assert f.saving_ns == 1400 * MS
    assert f.title.startswith("937 modules compiled from source (no cached bytecode): 1.40 s")
    assert "compileall" in f.lever and "PYTHONPYCACHEPREFIX" in f.lever
    assert "import torch: 937 modules" in " ".join(f.evidence)


def test_cached_bytecode_or_a_few_edited_modules_give_no_imports_from_source():
    assert imports_from_source.check(_startup(lambda r: _import(r, "torch", 10, 1010, cpu_ms=990))) == []
    few = _startup(lambda r: _import(r, "torch", 10, 1010, compiled=3, compile_ms=30, cpu_ms=990))
    assert imports_from_source.check(few) == []


def test_a_trace_from_before_the_causes_gives_neither_finding_and_nulls_in_json():
    b = _startup(lambda r: child(r, "coldstart.import", semconv.PHASE_IMPORT, 10, 2010,
                                 **{semconv.IMPORT_MODULE: "torch", semconv.IMPORT_MODULES: 900}))
    rules = _rules(b)
    assert "imports_from_source" not in rules and "imports_from_storage" not in rules
    doc = explain_document(b)["imports"]
    assert doc["compiled_modules"] is None and doc["storage_read_bytes"] is None and doc["cpu_seconds"] is None


def test_storage_reads_give_imports_from_storage_less_what_resident_imports_wait_anyway():
    b = _startup(lambda r: _import(r, "torch", 10, 2010, read=208 << 20, cpu_ms=1000),
                 lambda r: _import(r, "numpy", 2010, 2510, read=0, cpu_ms=450))
    f = imports_from_storage.check(b)[0]
    # torch: 1000 ms off the CPU, less 10% of its 2000 ms that numpy (no reads) spent off it too.
    assert f.saving_ns == pytest.approx(800 * MS, abs=MS)
    assert f.title == "import read 208.0 MiB from storage in 800.0 ms"
    assert "vmtouch" in f.lever and "local storage" in f.lever


def test_waiting_for_a_core_is_not_taken_for_storage():
    # 1000 ms off the CPU, 700 ms of it waiting for a core on a busy machine: 300 ms for storage.
    b = _startup(lambda r: _import(r, "torch", 10, 2010, read=208 << 20, cpu_ms=1000,
                                   **{semconv.IMPORT_RUNQUEUE_S: 0.7}))
    f = imports_from_storage.check(b)[0]
    assert f.saving_ns == pytest.approx(300 * MS, abs=MS)
    assert explain_document(b)["imports"]["runqueue_seconds"] == pytest.approx(0.7)


def test_imports_from_storage_takes_the_floor_warm_rate_off_when_given():
    b = _startup(lambda r: _import(r, "torch", 10, 2010, read=200 << 20, cpu_ms=1000))
    floor = StorageFloor(source="floor.json", cold_bytes_per_s=100e6, warm_bytes_per_s=2 * (200 << 20))
    f = imports_from_storage.check(b, floor)[0]
    assert f.saving_ns == pytest.approx(500 * MS, abs=MS)  # 1000 ms less 500 ms at the warm rate


def test_an_import_that_read_a_few_pages_is_not_waiting_for_storage():
    b = _startup(lambda r: _import(r, "transformers", 10, 2010, read=200 << 20, cpu_ms=1000),
                 lambda r: _import(r, "torch", 2010, 4010, read=84 << 10, cpu_ms=1900), duration_ms=5000)
    f = imports_from_storage.check(b)[0]
    assert "import transformers" in f.evidence[1] and "import torch" not in f.evidence[1]
    # torch (84 KiB read) is a resident import: 5% of its time off the CPU, so 100 ms of
    # transformers' 1000 ms off it is not storage's.
    assert f.saving_ns == pytest.approx(900 * MS, abs=MS)


def test_resident_imports_give_no_imports_from_storage():
    b = _startup(lambda r: _import(r, "torch", 10, 2010, read=64 << 10, cpu_ms=1500))
    assert imports_from_storage.check(b) == []


def test_summed_causes_in_the_json_document():
    b = _startup(lambda r: _import(r, "torch", 10, 2010, compiled=600, compile_ms=900, read=10 << 20,
                                   cpu_ms=1500),
                 lambda r: aggregate(r, semconv.PHASE_IMPORT, 2010, 2100, 50, 3, 0, **{
                     semconv.IMPORT_MODULES: 3, semconv.IMPORT_COMPILED_MODULES: 3,
                     semconv.IMPORT_COMPILE_S: 0.01, semconv.IMPORT_STORAGE_READ_BYTES: 4096,
                     semconv.IMPORT_CPU_S: 0.04}))
    doc = explain_document(b)["imports"]
    assert doc["compiled_modules"] == 603
    assert doc["compile_seconds"] == pytest.approx(0.91)
    assert doc["storage_read_bytes"] == (10 << 20) + 4096
    assert doc["cpu_seconds"] == pytest.approx(1.54)
    assert doc["off_cpu_seconds"] == pytest.approx(0.51)  # 2.0 - 1.5 and the batch's 0.05 busy - 0.04
    assert doc["slow"][0]["compiled_modules"] == 600


def test_dominant_import_of_a_library_the_server_uses_gets_a_lever_that_removes_it():
    b = _startup(lambda r: _import(r, "torch", 10, 2510, cpu_ms=2450, read=0,
                                   **{semconv.IMPORT_IMPORTER: "__main__:3"}), model_work=True)
    lever = dominant_phase.check(b)[0].lever
    assert "only moves the cost" in lever and "pre-forked" in lever and "torch._dynamo" in lever
    assert "import it lazily" not in lever


def test_dominant_import_nothing_before_ready_uses_may_be_imported_lazily():
    b = _startup(lambda r: _import(r, "matplotlib", 10, 2510, cpu_ms=2450, read=0,
                                   **{semconv.IMPORT_IMPORTER: "__main__:3"}))
    assert "import it lazily" in dominant_phase.check(b)[0].lever


def test_dominant_import_compiling_from_source_points_at_the_bytecode():
    b = _startup(lambda r: _import(r, "torch", 10, 2510, compiled=937, compile_ms=1400, cpu_ms=2400,
                                   **{semconv.IMPORT_IMPORTER: "__main__:3"}), model_work=True)
    f = dominant_phase.check(b)[0]
    assert "compile the bytecode at image build" in f.lever
    assert any("937 modules compiled from source" in e for e in f.evidence)


def test_bytecode_and_prewarm_imports_levers_project_the_measured_causes():
    b = _startup(lambda r: _import(r, "torch", 10, 2010, compiled=600, compile_ms=700, read=100 << 20,
                                   cpu_ms=1500))
    result = project([b], ["bytecode", "prewarm-imports"])
    by = {p.lever: p for p in result.levers}
    assert by["bytecode"].saving_p50_ns == 700 * MS
    assert by["prewarm-imports"].saving_p50_ns == 500 * MS  # 500 ms off the CPU, no resident reference
    assert by["bytecode"].assumptions and by["prewarm-imports"].assumptions


def test_prewarm_imports_with_a_resident_twin_takes_what_the_cold_import_took_beyond_it():
    """A warm start-up given (--reference) holds the same import resident: the cold import loses
    everything beyond it (its CPU for the reads too, which the off-CPU bound leaves), each
    counted without its wait for a core."""
    from otel_coldstart.analyze.whatif._evidence import Options

    cold = _startup(lambda r: _import(r, "torch", 10, 2510, read=200 << 20, cpu_ms=2000,
                                      **{semconv.IMPORT_RUNQUEUE_S: 0.1}))
    warm = [_startup(lambda r, ms=ms: _import(r, "torch", 10, 10 + ms, read=0, cpu_ms=ms - 50)) for ms in (1300, 1400, 1900)]
    by = {p.lever: p for p in project([cold], ["prewarm-imports"], Options(reference=warm)).levers}
    # (2,500 - 100 queued) - the twins' median 1,400 ms: 1,000 ms, where the off-CPU bound gives 400
    assert by["prewarm-imports"].saving_p50_ns == 1000 * MS
    assert any("resident in the start-ups given" in a for a in by["prewarm-imports"].assumptions)
    # another module's resident import is no twin: the bound again
    other = [_startup(lambda r: _import(r, "numpy", 10, 300, read=0, cpu_ms=280))]
    by = {p.lever: p for p in project([cold], ["prewarm-imports"], Options(reference=other)).levers}
    assert by["prewarm-imports"].saving_p50_ns == 400 * MS
    # the finding states the same figure as the lever, given the same start-ups
    (finding,) = [f for f in find([cold, *warm]) if f.rule == "imports_from_storage" and f.saving_ns]
    assert finding.saving_ns == 1000 * MS


def test_levers_do_not_apply_to_cached_resident_imports():
    b = _startup(lambda r: _import(r, "torch", 10, 2010, cpu_ms=1900))
    levers = {p.lever for p in project([b]).levers}
    assert "bytecode" not in levers and "prewarm-imports" not in levers


def test_waterfall_rows_name_each_import_by_its_module():
    b = _startup(lambda r: _import(r, "transformers.models.bert.modeling_bert", 10, 510, cpu_ms=400),
                 lambda r: aggregate(r, semconv.PHASE_IMPORT, 600, 700, 20, 4, 0, **{semconv.IMPORT_MODULES: 4}))
    labels = [row.label for row in waterfall.rows(b)[0]]
    assert "import transformers.models.bert.modeling_bert" in labels
    assert "import: 4 fast imports" in labels
    assert "import" not in labels
