"""patches/vllm.py: the first request the front end finishes, marked on vLLM's
``OutputProcessor`` (``add_request`` / ``process_outputs``), proved as the ready points are
(test_fw_vllm_ready_points.py): on a stand-in ``vllm`` package laid out as vLLM 0.x is, in
fresh processes (vLLM itself is not installable on the CPU CI machine; the real one is
checked by scripts/gpu_check_vllm.py on a GPU machine). The stand-in's OutputProcessor keeps
vLLM's control flow: request states by id, outputs carrying ``finish_reason``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from framework_checks import stand_in_package
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.readers import read_trace_file
from otel_coldstart.patches import vllm as vllm_patch

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

ASYNC_LLM = textwrap.dedent("""
    import torch

    class AsyncLLM:
        def __init__(self):
            torch.ones(16).to(torch.float16)  # loading weights, as far as the trace cares
""")

OUTPUT_PROCESSOR = textwrap.dedent("""
    class EngineCoreOutput:
        def __init__(self, request_id, new_token_ids, finish_reason=None):
            self.request_id = request_id
            self.new_token_ids = new_token_ids
            self.finish_reason = finish_reason

    class OutputProcessor:
        def __init__(self):
            self.request_states = {}

        def add_request(self, request, queue=None):
            if request in self.request_states:
                raise ValueError(f"Request id {request} already running.")
            self.request_states[request] = []

        def process_outputs(self, engine_core_outputs, iteration_stats=None):
            finished = []
            for output in engine_core_outputs:
                tokens = self.request_states.get(output.request_id)
                if tokens is None:
                    raise KeyError(output.request_id)
                tokens.extend(output.new_token_ids)
                if output.finish_reason is not None:
                    finished.append((output.request_id, self.request_states.pop(output.request_id)))
            return finished
""")


@pytest.fixture
def fake_vllm(tmp_path):
    return stand_in_package(tmp_path / "site", {"vllm/v1/engine/async_llm.py": ASYNC_LLM,
                                                "vllm/v1/engine/output_processor.py": OUTPUT_PROCESSOR})


SCRIPT = textwrap.dedent("""
    import json, time
    import otel_coldstart
    from otel_coldstart import vllm_plugin
    from otel_coldstart.controller import CONTROLLER
    vllm_plugin.register()
    from vllm.v1.engine import output_processor as op
    from vllm.v1.engine.async_llm import AsyncLLM
    originals = {name: op.OutputProcessor.__dict__[name].__wrapped__ for name in ("add_request", "process_outputs")}
    report = {"patched": all(hasattr(op.OutputProcessor.__dict__[n], "__wrapped__") for n in originals)}
    processor = op.OutputProcessor()
    engine = AsyncLLM()
    report["ready"] = CONTROLLER.session.ended
    time.sleep(0.02)  # the replica waits for its first request
    processor.add_request("req-0")
    processor.add_request("req-1")
    try:
        processor.process_outputs([op.EngineCoreOutput("nobody", [1])])
    except KeyError as error:
        report["host_error"] = repr(error)  # vLLM's exception, untouched, and not an end
    report["first_token"] = processor.process_outputs([op.EngineCoreOutput("req-0", [7]),
                                                       op.EngineCoreOutput("req-1", [8])])
    time.sleep(0.02)  # decoding
    report["finished"] = processor.process_outputs([op.EngineCoreOutput("req-1", [9], "stop")])
    report["restored"] = all(op.OutputProcessor.__dict__[n] is originals[n] for n in originals)
    processor.add_request("req-2")
    processor.process_outputs([op.EngineCoreOutput("req-2", [1], "length")])
    report["trace"] = otel_coldstart.trace_file()
    print(json.dumps(report))
""")


def test_the_front_end_marks_its_first_finished_request(tmp_path, fake_vllm):
    env = dict(os.environ, PYTHONPATH=str(fake_vllm), OTEL_COLDSTART_VLLM="1", OTEL_COLDSTART_SUMMARY="0",
               OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"))
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=str(tmp_path), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["patched"] is True and report["ready"] is True
    assert report["host_error"] == "KeyError('nobody')"
    assert report["first_token"] == [] and report["finished"] == [["req-1", [8, 9]]]  # vLLM's results, untouched
    assert report["restored"] is True  # steady-state serving calls vLLM's own methods
    spans = read_trace_file(report["trace"])
    [b] = breakdowns(spans)
    request = b.first_request
    assert request is not None and request.status == "ok" and request.source == "vllm"
    assert request.start_ns >= b.root.end_ns
    assert request.duration_ns >= 20_000_000  # from the first add_request to the end of the finishing step
    assert len([s for s in spans if s.name == semconv.SPAN_FIRST_REQUEST]) == 1


def test_targets_include_the_output_processor():
    assert vllm_patch.OUTPUT_PROCESSOR[0] in vllm_patch.TARGETS
    assert "vllm" not in sys.modules
