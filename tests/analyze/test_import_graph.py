"""Issue 22.2: the reader is not the runtime. Importing the analyzer, or running
``otel-coldstart analyze --help``, loads no patch, no wrapt, no controller and no
OpenTelemetry; the package face is lazy and nothing imports back up to it.

Checked as a user meets it: fresh processes, the installed console script, and Python's own
import log (``PYTHONPROFILEIMPORTTIME``), not a list of modules we think we import.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import shutil
import subprocess
import sys

import pytest

import otel_coldstart

PACKAGE_DIR = os.path.dirname(otel_coldstart.__file__)


def _runtime(modules) -> list[str]:
    """The runtime among ``modules``: what the analyzer must never load."""
    return sorted(m for m in modules if m == "wrapt" or m.startswith(("wrapt.", "opentelemetry"))
                  or m in ("otel_coldstart.controller", "otel_coldstart.session", "otel_coldstart.ending",
                           "otel_coldstart.export", "otel_coldstart.own_tracing", "otel_coldstart.inflight",
                           "otel_coldstart.metrics", "otel_coldstart.recorder")
                  or m == "otel_coldstart.patches" or m.startswith("otel_coldstart.patches."))


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONPROFILEIMPORTTIME"}


@pytest.mark.process
def test_importing_every_analyzer_module_loads_no_runtime():
    analyzer = sorted(name for _, name, _ in pkgutil.walk_packages(
        [os.path.join(PACKAGE_DIR, "analyze")], prefix="otel_coldstart.analyze."))
    assert "otel_coldstart.analyze.breakdown" in analyzer and "otel_coldstart.analyze.findings" in analyzer
    code = ("import importlib, sys\n"
            f"for name in {['otel_coldstart.analyze', *analyzer, 'otel_coldstart.cli']!r}:\n"
            "    importlib.import_module(name)\n"
            "print('\\n'.join(sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "otel_coldstart.analyze.render_html" in loaded
    assert _runtime(loaded) == []
    # The live sources (http.client, ssl) are not the analyzer's either.
    assert not [m for m in loaded if m.startswith("otel_coldstart.sources.") or m in ("http.client", "ssl")]


def _imported_by(argv: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    env = {**_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    modules = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:") and "|" in line]
    return done, modules


@pytest.mark.process
def test_analyze_help_from_the_console_script_loads_no_runtime():
    script = shutil.which("otel-coldstart", path=os.path.dirname(sys.executable))
    assert script, "the otel-coldstart console script is installed beside the interpreter"
    done, modules = _imported_by([script, "analyze", "--help"])
    assert done.returncode == 0 and "--format" in done.stdout
    assert "otel_coldstart.cli.analyze" in modules  # the import log is the real one
    assert _runtime(modules) == []
    for command in ("compare", "capacity"):
        done, modules = _imported_by([script, command, "--help"])
        assert done.returncode == 0 and _runtime(modules) == [], command


@pytest.mark.process
def test_the_package_face_is_cheap_and_still_the_whole_api():
    code = ("import sys, otel_coldstart\n"
            "face = set(sys.modules)\n"
            "names = [n for n in otel_coldstart.__all__ if n != 'ColdstartInstrumentor']\n"
            "assert all(callable(getattr(otel_coldstart, n)) for n in names if n != '__version__')\n"
            "with otel_coldstart.phase('x'):\n"  # not instrumented: a no-op that loads nothing
            "    pass\n"
            "otel_coldstart.ready(); otel_coldstart.uninstrument()\n"
            "assert otel_coldstart.trace_file() is None\n"
            "print('\\n'.join(set(sys.modules) - face))\n"
            "print('FACE', *sorted(m for m in face if m.startswith('otel_coldstart')))\n"
            "from otel_coldstart import ColdstartInstrumentor\n"
            "print('INSTRUMENTOR', ColdstartInstrumentor.__name__, otel_coldstart.__version__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    face = next(line for line in done.stdout.splitlines() if line.startswith("FACE")).split()[1:]
    assert face == ["otel_coldstart", "otel_coldstart.package"]
    assert _runtime(done.stdout.split("FACE")[0].split()) == []  # phase/ready/uninstrument loaded nothing
    assert "INSTRUMENTOR ColdstartInstrumentor 0." in done.stdout


@pytest.mark.process
def test_help_keeps_the_user_guide():
    code = "import pydoc, otel_coldstart; print(pydoc.render_doc(otel_coldstart, renderer=pydoc.plaintext))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    for needle in ("What you get", "otel_coldstart.instrument()", "instrument(tracer_provider",
                   "ready()", "class phase", "graph_batch_size(size", "ColdstartInstrumentor"):
        assert needle in done.stdout, needle


# Programs that use the public API as a user does (they run in a user's process): the one
# place a module may import the package face by name.
USER_PROGRAMS = {"demo.py", "_demo_child.py", os.path.join("_bootstrap", "sitecustomize.py")}


def _submodules() -> set[str]:
    return {name for _, name, _ in pkgutil.iter_modules([PACKAGE_DIR])}


def test_no_module_imports_back_up_to_the_package_face():
    submodules = _submodules()
    offenders = []
    for directory, _, files in os.walk(PACKAGE_DIR):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(directory, file)
            relative = os.path.relpath(path, PACKAGE_DIR)
            if relative == "__init__.py" or relative in USER_PROGRAMS:
                continue
            package = ["otel_coldstart", *os.path.dirname(relative).split(os.sep)] if os.path.dirname(relative) \
                else ["otel_coldstart"]
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    offenders += [f"{relative}: import {a.name}" for a in node.names if a.name == "otel_coldstart"]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = package[:len(package) - node.level + 1] if node.level > 1 else package
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    if target == "otel_coldstart":
                        offenders += [f"{relative}: from {'.' * node.level or 'otel_coldstart'} import {a.name}"
                                      for a in node.names if a.name not in submodules]
    assert offenders == []
