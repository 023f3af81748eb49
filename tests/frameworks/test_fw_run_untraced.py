"""``otel-coldstart run`` with a command whose Python cannot import otel_coldstart (a system or
pyenv Python, a bare virtualenv, a pipx install of the tool): said loudly at the time, the
command's status kept, and a launch trace that ``analyze`` explains instead of "no
model.startup span". Real second interpreters, fresh processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from framework_checks import clean_env, read_trace_dir, run_python
from otel_coldstart import semconv

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A virtualenv with nothing installed: its python cannot import otel_coldstart."""
    directory = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    python = str(directory / "bin" / "python")
    probe = subprocess.run([python, "-c", "import otel_coldstart"], capture_output=True, cwd=str(directory))
    assert probe.returncode != 0  # the premise: this interpreter lacks the package
    return python


def _system_python_without_the_package() -> list[str]:
    """/usr/bin/python3 as well, where it exists and cannot import the package (a system Python)."""
    path = "/usr/bin/python3"
    if not os.path.exists(path):
        return []
    probe = subprocess.run([path, "-c", "import otel_coldstart"], capture_output=True, cwd="/")
    return [path] if probe.returncode != 0 else []


def _run(args, tmp_path, **env):
    return run_python(["-m", "otel_coldstart", "run", *args], clean_env(OTEL_COLDSTART_SUMMARY="0", **env),
                      cwd=str(tmp_path), timeout=300)


def _analyze(path):
    return run_python(["-m", "otel_coldstart", "analyze", path], clean_env(), cwd=os.path.dirname(path), timeout=300)


def _check_untraced(interpreter: str, tmp_path) -> None:
    traces = tmp_path / "traces"
    result = _run(["--output-dir", str(traces), "--", interpreter, "-c", "import sys; sys.exit(3)"], tmp_path)
    assert result.returncode == 3  # the child's status, untouched
    assert "Traceback" not in result.stderr
    # At the time, from the child: which interpreter, why, what to do.
    assert f"this process is NOT traced: {interpreter}" in result.stderr
    assert "cannot import otel_coldstart" in result.stderr and "-m pip install otel-coldstart" in result.stderr
    # At the end, from the launcher: nothing was traced, and with which Python it would be.
    assert "nothing was traced" in result.stderr and sys.executable in result.stderr
    spans = read_trace_dir(str(traces))
    (launch,) = [s for s in spans if s.name == semconv.SPAN_LAUNCH]
    assert not [s for s in spans if s.is_root]
    assert launch.attributes[semconv.LAUNCH_PROCESSES_STARTED] == 0
    (why,) = launch.attributes[semconv.LAUNCH_PROCESSES_NOT_STARTED]
    assert why.startswith(f"{interpreter} cannot import otel_coldstart (")
    (trace_file,) = os.listdir(traces)
    analyzed = _analyze(str(traces / trace_file))
    assert analyzed.returncode == 5
    assert analyzed.stderr.strip().splitlines() == [
        f"otel-coldstart: error: {traces / trace_file}: "
        f"the child process never started the plugin: {why}"]


def test_a_bare_virtualenv_python_is_reported_and_explained(bare_python, tmp_path):
    _check_untraced(bare_python, tmp_path)


@pytest.mark.parametrize("interpreter", _system_python_without_the_package())
def test_the_system_python_is_reported_and_explained(interpreter, tmp_path):
    _check_untraced(interpreter, tmp_path)


def test_without_a_launch_span_it_is_still_said(bare_python, tmp_path):
    result = _run(["--no-launch-span", "--output-dir", str(tmp_path / "t"), "--", bare_python, "-c", "pass"], tmp_path)
    assert result.returncode == 0
    assert "this process is NOT traced" in result.stderr and "nothing was traced" in result.stderr


def test_a_traced_command_says_nothing_and_counts_its_process(tmp_path):
    traces = tmp_path / "traces"
    result = _run(["--output-dir", str(traces), "--", sys.executable, "-c", "import otel_coldstart; "
                   "otel_coldstart.ready()"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr
    spans = read_trace_dir(str(traces))
    (launch,) = [s for s in spans if s.name == semconv.SPAN_LAUNCH]
    assert launch.attributes[semconv.LAUNCH_PROCESSES_STARTED] == 1
    assert semconv.LAUNCH_PROCESSES_NOT_STARTED not in launch.attributes
    assert len([s for s in spans if s.is_root]) == 1


def test_a_command_that_runs_no_python_is_explained(tmp_path):
    traces = tmp_path / "traces"
    result = _run(["--output-dir", str(traces), "--", "sh", "-c", "exit 4"], tmp_path)
    assert result.returncode == 4
    assert "nothing was traced: no Python process of sh ran the plugin's bootstrap" in result.stderr
    (trace_file,) = os.listdir(traces)
    analyzed = _analyze(str(traces / trace_file))
    assert analyzed.returncode == 5 and "the child process never started the plugin" in analyzed.stderr


def test_a_deliberately_disabled_process_is_not_a_warning(tmp_path):
    result = _run(["--output-dir", str(tmp_path / "t"), "--", sys.executable, "-c", "pass"], tmp_path,
                  OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="coldstart")
    assert result.returncode == 0 and "WARNING" not in result.stderr


def test_a_partly_traced_command_is_a_warning_in_analyze(bare_python, tmp_path):
    """One process traced, one not (a script that starts a second interpreter): the trace has
    a start-up, and analyze names the process that was missed."""
    traces = tmp_path / "traces"
    script = (f"import subprocess, otel_coldstart; subprocess.run([{bare_python!r}, '-c', 'pass']); "
              "otel_coldstart.ready()")
    result = _run(["--output-dir", str(traces), "--", sys.executable, "-c", script], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 Python process(es) of the command were not traced" in result.stderr
    analyzed = run_python(["-m", "otel_coldstart", "analyze", str(traces)], clean_env(), cwd=str(tmp_path))
    assert analyzed.returncode == 0, analyzed.stderr
    assert f"were not traced: {bare_python} cannot import otel_coldstart" in analyzed.stderr


def test_launch_notes_from_a_hostile_trace_stay_one_printable_line():
    from otel_coldstart.analyze.model import Span
    from otel_coldstart.cli._run_notes import explain_no_startup, untraced_warnings

    def launch(started, reasons):
        return Span("ab" * 16, "cd" * 8, None, "coldstart.launch\n\x1b[31m", 1, 2,
                    {semconv.LAUNCH_PROCESSES_STARTED: started, semconv.LAUNCH_PROCESSES_NOT_STARTED: reasons})

    evil = ("x\n\x1b[2Jcannot import " + "y" * 5000,)
    (why,) = [explain_no_startup([launch(0, evil)])]
    (line,) = untraced_warnings([launch(1, evil)])
    for text in (why, line):
        assert "\n" not in text and "\x1b" not in text and len(text) < 500
    assert explain_no_startup([launch(True, evil)]) is None  # a bool is not a count
    assert untraced_warnings([launch(2, "not a list")]) == []
