"""The host's warnings keep the host's line (issue 22.4), in host processes: the same
operations run plain and instrumented must produce the same warnings at the same places,
and the host's own filters must act on them as they would without us.

The host processes are forked from a server that imported torch and safetensors once
(the ``fork_server`` fixture, tests/_forkserver.py): each child script imports torch before
it instruments, so a torch imported before the fork is the same host; the script still runs
as ``python [-W ...] -c`` would run it (``__main__``, ``<string>``, its lines, its filters).

On main before this change the wrappers' lines took the warnings: ``torch.load`` of a
TorchScript archive no longer raised under ``filterwarnings("error", module="__main__")``,
and under the default filter two call sites of the host collapsed into one."""

from __future__ import annotations

import json
import os

import pytest

SPREAD_OVER_WORKERS = True  # no shared fixture: `make test` spreads its tests over the workers

CHILD = r"""
import json, os, sys, warnings
mode, op, how = sys.argv[1], sys.argv[2], sys.argv[3]
seen = []

def record(message, category, filename, lineno, file=None, line=None):
    seen.append([category.__name__, os.path.basename(filename), lineno])

warnings.showwarning = record  # the host's own hook, installed before instrument()
if how == "error":
    warnings.filterwarnings("error", module="__main__")  # the host's module only
import torch
import safetensors.torch

workdir = sys.argv[4]
script = os.path.join(workdir, "script.pt")
if not os.path.exists(script):
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
weights = os.path.join(workdir, "w.safetensors")
safetensors.torch.save_file({"w": torch.ones(4)}, weights)
if op == "load_file":
    # A library that warns at its entry, as torch.load does (stacklevel=2: its caller's line).
    original = safetensors.torch.load_file
    def load_file(*args, **kwargs):
        warnings.warn("loading a checkpoint from a legacy location", UserWarning, stacklevel=2)
        return original(*args, **kwargs)
    safetensors.torch.load_file = load_file
if mode == "traced":
    import otel_coldstart
    otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False, progress_interval_s=0)

def site_a():  # call site A: each operation on a line of its own
    if op == "torch_load":
        torch.load(script, weights_only=False)
    elif op == "load_file":
        safetensors.torch.load_file(weights)
    elif op == "to":
        torch.ones(2, dtype=torch.complex64).to(torch.float32)
    elif op == "pin_memory":
        torch.ones(2).pin_memory("cpu")

def site_b():  # call site B: the same operations, other lines
    if op == "torch_load":
        torch.load(script, weights_only=False)
    elif op == "load_file":
        safetensors.torch.load_file(weights)
    elif op == "to":
        torch.ones(2, dtype=torch.complex64).to(torch.float32)
    elif op == "pin_memory":
        torch.ones(2).pin_memory("cpu")

raised = []
for site in (site_a, site_b):
    try:
        site()
    except BaseException as error:
        raised.append(type(error).__name__)
print(json.dumps({"seen": [s for s in seen if s[1] == "<string>"], "raised": raised}))
"""

OPS = ["torch_load", "load_file", "to", "pin_memory"]


def _run(fork_server, tmp_path, mode, op, how):
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), PYTHONWARNINGS="")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(name, None)
    done = fork_server.run(["-c", CHILD, mode, op, how, str(tmp_path)], env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.process
@pytest.mark.parametrize("op", OPS)
def test_a_module_scoped_error_filter_still_raises_from_inside_a_wrapped_call(fork_server, tmp_path, op):
    plain = _run(fork_server, tmp_path, "plain", op, "error")
    traced = _run(fork_server, tmp_path, "traced", op, "error")
    if op != "pin_memory":  # torch turns pin_memory's warning-as-error into its own RuntimeError
        assert plain["raised"] and plain["raised"][0].endswith("Warning"), plain  # the host's filter at work
    assert traced == plain


@pytest.mark.process
@pytest.mark.parametrize("op", OPS)
def test_under_the_default_filter_each_call_site_gets_its_own_warning(fork_server, tmp_path, op):
    plain = _run(fork_server, tmp_path, "plain", op, "default")
    traced = _run(fork_server, tmp_path, "traced", op, "default")
    if op in ("torch_load", "load_file"):  # torch's C++ cast warning is its own once per process
        assert len({tuple(s) for s in plain["seen"]}) == 2, plain
    assert traced == plain


def test_the_hook_and_filter_go_with_uninstrument_and_leave_the_hosts_in_place():
    import warnings

    import otel_coldstart
    from otel_coldstart import _host_warnings

    otel_coldstart.uninstrument()
    before_hook, before_filters = warnings.showwarning, list(warnings.filters)
    before_showwarnmsg = warnings._showwarnmsg
    otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False, progress_interval_s=0)
    try:
        assert warnings._showwarnmsg is _host_warnings._showwarnmsg
        assert warnings.showwarning is before_hook  # the host's hook is left alone: ours is before it
    finally:
        otel_coldstart.uninstrument()
    assert warnings.showwarning is before_hook and warnings.filters == before_filters
    assert warnings._showwarnmsg is before_showwarnmsg


