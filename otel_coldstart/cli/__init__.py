"""The ``otel-coldstart`` command: one module per sub-command, each ``main(args) -> int``.

Exit codes: see docs/cli.md and cli/errors.py. Bad input gets one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
from typing import Sequence

from . import analyze as analyze_cmd
from . import capacity as capacity_cmd
from . import compare as compare_cmd
from . import demo as demo_cmd
from . import export as export_cmd
from . import floor as floor_cmd
from . import run as run_cmd
from . import whatif as whatif_cmd
from .errors import EXIT_OUTPUT_FAILED, CliError

_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF, errno.EFBIG, errno.EROFS})

COMMANDS = {"demo": demo_cmd, "analyze": analyze_cmd, "floor": floor_cmd,
            "compare": compare_cmd, "capacity": capacity_cmd, "run": run_cmd, "whatif": whatif_cmd,
            "export": export_cmd}


def build_parser() -> argparse.ArgumentParser:
    from ..package import __version__

    parser = argparse.ArgumentParser(prog="otel-coldstart", description="Model start-up tracing and analysis.")
    parser.add_argument("--version", action="version", version=f"otel-coldstart {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    if sys.stdout is None:  # started with stdout closed (`>&-`): writing it is an error, said once
        sys.stdout = _ClosedStdout()
    try:
        if args.command in ("analyze", "compare", "capacity", "whatif"):
            from ._inputs import paused_gc

            with paused_gc():  # span records have no cycles; see _inputs.paused_gc
                return COMMANDS[args.command].run(args)
        return COMMANDS[args.command].run(args)
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
