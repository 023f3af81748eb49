"""Patch modules are imported when their library is (patches.load), not with the package: the
registry says what each waits for, a process that has not imported torch at instrument() pays
for none of torch's, and one that imports torch afterwards is patched and ended as before."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from otel_coldstart import patches, semconv
from otel_coldstart.analyze.readers import read_trace_file


def test_the_registry_names_every_patch_module_with_its_own_targets():
    directory = pathlib.Path(patches.__file__).parent
    on_disk = {path.stem for path in directory.glob("*.py") if not path.stem.startswith("_")}
    assert set(patches.NAMES) == on_disk
    for name in patches.NAMES:
        assert patches.load(name).TARGETS == patches.TARGETS[name], name
    assert patches.NAMES[0] == "imports"  # patched first: the others' own imports are counted
    assert [module.__name__.rsplit(".", 1)[-1] for module in patches.ALL] == list(patches.NAMES)


CHILD = r"""
import json, sys
import otel_coldstart
otel_coldstart.instrument(summary=False)
before = {"torch": "torch" in sys.modules,
          "loaded": sorted(m for m in sys.modules if m.startswith("otel_coldstart.patches."))}
import torch
from safetensors import safe_open
from otel_coldstart.patches._wrapping import ColdstartWrapper
import safetensors, safetensors.torch
from safetensors import _safetensors_rust
after = {"loaded": sorted(m for m in sys.modules if m.startswith("otel_coldstart.patches.")),
         "to_wrapped": isinstance(vars(torch.Tensor).get("to"), ColdstartWrapper),
         # safetensors imported after instrument(): its hook binds one wrapper of the name in
         # its own modules (the only ones that can hold the class then), and later importers
         # take it from the package
         "one_name_wrapper": safe_open is safetensors.safe_open is safetensors.torch.safe_open,
         "name_wrapped": safe_open is not _safetensors_rust.safe_open}
handle = safe_open(sys.argv[1], framework="pt")  # never closed: the end of the start-up ends its span
for key in handle.keys():
    handle.get_tensor(key).to(torch.float16)
after["loaded_at_ready"] = sorted(m for m in sys.modules if m.startswith("otel_coldstart.patches."))
otel_coldstart.ready()
after["to_restored"] = not isinstance(vars(torch.Tensor).get("to"), ColdstartWrapper)
trace_file = otel_coldstart.trace_file()
otel_coldstart.uninstrument()
after["names_restored"] = all(module.safe_open is _safetensors_rust.safe_open
                              for module in (safetensors, safetensors.torch))
print(json.dumps({"before": before, "after": after, "file": trace_file}))
"""


@pytest.mark.process
def test_torch_imported_after_instrument_loads_its_patches_then_and_ends_them_at_ready(tmp_path, small_checkpoint):
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"))
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run([sys.executable, "-c", CHILD, small_checkpoint[0]], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])

    # At instrument(): the import hook only; nothing of torch's, and torch itself not imported.
    assert result["before"]["torch"] is False
    assert result["before"]["loaded"] == ["otel_coldstart.patches._storage", "otel_coldstart.patches.imports"]
    # torch and safetensors arrived: their patch modules with them, patched.
    loaded = set(result["after"]["loaded"])
    assert {f"otel_coldstart.patches.{name}" for name in
            ("torch_load", "safetensors", "tensor_ops", "pinning", "cuda_graphs", "runtime")} <= loaded
    assert not loaded & {"otel_coldstart.patches.vllm", "otel_coldstart.patches.transformers"}
    # A start-up that never reached a GPU never loaded the CUDA copy machinery (tensor_ops and
    # runtime import it on the first call that does: tests/device exercise that path).
    gpu_only = {f"otel_coldstart.patches.{name}" for name in ("_cuda_copy", "_device_windows", "_host_link")}
    assert not set(result["after"]["loaded_at_ready"]) & gpu_only, result["after"]["loaded_at_ready"]
    assert result["after"]["to_wrapped"] is True
    assert result["after"]["to_restored"] is True  # tensor_ops (loaded late) is hot-path: removed at ready()
    assert result["after"]["one_name_wrapper"] is True and result["after"]["name_wrapped"] is True
    assert result["after"]["names_restored"] is True

    spans = read_trace_file(result["file"])
    reads = [s for s in spans if s.name == semconv.phase_span_name(semconv.PHASE_DESERIALIZE)]
    # The handle was never closed: safetensors' end_of_startup (a module loaded after the
    # start-up began) ended its span.
    assert [s.attributes.get(semconv.FILE_PATH) for s in reads] == [small_checkpoint[0]]
    casts = [s for s in spans if s.attributes.get(semconv.CALLS) and s.name.startswith("coldstart.")
             and s.attributes.get(semconv.AGGREGATE)]
    assert casts, [s.name for s in spans]

    # The patch modules were imported inside the host's `import torch`: the plugin's work, not
    # torch's. Not listed among its modules, and their time is the span's own_s.
    imports = [s for s in spans if s.attributes.get(semconv.IMPORT_MODULE) == "torch"]
    assert len(imports) == 1
    torch_import = imports[0]
    own_s = torch_import.attributes.get(semconv.IMPORT_OWN_S)
    assert isinstance(own_s, float) and 0 < own_s * 1e9 < torch_import.duration_ns
    for span in spans:
        if span.name == semconv.phase_span_name(semconv.PHASE_IMPORT):
            assert "otel_coldstart" not in (span.attributes.get(semconv.IMPORT_PACKAGES) or ()), span.attributes
            assert not any(str(m).startswith("otel_coldstart") for m in span.attributes.get(semconv.IMPORT_HEAVIEST) or ())


def test_a_module_loaded_on_first_use_is_imported_by_its_first_attribute_read_then_bound_in_place(
        tmp_path, monkeypatch):
    from otel_coldstart.patches._wrapping import LoadedOnFirstUse

    (tmp_path / "coldstart_first_use_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "coldstart_first_use_probe", raising=False)
    namespace: dict = {}
    namespace["coldstart_first_use_probe"] = stand_in = LoadedOnFirstUse(namespace, "coldstart_first_use_probe")
    assert "coldstart_first_use_probe" not in sys.modules  # made, not imported
    assert stand_in.VALUE == 42  # the first read imports it
    assert namespace["coldstart_first_use_probe"] is sys.modules["coldstart_first_use_probe"]  # then it is bound
    monkeypatch.delitem(sys.modules, "coldstart_first_use_probe")


TORCH_FIRST_CHILD = r"""
import json, sys
import torch, safetensors, safetensors.torch
from safetensors import safe_open
import otel_coldstart
from otel_coldstart import patches
from otel_coldstart.patches._wrapping import ColdstartWrapper

