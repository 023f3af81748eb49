"""The ``otel-coldstart`` command: one module per sub-command, each ``add_arguments(parser)``
and ``run(args) -> int``, imported only when its command runs or its ``--help`` is asked
(``otel-coldstart --help`` imports none of them: their help lines are here).

Exit codes: see docs/cli.md and cli/errors.py. Bad input gets one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
from collections.abc import Iterable, Sequence

from .errors import EXIT_OUTPUT_FAILED, CliError

_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF, errno.EFBIG, errno.EROFS})

# Each sub-command (its module is cli/<name>.py) and its one line of help.
COMMANDS = {
    "demo": "Generate (once) a small Llama-shaped 4-shard safetensors checkpoint, evict its first shard from the "
            "page cache, load it instrumented and print the breakdown (the report on stdout, progress on stderr).",
    "analyze": "Print where the start-up time went, and what to do about it, for the start-ups in trace files.",
    "floor": "Read the files (or every file in the directories) with plain read(2), evicted from the page cache and "
             "then resident, and print the bytes/s: the floor a loader's throughput compares against.",
    "compare": "Per-phase medians, spread and a verdict (slower / faster / within noise) between two traces or two "
               "sets of traces.",
    "capacity": "p50/p95 start-up per phase and per instance type over many traces, the autoscaler lead time and, "
                "for a demand ramp, the warm pool.",
    "run": "Run a command with every Python process it starts instrumented, all in one trace.",
    "whatif": "Projected p50/p95 start-up per lever (prewarm, serving-dtype, pinned, compile-cache, fewer-captures, "
              "to-safetensors, bytecode, prewarm-imports, all), from the traces' own evidence, with the assumptions "
              "in words.",
    "export": "Load trace files into ClickHouse, in the table the Collector's ClickHouse exporter writes (for "
              "capacity/compare/whatif --clickhouse).",
}
_READ_TRACES = ("analyze", "compare", "capacity", "whatif")  # run with the garbage collector paused


def command_module(name: str):
    # The import statement's own function: ``-X importtime`` logs it (importlib.import_module it does not).
    __import__(f"{__name__}.{name}")
    return sys.modules[f"{__name__}.{name}"]


def build_parser(with_arguments: Iterable[str] = COMMANDS) -> argparse.ArgumentParser:
    """Every sub-command, with the options of those in ``with_arguments`` (importing their
    modules): the others are only named, which is all the top-level --help shows."""
    from ..package import __version__

    parser = argparse.ArgumentParser(prog="otel-coldstart", description="Model start-up tracing and analysis.")
    parser.add_argument("--version", action="version", version=f"otel-coldstart {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, help_text in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if name in with_arguments:
            command_module(name).add_arguments(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The sub-command is the first word that is not an option (the top level's options take no value).
    parser = build_parser([next((word for word in argv if not word.startswith("-")), "")])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    if sys.stdout is None:  # started with stdout closed (`>&-`): writing it is an error, said once
        sys.stdout = _ClosedStdout()
    try:
        command = command_module(args.command)
        if args.command in _READ_TRACES:
            from ._inputs import paused_gc

            with paused_gc():  # span records have no cycles; see _inputs.paused_gc
                return command.run(args)
        return command.run(args)
    except CliError as exc:
        print(f"otel-coldstart: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `otel-coldstart ... | head` closed the pipe: the reader has what it wanted.
        # (Commands turn network errors into CliError; only stdout's pipe gets here.)
        _discard_stdout()
        return 0
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise
        # Reading errors are CliErrors by now: what is left is writing the report (stdout on
        # a full disk, `>/dev/full`, or an --output FILE whose disk filled up).
        print(f"otel-coldstart: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        _discard_stdout()
        return EXIT_OUTPUT_FAILED


class _ClosedStdout(io.TextIOBase):
    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of what is still buffered
    does not fail again (with a traceback) after our one-line error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file descriptor
        pass
