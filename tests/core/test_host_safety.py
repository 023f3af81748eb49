"""The host comes first: its exceptions reach it unchanged, our errors never do, and
patching is idempotent and exactly reversible."""

from __future__ import annotations

import subprocess
import sys
import traceback

import pytest
import torch
import wrapt
from opentelemetry import trace
from safetensors import safe_open
from safetensors.torch import load_file

import otel_coldstart
from otel_coldstart import _errors, semconv
from otel_coldstart.patches import _files, _wrapping

# wrapt 2.x: BaseObjectProxy is the base of every proxy; wrapt 1.x: ObjectProxy is.
_PROXY_BASE = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def _tail_frames(exc: BaseException) -> list[str]:
    return [f.name for f in traceback.extract_tb(exc.__traceback__)][-2:]


def test_torch_load_exception_reaches_caller_unchanged_and_span_records_it(traced, tmp_path):
    missing = str(tmp_path / "missing.bin")
    otel_coldstart.uninstrument()
    with pytest.raises(FileNotFoundError) as plain:
        torch.load(missing)
    traced.reinstrument()
    with pytest.raises(FileNotFoundError) as instrumented:
        torch.load(missing)
    assert str(instrumented.value) == str(plain.value)
    assert type(instrumented.value) is type(plain.value)
    # The host's own innermost frames are all there (our wrapper adds frames above them).
    assert _tail_frames(instrumented.value) == _tail_frames(plain.value)
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.status.status_code.name == "ERROR"
    assert any(e.name == "exception" for e in span.events)


def test_safetensors_errors_reach_caller_unchanged(traced, small_checkpoint, tmp_path):
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(Exception) as instrumented:
        load_file(str(corrupt))
    with safe_open(small_checkpoint[0], framework="pt") as handle:
        with pytest.raises(Exception) as missing_key:
            handle.get_tensor("no.such.tensor")
    otel_coldstart.uninstrument()
    with pytest.raises(Exception) as plain:
        load_file(str(corrupt))
    assert type(instrumented.value) is type(plain.value)
    assert str(instrumented.value) == str(plain.value)
    assert "no.such.tensor" in str(missing_key.value)


def test_exception_inside_a_with_block_marks_the_shard_span(traced, small_checkpoint):
    with pytest.raises(KeyError, match="boom"):
        with safe_open(small_checkpoint[0], framework="pt") as handle:
            handle.get_tensor(next(iter(handle.keys())))
            raise KeyError("boom")
    (span,) = traced.by_phase(semconv.PHASE_DESERIALIZE)
    assert span.status.status_code.name == "ERROR"


@pytest.mark.internal_errors_expected
def test_internal_error_never_reaches_the_host(traced, small_checkpoint, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected bug in otel-coldstart")

    monkeypatch.setattr(_files.FileRead, "__init__", broken)
    monkeypatch.setattr(_files.probes, "resident_ratio", broken)
    monkeypatch.setattr(_files.probes, "file_residency", broken)  # reached from the safe_open name wrapper
    loaded = load_file(small_checkpoint[0])
    with safe_open(small_checkpoint[1], framework="pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    casted = {k: v.to(torch.float16) for k, v in tensors.items()}
    assert loaded and tensors and casted
    assert any("injected bug" in e for e in _errors.INTERNAL_ERRORS)


@pytest.mark.internal_errors_expected
def test_a_failing_phase_or_first_request_never_reaches_the_host(traced, monkeypatch):
    # The package face reports its own failures without importing _errors at import time.
    from otel_coldstart import first_token
    from otel_coldstart.session import StartupSession

    def broken(*args, **kwargs):
        raise RuntimeError("injected bug in otel-coldstart")

    class BrokenRequest:
        end = broken

    ran = []
    with monkeypatch.context() as patched:
        patched.setattr(StartupSession, "start_container", broken)
        with otel_coldstart.phase("build_model"):
            ran.append("phase, start failed")
    with monkeypatch.context() as patched:
        patched.setattr(StartupSession, "_end_container", broken)  # after the span's context is detached
        with otel_coldstart.phase("build_model"):
            ran.append("phase, end failed")
    for begin in (broken, lambda session: BrokenRequest()):
        monkeypatch.setattr(otel_coldstart, "_first_request_seen", False)
        monkeypatch.setattr(first_token, "begin", begin)
        with otel_coldstart.first_request():
            ran.append("first request")
    assert len(ran) == 4
    assert trace.get_current_span() is trace.INVALID_SPAN  # no phase left current
    for site in ("phase start", "phase end", "first request start", "first request end"):
        assert any(e.startswith(f"{site}: RuntimeError: injected bug") for e in _errors.INTERNAL_ERRORS), site


@pytest.mark.process
def test_conftest_guard_fails_a_test_on_internal_errors():
    # The guard above must really fail: run a tiny test file in a subprocess.
    code = (
        "from otel_coldstart._errors import report_internal_error\n"
        "def test_x():\n"
        "    try:\n"
        "        raise ValueError('x')\n"
        "    except ValueError:\n"
        "        report_internal_error('here')\n"
    )
    import os
    import tempfile

    here = os.path.dirname(os.path.dirname(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "test_guard.py"), "w") as handle:
            handle.write(code)
        with open(os.path.join(tmp, "conftest.py"), "w") as handle:
            handle.write(open(os.path.join(here, "conftest.py")).read())
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tmp],
                                capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert "otel-coldstart internal errors" in result.stdout


def _patched_objects():
    import safetensors.torch
    from safetensors import _safetensors_rust

    return {
        "torch.load": lambda: torch.load,
        "torch.serialization.load": lambda: torch.serialization.load,
        "Tensor.to": lambda: torch.Tensor.to,
        "Tensor.copy_": lambda: torch.Tensor.copy_,
        "Module.to": lambda: torch.nn.Module.to,
        "load_file": lambda: safetensors.torch.load_file,
        "safe_open.get_tensor": lambda: vars(_safetensors_rust.safe_open)["get_tensor"],
        "safe_open.__enter__": lambda: vars(_safetensors_rust.safe_open)["__enter__"],
        "safetensors.safe_open": lambda: safetensors.safe_open,
        "safetensors.torch.safe_open": lambda: safetensors.torch.safe_open,
    }


def test_instrument_is_idempotent_and_uninstrument_restores_identity():
    otel_coldstart.uninstrument()
    before = {name: get() for name, get in _patched_objects().items()}
    for _ in range(3):
        otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False,
                                  tracer_provider=_noop_provider())
    during = {name: get() for name, get in _patched_objects().items()}
    for name, obj in during.items():
        assert obj is not before[name], f"{name} not patched"
        layers = 0
        while isinstance(obj, _PROXY_BASE):
            layers += 1
            obj = obj.__wrapped__
        assert layers == 1, f"{name} has {layers} wrapt layers"
        assert obj is before[name]
    otel_coldstart.uninstrument()
    otel_coldstart.uninstrument()
    after = {name: get() for name, get in _patched_objects().items()}
    for name in before:
        assert after[name] is before[name], name