calls = {}
def counting(module):
    original = module.patch
    def patch():
        calls[module.__name__] = calls.get(module.__name__, 0) + 1
        original()
    module.patch = patch
for name in ("torch_load", "safetensors", "tensor_ops", "pinning", "cuda_graphs", "runtime"):
    counting(patches.load(name))

def surface():
    return {"to": isinstance(vars(torch.Tensor).get("to"), ColdstartWrapper),
            "load": isinstance(torch.load, ColdstartWrapper),
            "safe_open": isinstance(safetensors.torch.safe_open, ColdstartWrapper)}

def load():
    with safetensors.safe_open(sys.argv[1], framework="pt") as handle:
        for key in handle.keys():
            handle.get_tensor(key).to(torch.float16)

report = {}
for round_ in ("first", "again"):
    calls.clear()
    otel_coldstart.instrument(summary=False)
    report[round_] = {"calls": dict(calls), "surface": surface()}
    load()
    otel_coldstart.ready()
    report[round_]["file"] = otel_coldstart.trace_file()
    otel_coldstart.uninstrument()
    report[round_]["after_uninstrument"] = surface()
print(json.dumps(report))
"""


@pytest.mark.process
def test_libraries_imported_before_instrument_are_patched_once_and_again_after_uninstrument(
        tmp_path, small_checkpoint):
    """torch and safetensors first (a server's usual order): the first instrument() patches
    each library once (the hooks' registration patches what is imported already), and an
    instrument() after uninstrument() patches them again (those hooks do not fire twice)."""
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"))
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run([sys.executable, "-c", TORCH_FIRST_CHILD, small_checkpoint[0]], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    torch_modules = {f"otel_coldstart.patches.{name}" for name in
                     ("torch_load", "tensor_ops", "pinning", "cuda_graphs", "runtime")}
    # safetensors has two targets imported (the package and safetensors.torch): its hook fires
    # for each at the first registration; the later pass patches each library once.
    assert report["first"]["calls"].get("otel_coldstart.patches.safetensors") == 2
    assert report["again"]["calls"].get("otel_coldstart.patches.safetensors") == 1
    for round_ in ("first", "again"):
        calls = report[round_]["calls"]
        assert {name: calls.get(name) for name in torch_modules} == dict.fromkeys(torch_modules, 1), (round_, calls)
        assert report[round_]["surface"] == {"to": True, "load": True, "safe_open": True}, round_
        assert report[round_]["after_uninstrument"] == {"to": False, "load": False, "safe_open": False}, round_
        spans = read_trace_file(report[round_]["file"])
        reads = [s for s in spans if s.name == semconv.phase_span_name(semconv.PHASE_DESERIALIZE)]
        assert [s.attributes.get(semconv.FILE_PATH) for s in reads] == [small_checkpoint[0]], round_
        casts = [s for s in spans if s.attributes.get(semconv.AGGREGATE) and s.attributes.get(semconv.CALLS)]
        assert casts, (round_, [s.name for s in spans])
