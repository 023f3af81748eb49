"""vLLM's plugin hook and its lowercase ``traceparent``, proved without vLLM, plus the real
thing where vLLM is installed (it is not on the CPU CI machine: vLLM 0.33 needs torch 2.14
and CUDA, and this project pins the CPU torch 2.13)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from opentelemetry import trace

from framework_checks import by_phase, clean_env, read_trace_dir, run_python
from otel_coldstart import controller, semconv, vllm_plugin

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"

# What vLLM's load_general_plugins does in each process it starts (vllm/plugins/__init__.py):
# every function registered under the group is loaded and called, once per process.
VLLM_LIKE_PROCESS = textwrap.dedent("""
    import json, os, sys
    from importlib.metadata import entry_points
    for plugin in entry_points(group="vllm.general_plugins"):
        plugin.load()()
    import otel_coldstart
    instrumented = otel_coldstart.ColdstartInstrumentor().is_instrumented_by_opentelemetry
    import torch
    from safetensors.torch import save_file, load_file
    save_file({"w": torch.arange(64, dtype=torch.float32)}, sys.argv[1])
    load_file(sys.argv[1])["w"].to(torch.float16)
    otel_coldstart.ready()
    print(json.dumps({"instrumented": instrumented}))
""")


def test_entry_point_is_registered_and_loads_register(tmp_path):
    # In a fresh process outside the repository, as vLLM would look it up.
    probe = ("import json; from importlib.metadata import entry_points; "
             "import otel_coldstart.vllm_plugin as p; "
             "found = [e for e in entry_points(group='vllm.general_plugins') if e.name == 'coldstart']; "
             "print(json.dumps([e.value for e in found] + [found[0].load() is p.register] if found else []))")
    result = run_python(["-c", probe], clean_env(), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == ["otel_coldstart.vllm_plugin:register", True]


def _run_like_vllm(tmp_path, **env):
    traces = tmp_path / "traces"
    script = tmp_path / "vllm_like.py"
    script.write_text(VLLM_LIKE_PROCESS)
    result = run_python([str(script), str(tmp_path / "w.safetensors")],
                        clean_env(OTEL_COLDSTART_OUTPUT_DIR=str(traces), OTEL_COLDSTART_SUMMARY="0", **env),
                        cwd=str(tmp_path))  # not the repo: its stale build metadata must not shadow the install
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), traces


def test_worker_process_nests_under_vllms_lowercase_traceparent(tmp_path):
    report, traces = _run_like_vllm(tmp_path, traceparent=TRACEPARENT, OTEL_COLDSTART_VLLM="1")
    assert report["instrumented"]
    spans = read_trace_dir(str(traces))
    roots = [s for s in spans if s.is_root]
    assert len(roots) == 1
    assert (roots[0].trace_id, roots[0].parent_id) == (PARENT_TRACE, PARENT_SPAN)
    assert roots[0].attributes[semconv.READY] is True
    assert len(by_phase(spans, semconv.PHASE_DESERIALIZE)) == 1
    # The only parent outside this process is vLLM's span in the process that spawned it.
    assert {s.parent_id for s in spans} - {s.span_id for s in spans} == {PARENT_SPAN}


def test_installing_the_plugin_changes_nothing_unless_asked(tmp_path):
    report, traces = _run_like_vllm(tmp_path, traceparent=TRACEPARENT)
    assert not report["instrumented"]
    assert not traces.exists()


def test_disabled_instrumentations_turns_the_plugin_off(tmp_path):
    report, traces = _run_like_vllm(tmp_path, OTEL_COLDSTART_VLLM="1", OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="x,coldstart")
    assert not report["instrumented"]


@pytest.mark.parametrize("upper_trace, expected", [(PARENT_TRACE, "lower"), ("1" * 32, "upper")])
def test_both_spellings(monkeypatch, upper_trace, expected):
    """vLLM derives its lowercase traceparent from TRACEPARENT: same trace, nearer parent.
    One from another trace is stray, and the spec's spelling wins."""
    upper = f"00-{upper_trace}-{'a' * 16}-01"
    monkeypatch.setenv("TRACEPARENT", upper)
    monkeypatch.setenv("traceparent", TRACEPARENT)
    parent = trace.get_current_span(controller._launcher_context()).get_span_context()
    chosen = TRACEPARENT if expected == "lower" else upper
    assert (format(parent.trace_id, "032x"), format(parent.span_id, "016x")) == tuple(chosen.split("-")[1:3])


def test_real_vllm_loads_the_plugin():
    vllm_plugins = pytest.importorskip(
        "vllm.plugins", reason="vLLM is not installed (0.33 needs torch 2.14 + CUDA); scripts/gpu_check_vllm.py "
                               "checks it on a GPU machine")
    os.environ["OTEL_COLDSTART_VLLM"] = "1"
    try:
        assert "coldstart" in vllm_plugins.load_plugins_by_group(vllm_plugins.DEFAULT_PLUGINS_GROUP)
    finally:
        del os.environ["OTEL_COLDSTART_VLLM"]


def test_forked_process_gets_its_own_startup(tmp_path):
    """vLLM forks its engine core from an instrumented front end: the child must not end (and
    export a copy of) the parent's root, and must get a start-up of its own."""
    script = tmp_path / "forking.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        from importlib.metadata import entry_points
        def load_general_plugins():  # what vLLM runs in every process it starts
            for plugin in entry_points(group="vllm.general_plugins"):
                plugin.load()()
        load_general_plugins()
        import torch
        from safetensors.torch import save_file, load_file
        import otel_coldstart
        path = sys.argv[1]
        save_file({"w": torch.arange(64, dtype=torch.float32)}, path)
        pid = os.fork()
        if pid == 0:
            load_general_plugins()
            load_file(path)["w"].to(torch.float16)
            otel_coldstart.ready()
            os._exit(0)  # as multiprocessing's forked children exit: no atexit
        _, status = os.waitpid(pid, 0)
        otel_coldstart.ready()
        print(json.dumps({"child": pid, "status": status}))
    """))
    result = run_python([str(script), str(tmp_path / "w.safetensors")],
                        clean_env(OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), OTEL_COLDSTART_SUMMARY="0",
                                  OTEL_COLDSTART_VLLM="1"), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["status"] == 0
    spans = read_trace_dir(str(tmp_path / "traces"))
    roots = [s for s in spans if s.is_root]
    assert len(roots) == 2 and len({r.span_id for r in roots}) == 2
    child_root = next(r for r in roots if r.resource["process.pid"] == report["child"])
    assert child_root.attributes[semconv.READY] is True
    child_shards = [s for s in by_phase(spans, semconv.PHASE_DESERIALIZE)
                    if s.resource["process.pid"] == report["child"]]
    assert len(child_shards) == 1
    assert all(r.attributes[semconv.READY] is True for r in roots)


def test_exports_where_vllm_does(monkeypatch):
    """vLLM sends OTLP over gRPC unless a protocol is set (the spec's default is http)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4317")
    provider = vllm_plugin._provider_like_vllms()
    try:
        exporters = [p.span_exporter for p in provider._active_span_processor._span_processors]
        assert [type(e) for e in exporters] == [GrpcExporter]
    finally:
        provider.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    assert vllm_plugin._provider_like_vllms() is None  # our usual choice honours the protocol
