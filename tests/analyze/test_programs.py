"""Issue 39 item 12: whatif, compare and capacity pooled different programs that share a
service name, silently. Two real programs (a server and a batch job) under one
OTEL_SERVICE_NAME, started in fresh processes: each command warns, naming both entry points
and their counts, and suggests ``capacity --by process.command``, which then tells them apart
(and warns no more). On main: no warning, and no entry point in the trace to group by.
``whatif --by`` and ``compare --by`` split their figures per program as ``capacity --by``
groups, and refuse an attribute no start-up has in one line (exit 2)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from analyze_records import root
from otel_coldstart import semconv
from otel_coldstart.analyze.breakdown import breakdowns
from otel_coldstart.analyze.programs import mixed_programs, split_by
from otel_coldstart.cli import main

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
            assert f"{args[0]} --by process.command" in line  # the command run takes --by too
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


@pytest.mark.process
def test_whatif_by_projects_each_program_apart_and_warns_no_more(two_programs, capsys):
    traces, scripts = two_programs
    assert main(["whatif", traces, "--by", "process.command", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "different programs" not in captured.err
    document = json.loads(captured.out)
    assert document["schema"] == "otel-coldstart.whatif-by/1" and document["by"] == ["process.command"]
    groups = {g["value"]: g["report"] for g in document["groups"]}
    assert set(groups) == {scripts["serve.py"], scripts["batch_job.py"]}
    assert groups[scripts["serve.py"]]["baseline"]["n"] == 3 and groups[scripts["batch_job.py"]]["baseline"]["n"] == 2
    # the batch job's 0.6 s build phase against the server's 0.2 s: told apart, not pooled
    build = {value: report["baseline"]["phases"]["build"]["p50_s"] for value, report in groups.items()}
    assert build[scripts["batch_job.py"]] - build[scripts["serve.py"]] >= 0.3, build
    assert main(["whatif", traces, "--by", "process.command"]) == 0
    text = capsys.readouterr().out
    assert text.count("== process.command = ") == 2 and "(3 start-up(s)) ==" in text and "(2 start-up(s)) ==" in text


@pytest.mark.process
def test_compare_by_compares_each_program_with_itself(two_programs, tmp_path, capsys):
    traces, scripts = two_programs
    assert main(["compare", traces, traces, "--by", "process.command", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "different programs" not in captured.err
    groups = {g["value"]: g["report"] for g in json.loads(captured.out)["groups"]}
    assert {value: (r["a"]["startups"], r["b"]["startups"]) for value, r in groups.items()} == \
        {scripts["serve.py"]: (3, 3), scripts["batch_job.py"]: (2, 2)}
    assert all(r["rows"][0]["phase"] == "total" and r["rows"][0]["verdict"] == "within noise" for r in groups.values())
    # B holds only the server's start-ups: the batch job is left out, said so, the server compared
    only_server = tmp_path / "serve-only"
    only_server.mkdir()
    for path in os.listdir(traces):
        text = open(os.path.join(traces, path), encoding="utf-8").read()
        if "batch_job.py" not in text:
            (only_server / path).write_text(text, encoding="utf-8")
    assert main(["compare", traces, str(only_server), "--by", "process.command", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [g["value"] for g in document["groups"]] == [scripts["serve.py"]]
    assert document["notes"] == [f"process.command = {scripts['batch_job.py']!r} left out: A has 2 and B 0 start-up(s) "
                                 "to compare (of 2 and 0)"]


@pytest.mark.process
def test_by_html_is_one_page_with_a_section_per_program(two_programs, tmp_path, capsys):
    from browser import dump_dom

    traces, scripts = two_programs
    for command in (["whatif", traces], ["compare", traces, traces]):
        page = tmp_path / f"{command[0]}.html"
        assert main([*command, "--by", "process.command", "--format", "html", "-o", str(page)]) == 0
        text = page.read_text()
        assert text.count("<!DOCTYPE html>") == 1 and text.count("</html>") == 1
        dom, console = dump_dom(str(page))
        assert 'data-rendered="1"' in dom and not [line for line in console if "Error" in line], console
        assert sorted(re.findall(r'<section class="by" data-attribute="process.command" data-value="([^"]+)"', dom)) == \
            sorted([scripts["batch_job.py"], scripts["serve.py"]])
    capsys.readouterr()


@pytest.mark.process
def test_by_an_attribute_no_start_up_has_is_one_line_and_exit_2(two_programs):
    traces, _ = two_programs
    for args in (("whatif", traces), ("compare", traces, traces)):
        result = subprocess.run([sys.executable, "-m", "otel_coldstart", *args, "--by", "k8s.pod.nmae"],
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 2 and result.stdout == "", result
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("otel-coldstart: error: --by k8s.pod.nmae: no start-up has this attribute; "
                                        "known keys: ") and "process.command" in result.stderr


def test_split_by_groups_each_key_apart_as_capacity_does():
    def startup(model, command):
        resource = {"service.name": "svc", **({semconv.MODEL_NAME: model} if model else {})}
        return root(1000, trace=os.urandom(16).hex(), resource=resource, **{semconv.PROCESS_COMMAND: command})
    startups = breakdowns([startup("llama-8b", "a.py"), startup("mistral-7b", "a.py"), startup(None, "b.py")])
    groups = [(key, value, len(members)) for key, value, members in
              split_by(startups, [semconv.MODEL_NAME, semconv.PROCESS_COMMAND])]
    assert groups == [(semconv.MODEL_NAME, "(not set)", 1), (semconv.MODEL_NAME, "llama-8b", 1),
                      (semconv.MODEL_NAME, "mistral-7b", 1), (semconv.PROCESS_COMMAND, "a.py", 2),
                      (semconv.PROCESS_COMMAND, "b.py", 1)]
