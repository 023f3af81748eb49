"""The fork server of tests/_forkserver.py (run as ``python _forkserver_main.py``).

It imports torch and safetensors once, uninstrumented (otel_coldstart and OpenTelemetry are
NOT imported: a child imports and instruments them itself, after its environment is set, as
the fresh process it replaces did), then forks one child per request. The child becomes the
``python [-W ...] -c CODE ARGS`` or ``python SCRIPT ARGS`` of the request: its environment,
working directory, ``sys.argv``, ``sys.path[0]``, ``-W`` filters and a new ``__main__`` module
(the code compiled as ``<string>`` or as the script's absolute path, so that warnings filtered
by ``module="__main__"``, ``__name__ == "__main__"`` and line numbers behave as they would).

What the ending matrix's server (tests/core/ending_zygote.py) taught, kept here:

- the serving loop (tests/_fork_loop.py, the zygote's too) writes with ``os.write`` only;
- the child starts with Python's own SIGINT handling and SIGINT/SIGTERM unblocked, whatever
  the test runner that started the server had;
- its stdout and stderr go to files (the client reads them when it has ended), its stdin is
  /dev/null (fd 0 too: the requests arrive on the server's fd 0);
- it ends as Py_RunMain would (the exit code of ``sys.exit``, 1 after an uncaught exception,
  death by SIGINT after an unhandled KeyboardInterrupt) once every atexit handler has run, the
  host's and torch's included, but WITHOUT the interpreter's teardown: decref'ing every object
  of a torch-heavy forked heap copies every page (3 s a child).

Protocol, one line each way (tests/_fork_loop.py): the client writes a request as JSON; the
server answers ``READY`` once, then ``PID <id> <pid>`` per request and ``EXIT <pid> <exit
code>`` when that child has ended (``os.waitstatus_to_exitcode``: -2 for SIGINT).

Differences from a fresh process, which is why tests about a fresh interpreter, import order
or timing, signals during start-up or process exit must not use this: torch and safetensors
are already imported when the child's code starts (a host that imported them before
instrument() is the same; one that instruments first is not, and says so where it runs here);
the child's ``-W`` filters are put in front of those torch's import added, not behind them;
a traceback of an uncaught exception shows one more frame (this file's line that runs the
code); the process's start time is the fork.
"""

import atexit
import os
import sys

from _fork_loop import serve  # this file's directory is sys.path[0]

_STATE = {"child": False, "code": 0, "interrupted": False}


def _leave_without_teardown() -> None:
    """Registered before anything else, so it runs after every other atexit handler. The exit
    status is the one the code's end gave (recorded below, not guessed from ``sys.last_value``:
    torch's C++ warnings set that through PyErr_Print in a process that then exits 0)."""
    if not _STATE["child"]:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if _STATE["interrupted"]:  # CPython's unhandled-KeyboardInterrupt exit: death by SIGINT
        import signal

        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(_STATE["code"])


atexit.register(_leave_without_teardown)

import gc  # noqa: E402

import safetensors  # noqa: E402,F401
import safetensors.torch  # noqa: E402,F401
import torch  # noqa: E402,F401

# The children must meet otel_coldstart and OpenTelemetry for the first time themselves.
_EARLY = sorted(name for name in sys.modules if name.startswith(("otel_coldstart", "opentelemetry")))
assert not _EARLY, f"the fork server imported {_EARLY}"

# Environment variables read while the interpreter, torch or safetensors start: the server
# read them once; a request that differs in one of them needs a fresh process instead.
_READ_AT_START = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "TORCH", "PYTORCH", "CUDA", "LD_",
                  "MALLOC_", "SAFETENSORS")
# Except those of modules the server has not imported: Inductor and Dynamo read theirs when a
# child first compiles (and Inductor writes TORCHINDUCTOR_CACHE_DIR into os.environ then, so a
# test process that compiled in-process passes it on to every later request).
_READ_LATER = tuple(prefix for prefix, module in (("TORCHINDUCTOR_", "torch._inductor"), ("TORCHDYNAMO_", "torch._dynamo"),
                                                  ("TORCH_COMPILE", "torch._dynamo"))
                    if module not in sys.modules)
_SERVER_ENV = dict(os.environ)

gc.freeze()  # what the imports allocated stays out of the children's collections (no page copies)


def _become(request: dict):
    """In the child: become the request's process; return its ``__main__`` and code."""
    import builtins
    import importlib.machinery
    import signal
    import types
    import warnings

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    directory = request["dir"]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    env = request["env"]
    differ = sorted(name for name in set(env) | set(_SERVER_ENV)
                    if name.startswith(_READ_AT_START) and not name.startswith(_READ_LATER)
                    and (env.get(name) or None) != (_SERVER_ENV.get(name) or None))
    if differ:
        os.write(2, f"fork server: {differ} differ from the server's, which read them at its start\n".encode())
        os._exit(97)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    if request.get("code") is not None:
        source, filename, argv0, path0 = request["code"], "<string>", "-c", ""
        main.__loader__ = importlib.machinery.BuiltinImporter
    else:
        argv0 = request["script"]
        filename = os.path.abspath(argv0)
        with open(filename, "rb") as handle:
            source = handle.read()
        path0 = os.path.dirname(os.path.realpath(filename))
        main.__file__ = filename
        main.__cached__ = None
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", filename)
    sys.argv[:] = [argv0, *request["argv"]]
    sys.path[0] = path0
    sys.modules["__main__"] = main
    if request["warnoptions"]:
        sys.warnoptions[:] = request["warnoptions"]
        warnings._processoptions(request["warnoptions"])  # what -W does at start-up
    return main, compile(source, filename, "exec", dont_inherit=True)


if __name__ == "__main__":
    _REQUEST = serve()
    _STATE["child"] = True
    _MAIN, _CODE = _become(_REQUEST)
    try:
        exec(_CODE, _MAIN.__dict__)
    except SystemExit as _exit:  # Py_RunMain's own handling follows (a message for a code that is no int)
        _STATE["code"] = 0 if _exit.code is None else _exit.code if isinstance(_exit.code, int) else 1
        raise
    except BaseException as _error:  # printed by sys.excepthook as Py_RunMain does, then exit 1
        _STATE["code"], _STATE["interrupted"] = 1, isinstance(_error, KeyboardInterrupt)
        raise
