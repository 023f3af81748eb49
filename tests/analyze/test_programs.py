"""Issue 39 item 12: whatif, compare and capacity pooled different programs that share a
service name, silently. Two real programs (a server and a batch job) under one
OTEL_SERVICE_NAME, started in fresh processes: each command warns, naming both entry points
and their counts, and suggests ``capacity --by process.command``, which then tells them apart
(and warns no more). On main: no warning, and no entry point in the trace to group by."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from analyze_records import root
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.programs import mixed_programs

PROGRAM = r"""
import time
import otel_coldstart
otel_coldstart.instrument()
with otel_coldstart.phase("build"):
    time.sleep(SECONDS)
otel_coldstart.ready()
"""


@pytest.fixture(scope="module")
def two_programs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("programs")
    traces = directory / "traces"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_COLDSTART_OUTPUT_DIR": str(traces), "OTEL_COLDSTART_SUMMARY": "0",
                "OTEL_SERVICE_NAME": "recommender"})
    scripts = {}
    for name, seconds in (("serve.py", 0.2), ("batch_job.py", 0.6)):
        scripts[name] = directory / name
        scripts[name].write_text(PROGRAM.replace("SECONDS", str(seconds)))
    processes = [subprocess.Popen([sys.executable, str(scripts[name])], env=env, cwd=str(directory),
                                  stderr=subprocess.PIPE, text=True)
                 for name in ("serve.py", "serve.py", "serve.py", "batch_job.py", "batch_job.py")]
    for process in processes:
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
    return str(traces), {name: str(path) for name, path in scripts.items()}


def _cli(*args) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "otel_coldstart", *args], capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result


@pytest.mark.process
def test_each_command_warns_naming_the_programs_and_by_tells_them_apart(two_programs):
    traces, scripts = two_programs
    for args in (("whatif", traces), ("compare", traces, traces), ("capacity", traces),
                 ("capacity", traces, "--by", "host.name")):
        err = _cli(*args).stderr
        lines = [line for line in err.splitlines() if "different programs" in line]
        assert len(lines) == (2 if args[0] == "compare" else 1), err  # compare: side A and side B
        for line in lines:
            assert "service 'recommender' holds 2 different programs by process.command" in line, err
            assert f"{scripts['serve.py']!r} (3 start-up(s))" in line and f"{scripts['batch_job.py']!r} (2" in line
            assert "capacity --by process.command" in line
    grouped = _cli("capacity", traces, "--by", "process.command", "--format", "json")
    assert "different programs" not in grouped.stderr
    groups = {g["value"]: g["startups"] for g in json.loads(grouped.stdout)["groups"] if g["attribute"]}
    assert groups == {scripts["serve.py"]: 3, scripts["batch_job.py"]: 2}


def test_model_name_tells_programs_apart_and_one_program_is_not_warned():
    def startup(model, command="serve.py", service="svc"):
        resource = {"service.name": service, **({semconv.MODEL_NAME: model} if model else {})}
        return root(1000, trace=os.urandom(16).hex(), resource=resource, **{semconv.PROCESS_COMMAND: command})
    same = breakdowns([startup("llama-8b"), startup("llama-8b"), startup(None)])
    assert mixed_programs(same) == []
    models = breakdowns([startup("llama-8b"), startup("llama-8b"), startup("mistral-7b")])
    (warning,) = mixed_programs(models)
    assert "by coldstart.model.name: 'llama-8b' (2 start-up(s)), 'mistral-7b' (1 start-up(s))" in warning
    assert mixed_programs(models, grouped_by=[semconv.MODEL_NAME]) == []
    # two services, each one program: nothing to say
    apart = breakdowns([startup(None, "a.py", "one"), startup(None, "b.py", "two")])
    assert mixed_programs(apart) == []
