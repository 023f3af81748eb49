"""The ``otel-coldstart`` command: one module per sub-command, each ``main(args) -> int``.

Exit codes: see docs/cli.md and cli/errors.py. Bad input gets one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from . import analyze as analyze_cmd
from . import capacity as capacity_cmd
from . import compare as compare_cmd
from . import demo as demo_cmd
from . import floor as floor_cmd
from . import run as run_cmd
from .errors import CliError

COMMANDS = {"demo": demo_cmd, "analyze": analyze_cmd, "floor": floor_cmd,
            "compare": compare_cmd, "capacity": capacity_cmd, "run": run_cmd}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otel-coldstart", description="Model start-up tracing and analysis.")
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
    try:
        return COMMANDS[args.command].run(args)
    except CliError as exc:
        print(f"otel-coldstart: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `otel-coldstart ... | head` closed the pipe: the reader has what it wanted. Point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        # (Commands turn network errors into CliError; only stdout's pipe gets here.)
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # stdout is not a file descriptor
            pass
        return 0
