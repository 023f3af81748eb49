"""scripts/gpu_check_vllm.py on CPU: its OTLP receiver and its checks, with a real exporter
and a real instrumented load, so the GPU run only has vLLM itself left to prove."""

from __future__ import annotations

import importlib.util
import os

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import otel_coldstart
from framework_checks import REPO, clean_env, run_python
from otel_coldstart import semconv

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

SCRIPT = os.path.join(REPO, "scripts", "gpu_check_vllm.py")


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_vllm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_receiver_and_checks_on_a_real_traced_load(gpu_check, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    save_file({"w": torch.ones(32, 32)}, str(model_dir / "model.safetensors"))
    otel_coldstart.uninstrument()
    with gpu_check.SpanReceiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
        vllm_tracer = provider.get_tracer("vllm.model_executor.model_loader.default_loader")
        try:
            # As in a vLLM worker: the plugin's instrument() runs inside vLLM's "Worker init".
            with vllm_tracer.start_as_current_span("Worker init"):
                otel_coldstart.instrument(tracer_provider=provider, start_at="instrument", summary=False,
                                          handle_sigterm=False)
                with vllm_tracer.start_as_current_span("Load weights"):
                    load_file(str(model_dir / "model.safetensors"))["w"].to(torch.float16)
                otel_coldstart.ready()
        finally:
            otel_coldstart.uninstrument()
            provider.shutdown()
        spans = receiver.spans()
    # (imports after instrument() are spans of their own, patches/imports.py: not the point here)
    names = sorted(s.name for s in spans if semconv.IMPORT_MODULES not in s.attributes)
    assert names == ["Load weights", "Worker init", "coldstart.cast", "coldstart.deserialize", "model.startup"]
    # Everything holds on CPU except the copies to a GPU there is none of.
    assert gpu_check.check(spans, str(model_dir), 1) == ["no host-to-device bytes recorded"]
    # and the checks do fail: the shard outside vLLM's span, a second tensor-parallel rank missing
    assert any("'Load weights'" in f for f in gpu_check.check(
        [s if s.name != "coldstart.deserialize" else _reparent(s, None) for s in spans], str(model_dir), 1))
    assert any("expected 2 shard span" in f for f in gpu_check.check(spans, str(model_dir), 2))


def _reparent(span, parent_id):
    from dataclasses import replace

    return replace(span, parent_id=parent_id)


def test_without_vllm_it_says_what_is_missing(tmp_path):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    result = run_python([SCRIPT], clean_env(), cwd=str(tmp_path))
    assert result.returncode == 4
    assert result.stderr.strip().startswith("gpu_check_vllm: missing dependency: vllm")
    assert len(result.stderr.strip().splitlines()) == 1


def test_first_request_check_on_a_real_first_request(gpu_check, tmp_path):
    """check_first_request on the spans of a real start-up and first request (as vLLM's front
    end has them once the plugin marks it), and that it fails where it must."""
    from dataclasses import replace

    from otel_coldstart import first_token, session as _session

    otel_coldstart.uninstrument()
    with gpu_check.SpanReceiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
        try:
            otel_coldstart.instrument(tracer_provider=provider, start_at="instrument", summary=False,
                                      handle_sigterm=False)
            otel_coldstart.ready()
            request = first_token.begin(_session.ACTIVE, first_token.SOURCE_VLLM)
            request.end()
        finally:
            otel_coldstart.uninstrument()
            provider.shutdown()
        spans = receiver.spans()
    failures, figures = gpu_check.check_first_request(spans)
    assert failures == [] and figures["time_to_first_token_s"] > figures["front_end_ready_s"]
    marked_by_hand = [replace(s, attributes={**s.attributes, semconv.FIRST_REQUEST_SOURCE: "first_request()"})
                      if s.name == semconv.SPAN_FIRST_REQUEST else s for s in spans]
    assert any("not vllm" in f for f in gpu_check.check_first_request(marked_by_hand)[0])
    assert gpu_check.check_first_request([s for s in spans if s.name != semconv.SPAN_FIRST_REQUEST])[0] == [
        "expected 1 coldstart.first_request span, got 0"]
