"""An exit before ready() is reported as the exception that ended the program only when one did
(ending.uncaught_exception).

torch prints some warnings turned into errors with ``PyErr_Print`` while the program goes on
(``Tensor.pin_memory("cpu")``'s DeprecationWarning under ``-W error``): that sets
``sys.last_value`` as an uncaught exception does, the host catches torch's RuntimeError and
exits 0, and the report said "NOT READY: uncaught DeprecationWarning before ready()". The
processes are forked from the tests' fork server (torch imported once: what is tested is the
exit), and the case of that report also runs in a fresh interpreter, as a user meets it.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import subprocess
import sys

import pytest

from otel_coldstart import ending, semconv
from test_keyboard_interrupt_flag import at_top_level

# A host that runs with warnings as errors, meets torch's printed warning, carries on, then
# ends as argv[1] says: normally, or with an uncaught exception of its own.
HOST = r"""
import sys, warnings
warnings.filterwarnings("error")
import torch
import otel_coldstart
otel_coldstart.instrument(summary=False, handle_sigterm=False)
try:
    torch.ones(2).pin_memory("cpu")
except RuntimeError:
    pass
print("PRINTED", type(getattr(sys, "last_value", None)).__name__, flush=True)
if sys.argv[1] == "raise":
    def serve():
        raise ValueError("the model server failed")
    serve()
"""


def _end_of(fork_server, tmp_path, how: str, fresh: bool = False) -> tuple[object, dict, str]:
    """The host's completed process (forked, or a fresh interpreter), its start-up as
    `analyze --format json` reports it, and its trace."""
    traces = tmp_path / f"{how}-{'fresh' if fresh else 'forked'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_COLDSTART_OUTPUT_DIR=str(traces), PYTHONWARNINGS="")
    if fresh:
        done = subprocess.run([sys.executable, "-c", HOST, how], env=env, capture_output=True, text=True, timeout=300)
    else:
        done = fork_server.run(["-c", HOST, how], env=env, timeout=300)
    (trace,) = glob.glob(str(traces / "startup-*.otlp.jsonl"))
    from otel_coldstart.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["analyze", trace, "--format", "json"])
    (startup,) = json.loads(out.getvalue())["startups"]
    return done, startup, trace


@pytest.mark.process
@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "fresh"])
def test_a_warning_torch_printed_and_the_host_survived_is_not_the_end(fork_server, tmp_path, fresh):
    done, startup, _ = _end_of(fork_server, tmp_path, "exit", fresh)
    assert done.returncode == 0, done.stderr[-3000:]
    # The premise: torch did set sys.last_value in a process that goes on (else this tests nothing).
    assert "PRINTED DeprecationWarning" in done.stdout, (done.stdout, done.stderr[-2000:])
    assert (startup["end_reason"], startup["ready"]) == (semconv.END_EXIT, False), startup["end_reason"]
    assert "DeprecationWarning: The argument 'device'" in done.stderr  # torch's print, as without us


@pytest.mark.process
def test_an_uncaught_exception_after_it_is_still_the_end(fork_server, tmp_path):
    from otel_coldstart.analyze.readers import read_trace_file

    done, startup, trace = _end_of(fork_server, tmp_path, "raise")
    assert done.returncode == 1 and "ValueError: the model server failed" in done.stderr
    assert startup["end_reason"] == semconv.END_EXCEPTION
    (root,) = [span.attributes for span in read_trace_file(trace) if span.is_root]
    assert root[semconv.END_EXCEPTION_TYPE] == "ValueError", root


# --- the rule itself, on exceptions made here ----------------------------------------------------


def _caught_here() -> BaseException:
    def inner():
        raise ValueError("caught by its caller")

    try:
        inner()
    except ValueError as error:
        return error
    raise AssertionError("unreachable")


@pytest.mark.parametrize("attribute", ["last_value", "last_exc"])
def test_the_rule(monkeypatch, attribute):
    if attribute == "last_exc" and sys.version_info < (3, 12):
        pytest.skip("sys.last_exc is 3.12's")
    for name in ("last_value", "last_exc"):
        monkeypatch.delattr(sys, name, raising=False)
    assert ending.uncaught_exception() is None and ending.exit_reason() == (semconv.END_EXIT, None)
    printed_from_c = DeprecationWarning("printed by PyErr_Print, no Python frame passed")
    monkeypatch.setattr(sys, attribute, printed_from_c, raising=False)
    assert printed_from_c.__traceback__ is None and ending.uncaught_exception() is None
    # Caught in a frame that has a caller (this test's): not the end of the program.
    monkeypatch.setattr(sys, attribute, _caught_here(), raising=False)
    assert ending.uncaught_exception() is None
    monkeypatch.setattr(sys, attribute, at_top_level(SystemExit(0)), raising=False)
    assert ending.exit_reason() == (semconv.END_EXIT, None)
    # What the interpreter prints when the program ends on it: a traceback from an outermost frame.
    monkeypatch.setattr(sys, attribute, at_top_level(ValueError("the end")), raising=False)
    assert ending.exit_reason() == (semconv.END_EXCEPTION, "ValueError")
