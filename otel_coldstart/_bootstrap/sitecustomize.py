"""Instrument this Python process at start-up, for ``otel-coldstart run -- CMD``.

Python imports ``sitecustomize`` from the first directory on ``sys.path`` that has one, so
ours shadows any other (a distribution's, a virtualenv's, OpenTelemetry's). That one is run
first, then ``otel_coldstart.instrument()``. Nothing here may stop the host program: an
error in the shadowed sitecustomize is reported exactly as plain Python reports it
("Error in sitecustomize; ..."), and one of ours is reported and swallowed.
"""

import os
import sys


def _report_like_site(exc: BaseException) -> None:
    """What plain Python (site.execsitecustomize) does with an error in sitecustomize:
    report it and go on. Shadowing the host's sitecustomize must not hide its errors."""
    try:
        if sys.flags.verbose:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{exc.__class__.__name__}: {exc}\n")
    except Exception:  # no stderr to write to: as site.py, nothing more to say
        pass


def _run_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":  # raised inside the host's own sitecustomize
            _report_like_site(exc)
    except Exception as exc:
        _report_like_site(exc)
    finally:
        shadowed = sys.modules.get("sitecustomize")
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        if shadowed is not None and shadowed is not ours:
            sys.modules["otel_coldstart._bootstrap.shadowed_sitecustomize"] = shadowed


# Programs that only start other processes: their children are the start-ups. Instrumenting
# the launcher itself would add a start-up that loads nothing and never becomes ready.
_LAUNCHERS = frozenset({"torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed",
                        "accelerate", "mpirun"})


def _is_launcher() -> bool:
    argv = list(getattr(sys, "orig_argv", []))[1:]
    while argv and argv[0].startswith("-") and argv[0] != "-m":
        argv.pop(0)  # interpreter options such as -u or -X
    if not argv:
        return False
    program = argv[1] if argv[0] == "-m" and len(argv) > 1 else os.path.basename(argv[0])
    return program in _LAUNCHERS


def _disabled() -> bool:
    names = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return any(name.strip() in ("coldstart", "*") for name in names.split(",")) or _is_launcher()


try:
    _run_shadowed_sitecustomize()  # reports the host's own errors as Python would
except Exception:  # our own bookkeeping, before anything that could report it: the host starts regardless
    pass

# `otel-coldstart run` names a directory where every Python process it starts leaves one
# note (pid.json): whether it started the plugin, and if not, why. The launcher reads them
# when the command ends, so that "nothing was traced" is said, and recorded on the launch span.
RUN_REPORT_DIR_VARIABLE = "OTEL_COLDSTART_RUN_REPORT_DIR"


def _leave_note(state, why=None):
    directory = os.environ.get(RUN_REPORT_DIR_VARIABLE)
    if not directory:
        return
    try:
        import json

        note = {"pid": os.getpid(), "executable": sys.executable or "python", "state": state, "why": why,
                "python": "{}.{}.{}".format(*sys.version_info[:3])}
        path = os.path.join(directory, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as handle:
            json.dump(note, handle)
        os.replace(path + ".tmp", path)
    except Exception:  # the launcher then reports this process as one that never ran the bootstrap
        pass


def _say_not_traced(error):
    """Loudly, at the time: which interpreter, why, what to do. The host still runs."""
    executable = sys.executable or "python"
    why = f"{type(error).__name__}: {error}"
    try:
        sys.stderr.write(
            f"otel-coldstart run: WARNING: this process is NOT traced: {executable} (Python {sys.version_info[0]}."
            f"{sys.version_info[1]}) cannot import otel_coldstart ({why}); install otel-coldstart into that "
            f"interpreter's environment ({executable} -m pip install otel-coldstart), or run the command with "
            "the Python that otel-coldstart is installed in\n")
        sys.stderr.flush()
    except Exception:  # no stderr: the note left for the launcher still says why
        pass
    return f"{executable} cannot import otel_coldstart ({why})"


if _disabled():
    _leave_note("skipped")
else:
    try:
        import otel_coldstart
    except Exception as error:  # ImportError, or a dependency that fails to import
        _leave_note("cannot_import", _say_not_traced(error))
    else:
        try:
            otel_coldstart.instrument()
            _leave_note("started")
        except Exception as error:
            _leave_note("failed", f"instrument() raised {type(error).__name__}: {error}")
            try:
                from otel_coldstart._errors import report_internal_error

                report_internal_error("otel-coldstart run: instrument()")
            except Exception:  # the note above says it already; the host runs on
                pass
