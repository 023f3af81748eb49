"""A fork server for the ending matrix (test_ending_matrix.py).

Importing torch, safetensors and transformers takes seconds; the matrix has 120 cases, each
a real process ended for real. So this process imports them once, uninstrumented, and forks
one child per case: the child instruments itself (its root span starts at the fork, as a
process start), runs the case, and ends as the case says (ready(), a normal exit, an
uncaught exception, or a real signal the test sends from outside). The exit status goes
back to the test through this server, which reaps its children.

Protocol (one line each way, tests/_fork_loop.py, which both fork servers of the tests share):
the test writes a case as JSON on stdin; the server answers ``PID <case id> <pid>`` and, when
the child is gone, ``EXIT <pid> <exit code>`` (``os.waitstatus_to_exitcode``: -15 for
SIGTERM). Everything the child prints goes to files in its case directory.
"""

import json
import os
import sys
import threading

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _TESTS)
from _fork_loop import serve  # noqa: E402

sys.path.remove(_TESTS)  # the cases' hosts see the path a script in tests/core would have

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import safetensors.torch  # noqa: E402,F401
import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.core_model_loading  # noqa: E402,F401
import transformers.models.bert.modeling_bert  # noqa: E402,F401  (what the cases load, imported once)
from safetensors import safe_open  # noqa: E402,F401

import otel_coldstart  # noqa: E402,F401  (imported, not instrumented: each child instruments)

torch.set_num_threads(1)  # one intra-op thread: the single-threaded breakdown rule applies


CASE = serve()

# --- from here on: the child, one case ---------------------------------------------------------

import signal  # noqa: E402
import time  # noqa: E402

# The child is the host: it starts with Python's own SIGINT handling, as a program started from
# a shell does, whatever the test runner that started the zygote had (CI's full run once had
# every sigint case's child ignore the signal until the harness's 90 s ran out, while the file
# alone passed). What it inherited is said on stderr, which a hung case's failure shows.
_inherited = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
if _inherited[0] is not signal.default_int_handler or _inherited[1]:
    print(f"ending_zygote: inherited SIGINT handler {_inherited[0]!r}, blocked {sorted(_inherited[1])}",
          file=sys.stderr)
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

directory = CASE["dir"]
os.chdir(directory)
for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
    target = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(target, fd)
    os.close(target)