# Issue 39: the warnings torch raises inside our wrappers, in the host's own module, seen
# the three ways a host sees them: recorded (catch_warnings(record=True): pytest's warnings
# summary, pytest.warns), printed by the default hook, and turned into errors by a filter
# naming the host's module; before ready() and after it (torch.load stays wrapped).
HOST_MODULE = r"""
import torch

def complex_half():
    return torch.ones(2, dtype=torch.complex32).to(torch.complex64)

def complex_to_real():
    return torch.ones(2, dtype=torch.complex64).to(torch.float32)

def tensor_of_tensor():
    return torch.tensor(torch.ones(2))

def load_script(path):
    return torch.load(path, weights_only=False)
"""

WARNING_CASES = r"""
import json, os, sys, warnings
mode, when, how, workdir = sys.argv[1:5]
sys.path.insert(0, workdir)
import torch
import hostmod

script = os.path.join(workdir, "script.pt")
if not os.path.exists(script):
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
if mode == "traced":
    import otel_coldstart
    otel_coldstart.instrument(summary=False, progress_interval_s=0)
    if when == "after":
        otel_coldstart.ready()
cases = [("complex_half", hostmod.complex_half), ("complex_to_real", hostmod.complex_to_real),
         ("tensor_of_tensor", hostmod.tensor_of_tensor), ("load_script", lambda: hostmod.load_script(script))]
out = []
for name, call in cases:
    if how == "record":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        out.extend([name, w.category.__name__, os.path.basename(w.filename), w.lineno, str(w.message)] for w in caught)
    else:
        try:
            call()
        except Exception as error:
            out.append([name, "raised", type(error).__name__, str(error)])
print(json.dumps(out))
"""


def _warnings_seen(fork_server, tmp_path, mode, when, how):
    (tmp_path / "hostmod.py").write_text(HOST_MODULE)
    env = dict(os.environ, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "traces"), PYTHONWARNINGS="")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(name, None)
    flags = ["-W", "error::UserWarning:hostmod"] if how == "error" else []
    done = fork_server.run([*flags, "-c", WARNING_CASES, mode, when, how, str(tmp_path)], env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line for line in done.stderr.splitlines() if "Warning: " in line and not line.startswith(" ")]
    return json.loads(done.stdout.strip().splitlines()[-1]), printed


@pytest.mark.process
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("how", ["record", "printed", "error"])
def test_warnings_inside_wrapped_calls_keep_the_callers_file_and_line(fork_server, tmp_path, how, when):
    plain, plain_printed = _warnings_seen(fork_server, tmp_path, "plain", when, how)
    traced, traced_printed = _warnings_seen(fork_server, tmp_path, "traced", when, how)
    if how == "record":
        # Each case warns in the host module, at its line (filename, lineno, category, message).
        assert {w[0] for w in plain if w[2] == "hostmod.py"} == {"complex_half", "complex_to_real",
                                                                  "tensor_of_tensor", "load_script"}, plain
    elif how == "error":
        assert [w[0] for w in plain if w[1] == "raised"] == ["complex_half", "complex_to_real", "tensor_of_tensor",
                                                             "load_script"], plain
    else:
        assert sum("hostmod.py:" in line for line in plain_printed) == 4, plain_printed
    assert traced == plain
    assert traced_printed == plain_printed
