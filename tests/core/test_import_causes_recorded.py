"""Why an import is slow, recorded in the host's process (issue 38): the modules compiled from
source, their compile time, the storage bytes and the CPU time on the import span; the
running import named on the in-flight board; the compile hook invisible to the host
(tracebacks, results) and gone after ready(). Fresh-process measurements (torch without
bytecode, torch evicted) are in tests/explain/test_import_causes_process.py."""

from __future__ import annotations

import importlib
import sys
import traceback

import pytest

from otel_coldstart import inflight, semconv, session
from otel_coldstart.patches import imports


@pytest.fixture
def modules_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # every import below compiles its source
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("causes_")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _import_spans(traced, module):
    return [s for s in traced.by_phase(semconv.PHASE_IMPORT) if s.attributes.get(semconv.IMPORT_MODULE) == module]


def test_an_import_compiled_from_source_counts_its_modules_and_compile_time(traced, modules_dir, monkeypatch):
    monkeypatch.setenv("OTEL_COLDSTART_IMPORT_MIN_MS", "0")  # every import a span
    traced.reinstrument()
    body = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(2000))
    for number in range(3):
        (modules_dir / f"causes_part{number}.py").write_text(body)
    (modules_dir / "causes_top.py").write_text("import causes_part0, causes_part1, causes_part2\nVALUE = 7\n")
    importlib.invalidate_caches()
    import causes_top  # noqa: F401

    assert causes_top.VALUE == 7
    (span,) = _import_spans(traced, "causes_top")
    attrs = span.attributes
    assert attrs[semconv.IMPORT_COMPILED_MODULES] == 4
    assert 0 < attrs[semconv.IMPORT_COMPILE_S] <= attrs[semconv.IMPORT_CUMULATIVE_S]
    assert 0 < attrs[semconv.IMPORT_CPU_S]
    assert attrs[semconv.IMPORT_STORAGE_READ_BYTES] >= 0
    if sys.platform.startswith("linux"):
        assert 0 <= attrs[semconv.IMPORT_RUNQUEUE_S] <= attrs[semconv.IMPORT_CUMULATIVE_S]


def test_a_module_already_compiled_counts_nothing(traced, modules_dir, monkeypatch):
    monkeypatch.setenv("OTEL_COLDSTART_IMPORT_MIN_MS", "0")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (modules_dir / "causes_cached.py").write_text("VALUE = 1\n")
    import py_compile
    py_compile.compile(str(modules_dir / "causes_cached.py"), doraise=True)
    traced.reinstrument()
    importlib.invalidate_caches()
    import causes_cached  # noqa: F401

    spans = [s for s in traced.by_phase(semconv.PHASE_IMPORT) if "causes_cached" in
             (s.attributes.get(semconv.IMPORT_MODULE), *(s.attributes.get(semconv.IMPORT_HEAVIEST) or ()))]
    assert spans and all(s.attributes[semconv.IMPORT_COMPILED_MODULES] == 0 for s in spans)


def test_a_syntax_error_reads_as_without_the_compile_hook(traced, modules_dir):
    (modules_dir / "causes_broken.py").write_text("def broken(:\n")
    importlib.invalidate_caches()
    with pytest.raises(SyntaxError) as caught:
        import causes_broken  # noqa: F401
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert not [f for f in frames if "otel_coldstart" in f.filename or "_bootstrap" in f.filename]


def test_the_compile_hook_is_removed_at_ready(traced):
    import _frozen_importlib_external as external

    import otel_coldstart

    assert getattr(external.SourceLoader.source_to_code, "__coldstart_imports__", False)
    otel_coldstart.ready()
    assert not getattr(external.SourceLoader.source_to_code, "__coldstart_imports__", False)
    assert not imports.is_patched()


def test_the_board_names_the_import_running(traced, modules_dir):
    """In flight: the running phase is the import, named by its module, not "unattributed"."""
    board = inflight.ProgressBoard(session.ACTIVE)
    seen = {}
    (modules_dir / "causes_watched.py").write_text(
        "from otel_coldstart import session as _s\nimport causes_probe\ncauses_probe.seen.update(snap="
        "causes_probe.board.snapshot())\n")
    probe = type(sys)("causes_probe")
    probe.board, probe.seen = board, seen
    sys.modules["causes_probe"] = probe
    importlib.invalidate_caches()
    import causes_watched  # noqa: F401

    snap = seen["snap"]
    assert snap.phase == semconv.PHASE_IMPORT
    assert snap.running.attributes == {semconv.IMPORT_MODULE: "causes_watched"}
    assert snap.running.name == "coldstart.import"