sys.stdin = open(os.devnull)
import faulthandler  # noqa: E402

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for our stacks if we hang
os.environ.update(CASE["env"])
ENDING, LOADER, WHEN = CASE["ending"], CASE["loader"], CASE["when"]
TIMES = os.open(os.path.join(directory, "reads.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

import atexit  # noqa: E402
import ctypes  # noqa: E402


def _leave_without_teardown() -> None:
    """Registered before instrument(), so it runs after every atexit handler of ours: end the
    process as Py_RunMain would after finalising (exit 1 after an uncaught exception, death by
    SIGINT when CPython's "unhandled KeyboardInterrupt" flag is set, which our own exit handler
    must have left set), but without the interpreter's teardown: in a forked child of a process
    holding torch and transformers, decref'ing every object copies every page (3 s a case)."""
    sys.stdout.flush()
    sys.stderr.flush()
    # The exception that ended the case, if one did: sys.last_value alone is also set by C code
    # that prints an error while the program goes on (torch's warnings turned into errors), and
    # only one that ended the program has a traceback from an outermost frame (nothing called it).
    error = getattr(sys, "last_value", None)
    traceback = getattr(error, "__traceback__", None)
    ended_by = error if traceback is not None and traceback.tb_frame.f_back is None else None
    try:
        interrupted = bool(ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value)
    except ValueError:
        interrupted = isinstance(ended_by, KeyboardInterrupt)
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(1 if isinstance(ended_by, BaseException) and not isinstance(ended_by, SystemExit) else 0)


atexit.register(_leave_without_teardown)
otel_coldstart.instrument()


def note(**fields) -> None:
    os.write(TIMES, (json.dumps(fields) + "\n").encode())


def hold(where: str) -> None:
    """Where the case ends: inside the read (``during``) or in the later phase."""
    os.close(os.open(os.path.join(directory, f"HOLD-{where}"), os.O_WRONLY | os.O_CREAT, 0o644))
    if ENDING == "ready":
        if where == "during":  # ready() from another thread while the read goes on
            helper = threading.Thread(target=otel_coldstart.ready)
            helper.start()
            helper.join()
        else:
            otel_coldstart.ready()
        return
    if ENDING == "exit":
        sys.exit(0)
    if ENDING == "exception":
        raise RuntimeError("the disk caught fire")
    # A real signal from the test ends us here. Short sleeps, not one long one: a SIGINT that
    # lands after the HOLD file is made but before the sleep's syscall only sets CPython's
    # flag, and a 120 s sleep would not look at it again until it returns (CI saw a
    # sigint case wait past the harness's 90 s that way on a loaded machine).
    for _ in range(1200):
        time.sleep(0.1)


# Inside the read: the first call of the loader's own reading function (a C function) after
# arming, seen by a profile hook, which is host code running on the reading thread.
_TRIGGERS = {"load_file": "get_tensors", "safe_open": "get_tensor", "torch_load": "get_record",
             "torch_load_mmap": "get_record", "from_pretrained": "__exit__"}
_armed = []


def _profile(frame, event, arg):
    if event != "c_call" or not _armed or getattr(arg, "__name__", None) != _TRIGGERS[LOADER]:
        return
    if LOADER == "from_pretrained" and type(getattr(arg, "__self__", None)).__name__ != "safe_open":
        return
    _armed.clear()
    sys.setprofile(None)
    hold("during")


# Python 3.12+ passes a bound method of a C extension type (torch's pybind11
# PyTorchFileReader.get_record) to the profile hook's shim as the bound method itself, for
# which it emits no c_call: there the same hook runs from sys.monitoring's CALL event, which
# sees every callable (issue 42).
_MONITORING_TOOL = 4  # an id PEP 669 leaves to tools


def _on_call(code, offset, callable_, arg0):
    if _armed and getattr(callable_, "__name__", None) == _TRIGGERS[LOADER]:
        _disarm_monitoring()  # before hold(), which may not return (exit, a signal)
        _profile(None, "c_call", callable_)


def _disarm_monitoring() -> None:
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None and monitoring.get_tool(_MONITORING_TOOL) is not None:
        monitoring.set_events(_MONITORING_TOOL, 0)


def arm() -> None:
    if WHEN == "during":
        _armed.append(True)
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and LOADER in ("torch_load", "torch_load_mmap"):
            if monitoring.get_tool(_MONITORING_TOOL) is None:
                monitoring.use_tool_id(_MONITORING_TOOL, "ending-matrix")
            monitoring.register_callback(_MONITORING_TOOL, monitoring.events.CALL, _on_call)
            monitoring.set_events(_MONITORING_TOOL, monitoring.events.CALL)
        else:
            sys.setprofile(_profile)


def load(path_or_dir: str, last: bool) -> dict:
    if last:
        arm()
    start = time.time_ns()
    if LOADER == "load_file":
        state = safetensors.torch.load_file(path_or_dir)
    elif LOADER == "safe_open":
        state = {}
        with safe_open(path_or_dir, framework="pt") as handle:
            for key in handle.keys():
                state[key] = handle.get_tensor(key)
    elif LOADER in ("torch_load", "torch_load_mmap"):
        state = torch.load(path_or_dir, weights_only=True, mmap=LOADER == "torch_load_mmap")
    else:
        model = transformers.AutoModel.from_pretrained(path_or_dir, dtype=torch.float32)
        state = dict(model.state_dict())
    note(path=path_or_dir, start_ns=start, end_ns=time.time_ns())
    sys.setprofile(None)
    _armed.clear()
    _disarm_monitoring()
    # The host uses what it loaded, as load_state_dict would: every page is read by now.
    for tensor in state.values():
        tensor.float().sum()
    return state


loaded = {}
for index, path in enumerate(CASE["files"]):
    loaded.update(load(path, index == len(CASE["files"]) - 1))
with otel_coldstart.phase("warmup"):
    total = sum(float(t.float().sum()) for t in loaded.values())
    if WHEN == "later":
        hold("later")
sys.exit(0)