def test_ready_removes_every_per_tensor_patch():
    otel_coldstart.uninstrument()
    originals = {"to": torch.Tensor.to, "copy_": torch.Tensor.copy_, "Module.to": torch.nn.Module.to}
    otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False,
                              tracer_provider=_noop_provider())
    assert torch.Tensor.to is not originals["to"]
    otel_coldstart.ready()
    try:
        assert torch.Tensor.to is originals["to"]
        assert torch.Tensor.copy_ is originals["copy_"]
        assert torch.nn.Module.to is originals["Module.to"]
        assert isinstance(vars(torch.serialization)["load"], _wrapping.ColdstartWrapper)  # loads stay
    finally:
        otel_coldstart.uninstrument()


def _noop_provider():
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


IMPORT_ORDER_SCRIPT = r"""
import sys, os
order = sys.argv[1]
import otel_coldstart
assert "torch" not in sys.modules, "importing otel_coldstart imported torch"
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter(); provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))
if order == "before":
    import torch, safetensors.torch
    otel_coldstart.instrument(tracer_provider=provider, summary=False)
else:
    otel_coldstart.instrument(tracer_provider=provider, summary=False)
    assert "torch" not in sys.modules, "instrument() imported torch"
    import torch, safetensors.torch
torch.save({"w": torch.ones(4)}, sys.argv[2] + "/a.bin")
safetensors.torch.save_file({"w": torch.ones(4)}, sys.argv[2] + "/a.safetensors")
torch.load(sys.argv[2] + "/a.bin")
safetensors.torch.load_file(sys.argv[2] + "/a.safetensors")
torch.ones(4, dtype=torch.bfloat16).to(torch.float16)
otel_coldstart.ready()
names = sorted(s.name for s in exporter.get_finished_spans())
print(" ".join(names))
"""


@pytest.mark.process
@pytest.mark.parametrize("order", ["before", "after"])
def test_works_whether_torch_is_imported_before_or_after(tmp_path, order):
    result = subprocess.run([sys.executable, "-c", IMPORT_ORDER_SCRIPT, order, str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    names = result.stdout.split()
    assert names.count("coldstart.deserialize") == 2
    assert names.count("coldstart.cast") == 1
    assert names.count("model.startup") == 1
    # The process start to instrument(), and (patches/imports.py) the imports after it: torch's
    # when it is imported after instrument().
    assert names.count("coldstart.import") >= (2 if order == "after" else 1)


@pytest.mark.internal_errors_expected
def test_instrument_that_cannot_set_up_leaves_the_host_running(tmp_path, small_checkpoint):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    otel_coldstart.uninstrument()
    otel_coldstart.instrument(output_dir=str(blocker / "traces"), summary=False, handle_sigterm=False)
    try:
        assert otel_coldstart.trace_file() is None
        assert load_file(small_checkpoint[0])  # the host's work goes on, untraced
        assert any("instrument" in e for e in _errors.INTERNAL_ERRORS)
    finally:
        otel_coldstart.uninstrument()


def test_a_bad_option_is_the_callers_error():
    otel_coldstart.uninstrument()
    with pytest.raises(ValueError, match="start_at"):
        otel_coldstart.instrument(start_at="yesterday")
    assert otel_coldstart.trace_file() is None
