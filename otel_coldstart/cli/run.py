"""``otel-coldstart run -- CMD ...``: trace a command's start-up with no code change and no
OpenTelemetry distro.

Every Python process the command starts (the command itself, and the ranks a launcher such
as ``torchrun`` spawns) calls ``otel_coldstart.instrument()`` first thing: a directory whose
``sitecustomize`` does that goes first on ``PYTHONPATH``. A launcher span (``coldstart.launch``)
is started here and passed down in ``TRACEPARENT``, so all those processes share one trace.
The command's exit status is ours; a signal that killed it gives 128 + the signal number.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from . import _run_notes
from .errors import EXIT_USAGE, CliError

# Like a shell: the command could not be found, or could not be executed.
EXIT_COMMAND_NOT_FOUND = 127
EXIT_COMMAND_NOT_EXECUTABLE = 126

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_bootstrap")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output-dir", default=None,
                        help="where OTLP JSON traces go when no exporter is configured "
                             "(default ./otel-coldstart-traces, or OTEL_COLDSTART_OUTPUT_DIR)")
    parser.add_argument("--no-launch-span", action="store_true",
                        help="do not start a coldstart.launch span: each process's start-up is its own "
                             "trace (or joins a TRACEPARENT already set)")
    parser.add_argument("--span-name", default=None, help="name of the launch span (default coldstart.launch)")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                        help="the command to run, after --")


def command_env(base: dict[str, str], output_dir: str | None) -> dict[str, str]:
    """``base`` with our bootstrap directory first on ``PYTHONPATH``."""
    env = dict(base)
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOTSTRAP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *entries])
    if output_dir:
        env["OTEL_COLDSTART_OUTPUT_DIR"] = os.path.abspath(output_dir)
    return env


def run(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CliError("give the command to run after --, e.g. otel-coldstart run -- python serve.py", EXIT_USAGE)
    report_dir = _run_notes.make_report_dir()
    try:
        if args.no_launch_span:
            status = _run(command, _with_report_dir(command_env(dict(os.environ), args.output_dir), report_dir))
            _say_what_was_not_traced(command, _run_notes.read_notes(report_dir))
            return status
        from ..launch import Launch
        from ..semconv import SPAN_LAUNCH

        with Launch(args.span_name or SPAN_LAUNCH, output_dir=args.output_dir,
                    attributes=launch_attributes(command)) as launched:
            status = _run(command, _with_report_dir(command_env(launched.env(), args.output_dir), report_dir))
            notes = _run_notes.read_notes(report_dir)
            launched.set_attributes(notes.span_attributes())  # analyze explains a trace with no start-up
            _say_what_was_not_traced(command, notes)
            return status
    finally:
        _run_notes.remove_report_dir(report_dir)


def _with_report_dir(env: dict[str, str], report_dir: str) -> dict[str, str]:
    env[_run_notes.REPORT_DIR_VARIABLE] = report_dir
    return env


def _say_what_was_not_traced(command: list[str], notes: _run_notes.RunNotes) -> None:
    problem = notes.problem(command)
    if problem:
        print(f"otel-coldstart run: WARNING: {problem}", file=sys.stderr)


def launch_attributes(command: list[str]) -> dict:
    """What the launch span says about the command: the executable, and the arguments with
    the values of secret-looking options and URL credentials redacted (docs/conventions.md)."""
    from .._redact import redact_argv

    args = redact_argv(command)
    return {"process.executable.name": os.path.basename(args[0]) if args else "",
            "process.command_args": args}


def _run(command: list[str], env: dict[str, str]) -> int:
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise CliError(f"command not found: {command[0]}", EXIT_COMMAND_NOT_FOUND) from None
    except PermissionError:
        raise CliError(f"cannot execute {command[0]}: permission denied", EXIT_COMMAND_NOT_EXECUTABLE) from None
    except OSError as exc:
        raise CliError(f"cannot execute {command[0]}: {exc.strerror or exc}", EXIT_COMMAND_NOT_EXECUTABLE) from None
    # The child is in our process group: Ctrl-C reaches it directly. A SIGTERM sent to us
    # (an orchestrator stopping the pod) is passed on, so its start-up is ended and exported.
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    except ValueError:  # not the main thread
        previous = None
    try:
        while True:
            try:
                status = child.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got the SIGINT too; wait for it to finish
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 128 - status if status < 0 else status

